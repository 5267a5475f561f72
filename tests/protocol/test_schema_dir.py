"""One schema per directory job (DESIGN section 10: directory target x a schema change between runs).

A job's code changed the schema it writes between a failed run and its clear: the tasks the failed run committed
(old schema) would be recovered and published beside the new code's tasks, one output with two schemas that
readers take apart (pyarrow.dataset keeps the first file's schema). The rule the table path has holds for a
directory of Parquet files too: recovery recovers only what can still commit. v1 and magic refuse at the job
commit, before the plan, recording the refused tasks so the next clear runs them again with the code of then; v2,
whose task commits are visible at once, refuses the task commit that would add a second schema, naming the way
out. Driven as the operators drive the protocol (see :mod:`.test_recover_valid`).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt
from airflow_commit_provider.protocol.tables import SchemaMismatch

from .test_recover_valid import Calls, fail_task


def rows(task: int, extra: bool) -> pa.Table:
    """Task *task*'s rows: ``id`` (and ``day``, the partition column), and with the new code ``extra``."""
    data = {"id": pa.array([task * 10 + i for i in range(4)], pa.int64()),
            "day": pa.array([i % 2 for i in range(4)], pa.int64())}
    if extra:
        data["extra"] = pa.array([f"new-{task}"] * 4, pa.string())
    return pa.table(data)


def committer(root: str, **config: object) -> FileOutputCommitter:
    return FileOutputCommitter(root, "j", mode="append", partition_by=["day"], durable=False, **config)


def run_stage(c: FileOutputCommitter, tasks: range, attempt: int, calls: Calls, extra: bool) -> list[str]:
    """The write tasks of one run, each as the write operator runs it; their outcomes' statuses."""
    return [run_task_attempt(c, t, attempt, lambda w, t=t: (calls.note(t), w.write(rows(t, extra)))).status
            for t in tasks]


def failed_run(root: str, calls: Calls, teardown: bool = True, **config: object) -> None:
    """Run 1 (the old code, ``{id}``): tasks 0 and 1 commit, task 2's code fails; the run's teardown keeps the
    committed tasks for a clear (unless it was killed)."""
    c = committer(root, **config)
    c.setup_job()
    assert run_stage(c, range(2), 1, calls, extra=False) == ["committed"] * 2
    fail_task(c, 2, 1, calls)
    if teardown:
        assert committer(root, **config).abort_job(keep_committed=True)["aborted"]


def read_back(root: str) -> list[tuple[int, int, str]]:
    """Every row as pyarrow.dataset and duckdb read the directory, the two asserted equal: one schema, with
    ``extra`` everywhere (a file without it would read as nulls, or not at all)."""
    dataset = ds.dataset(root, format="parquet", partitioning="hive")
    by_arrow = sorted((r["id"], r["day"], r["extra"]) for r in dataset.to_table().to_pylist())
    by_duckdb = sorted(duckdb.sql(f"SELECT id, day, extra FROM read_parquet('{root}/**/*.parquet', "
                                  "hive_partitioning = true, union_by_name = true)").fetchall())
    assert by_arrow == by_duckdb
    schemas = {pq.read_schema(f).remove_metadata() for f in dataset.files}
    assert len(schemas) == 1, schemas
    return by_arrow


def every_row_once() -> list[tuple[int, int, str]]:
    return sorted((t * 10 + i, i % 2, f"new-{t}") for t in range(3) for i in range(4))


def visible(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "_temporary" not in p.parts}


def schema_change_then_clear(root: str, calls: Calls, algorithm: int | str, published: Callable[[], set[str]],
                             local_copy: Callable[[], str]) -> str:
    """The clear recovers tasks 0 and 1 (old schema) and runs task 2 with the new code: the job commit refuses
    before its plan (nothing visible), naming tasks 0 and 1 as re-run on the next clear; that clear runs them with
    the new code, recovers task 2, and the output has one schema with every row once. *published*: the visible
    files; *local_copy*: a local directory holding the output, for the readers. Returns the refusal's message."""
    failed_run(root, calls, algorithm=algorithm)
    c = committer(root, algorithm=algorithm)
    c.setup_job()
    assert run_stage(c, range(3), 2, calls, extra=True) == ["recovered", "recovered", "committed"]
    with pytest.raises(SchemaMismatch) as refused:
        c.commit_job(3)
    message = str(refused.value)
    assert re.search(r"tasks 0 \(recovered from application attempt 0\), 1 \(recovered from application attempt 0\)"
                     r" are recorded as refused", message), message
    assert "re-run" in message and "setup" in message, message
    assert c.job.commit_plan(c.job_record()) is None and published() == set()
    with pytest.raises(SchemaMismatch, match="re-run"):    # "clear only failed tasks": the commit alone, refused again
        committer(root, algorithm=algorithm).commit_job(3)
    assert committer(root, algorithm=algorithm).abort_job(keep_committed=True)["aborted"]

    c = committer(root, algorithm=algorithm)               # the clear of the whole run
    c.setup_job()
    assert run_stage(c, range(3), 3, calls, extra=True) == ["committed", "committed", "recovered"]
    assert calls.count() == 3 + 1 + 2
    c.commit_job(3)
    assert read_back(local_copy()) == every_row_once()
    return message


