"""A task is recovered only when its inputs are the same (DESIGN section 10: recovery recovers only what was asked
for).

Nothing used to record what a task was given: after a failed run was cleared, task *i* was recovered whatever
element *i* of a mapped list had become, so a list whose items changed but whose length did not committed the old
element's rows under the index, lost the new element's, and reported success. The write task now gives the
protocol an opaque digest of its inputs (``inputs``); the task commit record keeps it, and recovery adopts a
commit only when the digests are equal or either is absent (a record of an earlier release, a caller that does
not say). Driven as the operators drive the protocol: setup, the runner per task, the failed run's teardown
(``abort_job(keep_committed=True)``), a clear (the next setup), then the job commit.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_commit_provider.operators.shards import run_shards
from airflow_commit_provider.protocol import FileOutputCommitter, TaskInputsChanged, run_task_attempt
from airflow_commit_provider.protocol.records.task import TaskCommitRecord

from .scenario import read_rows
from .tables_worker import committer_for, run_job, task_rows
from .test_recover_valid import Calls
from .test_tables import base, expected, fmt, rows  # noqa: F401  (fixtures)


def rows_of(item: str) -> pa.Table:
    return pa.table({"item": [item] * 3, "row": list(range(3))})


def write(c: FileOutputCommitter, task: int, attempt: int, item: str, inputs: str | None, calls: Calls) -> str:
    """One write task instance given *item* (digest *inputs*), as the write operator runs it: its status."""
    def produce(w) -> None:
        calls.note(task)
        w.write(rows_of(item))
    return run_task_attempt(c, task, attempt, produce, inputs=inputs).status


def items_read_back(root: Path | str) -> dict[str, int]:
    got: dict[str, int] = {}
    for row in read_rows(str(root)):
        got[row["item"]] = got.get(row["item"], 0) + 1
    return got


def clear_with_element_1_changed(root: str, algorithm: int | str, calls: Calls, caplog: pytest.LogCaptureFixture,
                                 **settings) -> None:
    """Run 1 commits tasks 0-3 and fails before its job commit; between it and the clear, element 1 of the list
    changed (b -> x). Task 0 (same digest), task 2 (recorded without a digest: an earlier release) and task 3
    (asked without one) are recovered; task 1 runs again, and the job commit takes its new commit, not the old."""
    c = FileOutputCommitter(root, "job", algorithm=algorithm, mode="append", **settings)
    c.setup_job()
    first = [("a", "in-a"), ("b", "in-b"), ("c", None), ("d", "in-d")]
    assert [write(c, t, 1, item, digest, calls) for t, (item, digest) in enumerate(first)] == ["committed"] * 4
    if algorithm != 2:   # the failed run's teardown keeps the committed tasks (v2's are visible: it removes them)
        c.abort_job(keep_committed=True)
    c.setup_job()                              # the clear: application attempt 1
    calls.path.unlink()
    second = [("a", "in-a"), ("x", "in-x"), ("c", "in-c"), ("d", None)]
    with caplog.at_level(logging.WARNING, logger="airflow_commit_provider.protocol.tasks.attempts"):
        statuses = [write(c, t, 2, item, digest, calls) for t, (item, digest) in enumerate(second)]
    assert statuses == ["recovered", "committed", "recovered", "recovered"]
    assert calls.path.read_text().split() == ["1"], "only the task whose inputs changed ran again"
    assert any("task 1: its commit (attempt 1, application attempt 0) was given other inputs" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    manifest = c.commit_job(4)
    assert items_read_back(root) == {"a": 3, "x": 3, "c": 3, "d": 3}, "b's rows gone, x's there, each once"
    assert {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]} == {0: 0, 1: None, 2: 0, 3: 0}


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_clear_reruns_only_the_tasks_whose_inputs_changed(tmp_path, caplog, algorithm):
    """v2 without the failed run's teardown (killed): b's files are visible, and x's commit replaces them."""
    clear_with_element_1_changed(str(tmp_path / "out"), algorithm, Calls(tmp_path / "calls"), caplog)


def test_the_record_keeps_the_digest_and_an_older_record_reads_as_any(tmp_path):
    root = tmp_path / "out"
    c = FileOutputCommitter(str(root), "job", mode="append")
    c.setup_job()
    calls = Calls(tmp_path / "calls")
    write(c, 0, 1, "a", "in-a", calls)
    write(c, 1, 1, "b", None, calls)
    rec0, rec1 = (root / c.layout.task_record(0, t) for t in (0, 1))
    assert json.loads(rec0.read_bytes())["inputs"] == "in-a"
    assert "inputs" not in json.loads(rec1.read_bytes()), "a record without a digest is the earlier releases' JSON"
    assert TaskCommitRecord.from_json(rec1.read_bytes(), "r").inputs is None
    doc = json.loads(rec0.read_bytes())
    doc["inputs"] = 7
    with pytest.raises(Exception, match="field 'inputs' has type int, not str"):
        TaskCommitRecord.from_doc(doc, "r")


