"""Recovery recovers only what can still commit (DESIGN section 10): a code change between a failed run and its
clear.

A task whose files a job commit refused for good (a schema the table does not have) is re-run on the next
application attempt, not recovered into the same refusal forever; a changed ``partition_by`` or mapped list
length between a failed run and its clear either works exactly once or is refused with advice that, followed,
works. Driven as the operators drive the protocol: setup, the runner per task (recover, else run the callable),
commit, the failed run's teardown (``abort_job(keep_committed=True)``), and a clear (the next setup).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, JobConfigMismatch, JobIncomplete, run_task_attempt
from airflow_commit_provider.protocol.tables import SchemaMismatch

from .tables_worker import committer_for, run_job, task_rows
from .test_tables import base, expected, fmt, rows, transactions  # noqa: F401  (fixtures)


class Calls:
    """How often the user's callable ran, per task: one line per call in a file (as a DAG's callable would
    count them across processes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def note(self, task: int) -> None:
        with open(self.path, "a") as f:
            f.write(f"{task}\n")

    def count(self) -> int:
        return len(self.path.read_text().split()) if self.path.exists() else 0


def write_stage(c: FileOutputCommitter, tasks: int, attempt: int, calls: Calls, gen: int,
                extra: bool = False) -> list[str]:
    """One run's write tasks, each as the write operator runs it; returns their outcomes' statuses."""
    def produce(t: int):
        def run(w) -> None:
            calls.note(t)
            w.write(task_rows(t, 4, gen, {"note": pa.array(["new"] * 4)} if extra else None))
        return run
    return [run_task_attempt(c, t, attempt, produce(t)).status for t in range(tasks)]


def test_a_clear_after_a_refused_schema_reruns_the_tasks_instead_of_recovering_them(base, tmp_path):
    run_job(base)                                         # an earlier job made the table: (id, day, gen)
    cfg = {**base, "job_id": "events-2"}
    calls = Calls(tmp_path / "calls")
    c = committer_for(cfg)
    c.setup_job()
    assert write_stage(c, 3, 1, calls, gen=1, extra=True) == ["committed"] * 3   # the code adds a column
    with pytest.raises(SchemaMismatch, match=r"new column\(s\) \['note'\]") as refused:
        c.commit_job(3)
    message = str(refused.value)
    assert "tasks 0, 1, 2" in message and "re-run" in message and "setup" in message, message
    with pytest.raises(SchemaMismatch, match="re-run"):   # "clear only failed": the commit alone, same refusal
        committer_for(cfg).commit_job(3)
    assert rows(base) == expected() and transactions(base) == 1
    assert committer_for(cfg).abort_job(keep_committed=True)["aborted"]   # the failed run's teardown

    # the code is reverted and the whole run cleared: the next application attempt runs the callable again
    c = committer_for(cfg)
    c.setup_job()
    assert write_stage(c, 3, 2, calls, gen=1) == ["committed"] * 3
    assert calls.count() == 6
    manifest = c.commit_job(3)
    assert manifest["table"]["files_added"] == 6
    assert rows(base) == sorted(expected() + expected(gen=1))
    assert transactions(base) == 2


def test_a_table_less_first_job_keeps_the_schema_of_the_tasks_run_now(tmp_path):
    """No table yet, so no schema to compare with: a task recovered from the failed run (old code, a column more)
    disagrees with the tasks the current code ran. The current code's schema wins: only the recovered task is
    refused, and on the next clear only it runs again."""
    pytest.importorskip("deltalake")
    cfg = {"format": "delta", "location": str(tmp_path / "events"), "job_id": "first", "mode": "append",
           "partition_by": ["day"]}
    calls = Calls(tmp_path / "calls")
    c = committer_for(cfg)
    c.setup_job()
    assert write_stage(c, 1, 1, calls, gen=0, extra=True) == ["committed"]   # task 0; task 1 failed then
    c.abort_job(keep_committed=True)
    c = committer_for(cfg)
    c.setup_job()                                                          # code reverted, run cleared
    statuses = [run_task_attempt(c, 0, 2, lambda w: calls.note(0)).status,
                run_task_attempt(c, 1, 2, lambda w: (calls.note(1), w.write(task_rows(1, 4, 0)))).status]
    assert statuses == ["recovered", "committed"] and calls.count() == 2
    with pytest.raises(SchemaMismatch, match=r"task 0 .*re-run") as refused:
        c.commit_job(2)
    assert "task 1" not in str(refused.value).split("re-run")[0].split("files of")[-1]
    c.abort_job(keep_committed=True)
    c = committer_for(cfg)
    c.setup_job()
    statuses = [run_task_attempt(c, t, 3, lambda w, t=t: (calls.note(t), w.write(task_rows(t, 4, 0)))).status
                for t in range(2)]
    assert statuses == ["committed", "recovered"] and calls.count() == 3
    c.commit_job(2)
    assert rows(cfg) == expected(tasks=2)