def test_a_clear_after_a_schema_change_reruns_the_old_schema_tasks(tmp_path):
    """v1 on a local disk; the refusal names the difference, read from one footer of each schema."""
    root, calls = tmp_path / "out", Calls(tmp_path / "calls")
    message = schema_change_then_clear(str(root), calls, 1, lambda: visible(root), lambda: str(root))
    assert "missing column(s) ['extra']" in message, message


def test_v2_refuses_the_task_commit_that_would_publish_a_second_schema_and_the_purge_it_advises_works(tmp_path):
    """Algorithm 2, the failed run's teardown killed: its tasks 0 and 1 stay published (old schema) and are
    recovered by the clear; task 2's new code would publish a second schema at its task commit, the only point
    before visibility. That commit is refused, nothing visible changes, and the purge the error names, run word
    for word, lets the next clear write every task with the new code."""
    root, calls = tmp_path / "out", Calls(tmp_path / "calls")
    failed_run(str(root), calls, teardown=False, algorithm=2)
    published = visible(root)
    c = committer(str(root), algorithm=2)
    c.setup_job()
    assert run_stage(c, range(2), 2, calls, extra=True) == ["recovered", "recovered"]
    with pytest.raises(SchemaMismatch, match=r"task 2's files have another schema .*new column\(s\) \['extra'\]"
                                             r".*Nothing of task 2 was published") as refused:
        run_stage(c, range(2, 3), 2, calls, extra=True)
    assert visible(root) == published
    purge = re.search(r"purge it \(`(airflow-commit abort [^`]+ --purge)`", str(refused.value)).group(1)
    command = shlex.split(purge)
    subprocess.run([str(Path(sys.executable).with_name(command[0])), *command[1:]], check=True, timeout=120)
    assert visible(root) == set()

    c = committer(str(root), algorithm=2)                  # the clear of the whole run: a new generation
    c.setup_job()
    assert run_stage(c, range(3), 3, calls, extra=True) == ["committed"] * 3
    c.commit_job(3)
    assert read_back(str(root)) == every_row_once()


def test_v2_after_the_teardown_withdrew_the_published_tasks_the_clear_writes_the_new_schema(tmp_path):
    """The failed run's teardown withdraws what v2 published, and the schema its task commits fixed: the clear
    runs every task with the new code, and commits."""
    root, calls = tmp_path / "out", Calls(tmp_path / "calls")
    failed_run(str(root), calls, algorithm=2)
    c = committer(str(root), algorithm=2)
    c.setup_job()
    assert run_stage(c, range(3), 2, calls, extra=True) == ["committed"] * 3
    c.commit_job(3)
    assert read_back(str(root)) == every_row_once()


def test_v2_job_commit_refuses_two_published_schemas_with_the_purge(tmp_path):
    """Should two schemas be published anyway (the job's schema record went while a task of the old code was
    committing: here it is removed by hand), the v2 job commit refuses before its plan, naming the purge; nothing
    is recorded as refused, since a re-run of a published v2 task could not replace its files."""
    root, calls = tmp_path / "out", Calls(tmp_path / "calls")
    c = committer(str(root), algorithm=2)
    c.setup_job()
    run_stage(c, range(2), 1, calls, extra=False)
    (root / c.layout.job_schema(c.job_record().job_uuid)).unlink()
    run_stage(c, range(2, 3), 1, calls, extra=True)
    with pytest.raises(SchemaMismatch, match=r"different schemas.*algorithm 2 both are visible.*--purge"):
        c.commit_job(3)
    assert c.job.commit_plan(c.job_record()) is None and not (root / "_SUCCESS").exists()
    assert not c.job.refused_tasks(c.job_record()).tasks


def test_files_of_a_callable_writing_its_own_files_are_not_checked(tmp_path):
    """A callable that writes files itself (``open_file``) records no schema: its job commits as before, two
    schemas and all (the rule covers Parquet written through ``write`` only)."""
    root = tmp_path / "out"
    c = committer(str(root))
    c.setup_job()
    for t in range(2):
        def produce(w, t=t) -> None:
            with w.open_file(extension="parquet") as f:
                pq.write_table(rows(t, extra=t == 1).drop_columns(["day"]), f)
        assert run_task_attempt(c, t, 1, produce).status == "committed"
    assert c.commit_job(2)["totals"]["files"] == 2


def test_a_compaction_keeps_the_schemas_it_found(tmp_path):
    """A compaction rewrites rows that are visible already, each partition in its own files' schema: a directory
    whose partitions differ (written before this rule, or by other writers) is compacted, not refused."""
    from airflow_commit_provider.protocol.maintenance.compaction import compact

    root = tmp_path / "out"
    for day, extra in (("d0", False), ("d1", True)):
        (root / f"day={day}").mkdir(parents=True)
        for i in range(2):
            pq.write_table(rows(i, extra).drop_columns(["day"]), root / f"day={day}" / f"small-{i}.parquet")
    manifest = compact(FileOutputCommitter(str(root), "compact", algorithm=1, mode="append"), 1)
    assert manifest["totals"]["files"] == 2
    assert len(ds.dataset(str(root), format="parquet", partitioning="hive").to_table()) == 16