def test_a_retry_in_the_same_application_attempt_with_other_inputs_is_refused_and_a_clear_runs_it(tmp_path):
    """A task committed in the current application attempt cannot commit again there (its record is the
    decision); asked with other inputs (a try after the DAG changed, with no new setup: "clear only failed"), it
    is refused before the user's code runs, naming the way out. Following it (a clear of the whole run, which
    sets the job up again) runs the task with its new inputs."""
    root = tmp_path / "out"
    c = FileOutputCommitter(str(root), "job", mode="append")
    calls = Calls(tmp_path / "calls")
    c.setup_job()
    assert write(c, 0, 1, "b", "in-b", calls) == "committed"
    assert write(c, 0, 2, "b", "in-b", calls) == "already_committed"
    with pytest.raises(TaskInputsChanged, match=r"task 0 of job job was committed in application attempt 0 "
                                                r"\(attempt 1\) with other inputs.*clear the whole DAG run"):
        write(c, 0, 3, "x", "in-x", calls)
    assert calls.count() == 1
    c.setup_job()                              # the advice: a clear of the run, its setup included
    assert write(c, 0, 4, "x", "in-x", calls) == "committed"
    c.commit_job(1)
    assert items_read_back(root) == {"x": 3}


def test_shards_of_a_task_instance_whose_inputs_changed_all_run_again(tmp_path):
    """Every shard of a task instance was given the instance's inputs: when they change, each shard runs again;
    the shards of an instance whose inputs did not change are recovered."""
    root = tmp_path / "out"
    c = FileOutputCommitter(str(root), "job", mode="append")
    calls = Calls(tmp_path / "calls")
    c.setup_job()

    def instance(map_index: int, item: str, attempt: int):
        def produce(shard: int, task: int, w) -> None:
            calls.note(task)
            w.write(pa.table({"item": [item] * 2, "shard": [shard] * 2}))
        return run_shards(lambda: FileOutputCommitter(c.store, c.job_id, c.config), map_index, 2, attempt, produce,
                          threads=1, inputs=f"in-{item}")

    assert instance(0, "a", 1).to_dict()["ran_shards"] == [0, 1]
    assert instance(1, "b", 1).to_dict()["ran_shards"] == [0, 1]
    c.setup_job()
    calls.path.unlink()
    assert instance(0, "a", 2).to_dict()["statuses"] == {"recovered": 2}
    again = instance(1, "x", 2).to_dict()
    assert again["statuses"] == {"committed": 2} and again["ran_shards"] == [0, 1]
    assert sorted(calls.path.read_text().split()) == ["2", "3"]
    c.commit_job(4)
    assert items_read_back(root) == {"a": 4, "x": 4}


def test_a_table_commit_takes_the_rerun_task_not_the_declined_commit(base, tmp_path):
    """Delta and Iceberg: the table transaction of the cleared run adds task 1's new files (given x: gen 2), not
    those of its declined commit (given b: gen 1), each row once, read back by the format's own reader."""
    run_job(base)                                         # an earlier job made the table: gen 0
    c = committer_for({**base, "job_id": "events-2"})
    calls = Calls(tmp_path / "calls")

    def write_task(task: int, attempt: int, gen: int, inputs: str) -> str:
        def produce(w) -> None:
            calls.note(task)
            w.write(task_rows(task, 4, gen))
        return run_task_attempt(c, task, attempt, produce, inputs=inputs).status

    c.setup_job()
    assert [write_task(t, 1, 1, f"in-{t}") for t in range(3)] == ["committed"] * 3
    c.abort_job(keep_committed=True)
    c.setup_job()
    calls.path.unlink()
    assert [write_task(t, 2, 2 if t == 1 else 1, "in-x" if t == 1 else f"in-{t}") for t in range(3)] == \
        ["recovered", "committed", "recovered"]
    assert calls.path.read_text().split() == ["1"]
    c.commit_job(3)
    new = sorted((t * 1000 + i, i % 2, 2 if t == 1 else 1) for t in range(3) for i in range(4))
    assert rows(base) == sorted(expected() + new)