def test_a_refused_task_not_run_again_is_named_by_the_commit(base, tmp_path):
    """A commit whose application attempt did not re-run a refused task (its write task not cleared) says which
    tasks, why, and what to clear; cleared so, the task runs and the job commits."""
    run_job(base)
    cfg = {**base, "job_id": "events-2"}
    calls = Calls(tmp_path / "calls")
    c = committer_for(cfg)
    c.setup_job()
    write_stage(c, 2, 1, calls, gen=1, extra=True)
    with pytest.raises(SchemaMismatch):
        c.commit_job(2)
    c.abort_job(keep_committed=True)
    c = committer_for(cfg)
    c.setup_job()
    assert run_task_attempt(c, 0, 2, lambda w: w.write(task_rows(0, 4, 1))).status == "committed"
    with pytest.raises(JobIncomplete, match=r"Task\(s\) 1 were refused by an earlier job commit.*clear") as missing:
        c.commit_job(2)
    assert missing.value.missing == [1]
    c.abort_job(keep_committed=True)
    c = committer_for(cfg)                                # the advice: the whole run cleared, task 1 runs
    c.setup_job()
    statuses = [run_task_attempt(c, t, 3, lambda w, t=t: (calls.note(t), w.write(task_rows(t, 4, 1)))).status
                for t in range(2)]
    assert statuses == ["recovered", "committed"]
    c.commit_job(2)
    assert rows(base) == sorted(expected() + expected(tasks=2, gen=1))


def test_a_table_partitioned_otherwise_is_refused_before_the_plan_and_a_clear_with_its_partitioning_commits(
        base, tmp_path):
    """The table is partitioned by ``day``, the job by ``gen``: refused before the plan is fixed (a fixed plan
    would repeat the table's refusal on every try, and abort nothing). Followed, the advice (the table's
    partitioning, then a clear of the whole run) starts the job over and commits every task once."""
    run_job(base)
    cfg = {**base, "job_id": "events-2", "partition_by": ["gen"]}
    calls = Calls(tmp_path / "calls")
    c = committer_for(cfg)
    c.setup_job()
    write_stage(c, 2, 1, calls, gen=1)
    with pytest.raises(SchemaMismatch, match=r"partitioned by .*day.*Give the stage the table's partitioning"):
        c.commit_job(2)
    assert c.job.commit_plan(c.job_record()) is None
    assert c.abort_job(keep_committed=True)["aborted"]
    c = committer_for({**cfg, "partition_by": ["day"]})
    c.setup_job()
    assert write_stage(c, 2, 2, calls, gen=1) == ["committed"] * 2 and calls.count() == 4
    c.commit_job(2)
    assert rows(base) == sorted(expected() + expected(tasks=2, gen=1))


def read_dir(root: Path) -> list[dict]:
    return sorted(pq.read_table(str(root), partitioning="hive").to_pylist(), key=lambda r: r["id"])


def region_rows(task: int) -> pa.Table:
    return pa.table({"id": [task * 10 + i for i in range(4)], "day": [i % 2 for i in range(4)],
                     "region": ["eu", "us", "eu", "us"]})


def failed_run(root: Path, calls: Calls, partition_by: list[str], teardown: bool = True,
               **config: object) -> FileOutputCommitter:
    """Run 1: task 0 commits, task 1's code fails; the run fails, and its teardown (unless it was killed) keeps
    task 0 for a clear (v1; v2 cannot keep what it made visible)."""
    config = {"mode": "append", **config}
    c = FileOutputCommitter(str(root), "j", partition_by=partition_by, durable=False, **config)
    c.setup_job()
    assert run_task_attempt(c, 0, 1, lambda w: (calls.note(0), w.write(region_rows(0)))).status == "committed"

    def broken(w) -> None:
        calls.note(1)
        raise RuntimeError("the user's code failed")
    with pytest.raises(RuntimeError):
        run_task_attempt(c, 1, 1, broken)
    if teardown:
        kept = c.abort_job(keep_committed=True)["kept_committed_tasks"]
        assert kept == ([] if config.get("algorithm") == 2 else [0])
    return c


def cleared_run(root: Path, calls: Calls, partition_by: list[str], tasks: int = 2, **config: object) -> list[str]:
    """The clear: setup (the next application attempt), the write tasks, the commit."""
    config = {"mode": "append", **config}
    c = FileOutputCommitter(str(root), "j", partition_by=partition_by, durable=False, **config)
    c.setup_job()
    statuses = [run_task_attempt(c, t, 2, lambda w, t=t: (calls.note(t), w.write(region_rows(t)))).status
                for t in range(tasks)]
    c.commit_job(tasks)
    return statuses


def partition_dirs(root: Path) -> set[str]:
    return {p.name.split("=")[0] for p in root.iterdir() if "=" in p.name}


@pytest.mark.parametrize("config", [{}, {"mode": "error"}, {"algorithm": 2}, {"mode": "dynamic"}],
                         ids=["append", "error", "v2", "dynamic"])
def test_a_partition_by_changed_between_a_failed_run_and_its_clear_reruns_every_task(tmp_path, config):
    """Task 0's committed files are laid out by ``day``; after the edit the stage writes ``region``
    directories. Recovering task 0 would publish day directories beside region ones (or refuse for ever): the
    clear's setup, finding the failed run's teardown done, starts the job over with the new partitioning, and
    every task runs again."""
    root, calls = tmp_path / "out", Calls(tmp_path / "calls")
    failed_run(root, calls, ["day"], **config)
    assert cleared_run(root, calls, ["region"], **config) == ["committed", "committed"]
    assert calls.count() == 4
    assert partition_dirs(root) == {"region"}
    assert sorted(r["id"] for r in read_dir(root)) == [0, 1, 2, 3, 10, 11, 12, 13]
    assert not (root / "_temporary").exists()


def test_a_partition_by_changed_while_the_failed_run_was_not_torn_down_is_refused_with_a_way_out(tmp_path):
    """Without the teardown's record the setup cannot tell a failed run from one still running, whose work a
    restart would destroy: it refuses, naming both ways out. The purge it names, followed, lets the clear run."""
    root, calls = tmp_path / "out", Calls(tmp_path / "calls")
    failed_run(root, calls, ["day"], teardown=False)
    with pytest.raises(JobConfigMismatch, match=r"partition_by=\['day'\].*airflow-commit abort") as refused:
        cleared_run(root, calls, ["region"])
    assert (root / "_temporary").exists() and not (root / "_SUCCESS").exists()
    # "clear only failed tasks": a write task with the new partitioning, in the failed run's application attempt
    c = FileOutputCommitter(str(root), "j", mode="append", partition_by=["region"], durable=False)
    with pytest.raises(JobConfigMismatch, match="setup"):
        run_task_attempt(c, 1, 2, lambda w: calls.note(1))
    assert calls.count() == 2
    # the advice, word for word: purge the failed run's job (as it was set up), then clear
    purge = re.search(r"purge the job: (airflow-commit abort \S+ --job \S+ --purge)", str(refused.value)).group(1)
    command = shlex.split(purge)
    subprocess.run([str(Path(sys.executable).with_name(command[0])), *command[1:]], check=True, timeout=120)
    assert cleared_run(root, calls, ["region"]) == ["committed", "committed"]
    assert partition_dirs(root) == {"region"} and len(read_dir(root)) == 8


@pytest.mark.parametrize("before,after", [(3, 2), (2, 3)])
def test_a_mapped_list_that_changed_length_between_a_failed_run_and_its_clear_commits_each_task_once(
        tmp_path, before, after):
    """Run 1 maps over *before* items (the last one fails); the clear maps over *after*. Tasks still mapped are
    recovered, new ones run, and a task no longer mapped is left out: its files stay hidden and go with the job's
    records."""
    root, calls = tmp_path / "out", Calls(tmp_path / "calls")
    c = FileOutputCommitter(str(root), "j", mode="append", partition_by=["day"], durable=False)
    c.setup_job()
    for t in range(before - 1):
        run_task_attempt(c, t, 1, lambda w, t=t: (calls.note(t), w.write(region_rows(t))))
    with pytest.raises(RuntimeError):
        run_task_attempt(c, before - 1, 1, lambda w: (_ for _ in ()).throw(RuntimeError("failed")))
    c.abort_job(keep_committed=True)
    statuses = cleared_run(root, calls, ["day"], tasks=after)
    assert statuses == ["recovered"] * min(before - 1, after) + ["committed"] * (after - min(before - 1, after))
    assert sorted(r["id"] for r in read_dir(root)) == [t * 10 + i for t in range(after) for i in range(4)]
    assert not (root / "_temporary").exists()
