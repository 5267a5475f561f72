"""Bad input gets a clear exception naming the problem, and nothing on storage changes."""

from __future__ import annotations

import json
import os

import fsspec
import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import (
    CorruptRecord,
    FileOutputCommitter,
    InvalidOutputSpec,
    JobIncomplete,
    StorageCapabilityError,
    TaskAttemptWriter,
    read_success_marker,
    run_task_attempt,
)

from . import scenario as sc


@pytest.fixture
def target(tmp_path):
    root = str(tmp_path / "out")
    sc.write_old_data(root)
    return root


def unchanged(root, before):
    assert sc.all_files(root) == before, "storage changed"


@pytest.mark.parametrize("kwargs,message", [
    ({"algorithm": 3}, "unknown committer algorithm 3"),
    ({"algorithm": "magic-v9"}, "unknown committer algorithm"),
    ({"mode": "upsert"}, "unknown output mode 'upsert'"),
    ({"mode": "dynamic", "partition_by": []}, "needs partition_by"),
    ({"partition_by": ["../x"]}, "cannot be a directory name"),
    ({"partition_by": ["_hidden"]}, "cannot be a directory name"),
    ({"partition_by": ["day", "day"]}, "repeat"),
    ({"commit_threads": 0}, "positive integer"),
    ({"commit_threads": -2}, "positive integer"),
])
def test_bad_configuration(target, kwargs, message):
    before = sc.all_files(target)
    kwargs.setdefault("mode", "append")
    with pytest.raises(InvalidOutputSpec, match=message):
        FileOutputCommitter(target, "job", **kwargs).setup_job()
    unchanged(target, before)


@pytest.mark.parametrize("job_id", ["../escape", "a/b", "", ".hidden", "x" * 201, "a\x00b", "a..b"])
def test_bad_job_ids(target, job_id):
    before = sc.all_files(target)
    with pytest.raises(InvalidOutputSpec, match="job id"):
        FileOutputCommitter(target, job_id, mode="append")
    unchanged(target, before)


@pytest.mark.parametrize("value,directory", [
    ("../../etc", "day=..%2F..%2Fetc"), ("a/b", "day=a%2Fb"), ("..", "day=.."), (".", "day=."),
    (".hidden", "day=.hidden"), ("_x", "day=_x"), ("a\x00b", "day=a%00b"), ("a\\b", "day=a%5Cb"),
    ("tab\there", "day=tab%09here"),
])
def test_partition_values_that_could_escape_are_escaped_and_stay_inside(target, value, directory):
    """Spark's escaping (%XX) keeps every value inside one ``day=...`` directory, and readers get the value back."""
    before = set(sc.visible_files(target))
    c = FileOutputCommitter(target, "job", mode="append", partition_by=["day"])
    c.setup_job()
    table = pa.table({"task": pa.array([0], pa.int32()), "row": pa.array([0], pa.int32()),
                      "attempt": pa.array([1], pa.int32()), "day": [value]})
    run_task_attempt(c, 0, 1, lambda w: w.write(table))
    c.commit_job(1)
    new = set(sc.visible_files(target)) - before
    assert new and all(f.split("/")[0] == directory and f.count("/") == 1 for f in new), new
    assert [r["day"] for r in sc.read_rows(target) if r["task"] == 0] == [value]
    assert sorted(os.listdir(os.path.join(target, ".."))) == ["out"]
    assert not os.path.exists(os.path.join(target, "..", "etc"))


@pytest.mark.parametrize("value,message", [
    ("", "empty string"),
    ("__HIVE_DEFAULT_PARTITION__", "name of the null partition"),
    ("y" * 300, "too long"),
])
def test_partition_values_no_directory_gives_back_are_refused(target, value, message):
    before = sc.all_files(target)
    c = FileOutputCommitter(target, "job", mode="append", partition_by=["day"])
    c.setup_job()
    table = pa.table({"day": [value], "x": [1]})
    with pytest.raises(InvalidOutputSpec, match=f"partition value.*{message}"):
        run_task_attempt(c, 0, 1, lambda w: w.write(table))
    c.abort_job()
    unchanged(target, before)


@pytest.mark.parametrize("name", ["../x.csv", "/abs/x.csv", "a/../../x", "a\\b.csv", "_hidden.csv", ".dot",
                                  "C:/x.csv", "s3://bucket/x", "a//b"])
def test_file_names_that_could_escape_are_refused(target, name):
    before = sc.all_files(target)
    c = FileOutputCommitter(target, "job", mode="append")
    c.setup_job()
    with pytest.raises(InvalidOutputSpec, match=r"file name"):
        run_task_attempt(c, 0, 1, lambda w: w.open_file(name))
    c.abort_job()
    unchanged(target, before)


def test_target_is_a_file(tmp_path):
    path = tmp_path / "file.txt"
    path.write_text("not a directory")
    with pytest.raises(InvalidOutputSpec, match="is a file"):
        FileOutputCommitter(str(path), "job", mode="append").setup_job()
    assert path.read_text() == "not a directory"


def test_file_system_without_atomic_create_is_refused(tmp_path):
    os.makedirs(tmp_path / "base")
    fs = fsspec.filesystem("dir", path=str(tmp_path / "base"), fs=fsspec.filesystem("file"))
    with pytest.raises(StorageCapabilityError, match="no atomic create-if-absent"):
        FileOutputCommitter("out", "job", mode="append", fs=fs).setup_job()


def test_bad_data_is_refused_and_attempt_removed(target):
    before = sc.all_files(target)
    c = FileOutputCommitter(target, "job", mode="append", partition_by=["day"])
    c.setup_job()
    with pytest.raises(InvalidOutputSpec, match="pyarrow Tables or RecordBatches"):
        run_task_attempt(c, 0, 1, lambda w: w.write({"day": ["x"]}))
    with pytest.raises(InvalidOutputSpec, match=r"partition column\(s\) \['day'\] are not in the data"):
        run_task_attempt(c, 0, 2, lambda w: w.write(pa.table({"x": [1]})))

    def schema_change(w):
        w.write(pa.table({"day": ["a"], "x": [1]}))
        w.write(pa.table({"day": ["a"], "x": ["not an int"]}))

    with pytest.raises(InvalidOutputSpec, match="schema changed"):
        run_task_attempt(c, 0, 3, schema_change)
    assert not any("/_temporary/attempt_" in f for f in sc.all_files(target)), "failed attempts leave no files"
    c.abort_job()
    unchanged(target, before)


@pytest.mark.parametrize("content,message", [
    (b"", "not valid JSON"),
    (b'{"format": "airflow-commit-provider/success", "version": 1, "committer"', "not valid JSON"),
    (b"[]", "not a JSON object"),
    (b'{"format": "something-else"}', "0-byte _SUCCESS comes from Hadoop"),
])
def test_corrupt_success_marker(tmp_path, content, message):
    (tmp_path / "_SUCCESS").write_bytes(content)
    with pytest.raises(CorruptRecord, match=message):
        read_success_marker(str(tmp_path))


def one_committed_task(root: str) -> FileOutputCommitter:
    """A job on *root* whose task 0 committed (job not committed yet)."""
    c = FileOutputCommitter(root, "job", mode="append")
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(sc.task_table(0, 1)))
    return c


def test_success_marker_with_wrong_totals_or_missing_file(tmp_path):
    root = str(tmp_path / "out")
    one_committed_task(root).commit_job(1)
    doc = json.loads((tmp_path / "out" / "_SUCCESS").read_bytes())
    os.remove(os.path.join(root, doc["files"][0]["path"]))
    with pytest.raises(CorruptRecord, match="no such file"):
        read_success_marker(root, verify_files=True)
    doc["totals"]["files"] = 7
    (tmp_path / "out" / "_SUCCESS").write_text(json.dumps(doc))
    with pytest.raises(CorruptRecord, match="totals.files=7"):
        read_success_marker(root)
    with pytest.raises(FileNotFoundError, match="has not committed"):
        read_success_marker(str(tmp_path))


def test_corrupt_task_record_stops_job_commit(tmp_path):
    root = str(tmp_path / "out")
    c = one_committed_task(root)
    record = os.path.join(root, "_temporary", "job", "0", "_commits", "task_00000.json")
    with open(record, "r+b") as fh:
        fh.truncate(40)
    with pytest.raises(CorruptRecord, match="task_00000.json is not valid JSON"):
        c.commit_job(1)
    assert sc.visible_files(root) == []


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_task_numbers(tmp_path, bad):
    c = FileOutputCommitter(str(tmp_path), "job", mode="append")
    c.setup_job()
    with pytest.raises(InvalidOutputSpec, match="non-negative integer"):
        c.setup_task(bad, 1)


def test_unknown_fault_point_is_refused():
    from airflow_commit_provider.protocol import faults

    with pytest.raises(ValueError, match="unknown fault injection point"):
        faults.arm("no.such.point")


@pytest.mark.parametrize("algorithm", [1, 2])
def test_two_tasks_writing_one_file_name_is_refused_and_nothing_is_lost(target, algorithm):
    """File names must be unique across tasks. v1 stages committed files side by side, with moves that refuse to
    replace, so the second task's file is refused instead of silently replacing the first's; job commit then
    names both tasks. v2's task commit would make the second file visible over the first: it is refused there, the
    first task's file intact, and job commit then finds task 1 uncommitted."""
    c = FileOutputCommitter(target, "job", algorithm=algorithm, mode="append")
    c.setup_job()

    def produce(task):
        def write(w):
            with w.open_file("same.txt") as fh:
                fh.write(f"task {task}".encode())
        return write

    run_task_attempt(c, 0, 1, produce(0))
    if algorithm == 1:
        with pytest.raises(InvalidOutputSpec, match="already holds another task's file of that name"):
            run_task_attempt(c, 1, 1, produce(1))
        with pytest.raises(InvalidOutputSpec, match="tasks 0 and 1 both wrote same.txt"):
            c.commit_job(2)
    else:
        with pytest.raises(InvalidOutputSpec, match="would replace 1 visible file"):
            run_task_attempt(c, 1, 1, produce(1))
        assert open(os.path.join(target, "same.txt"), "rb").read() == b"task 0"
        with pytest.raises(JobIncomplete, match="1 of 2 expected task"):
            c.commit_job(2)
    if algorithm == 1:  # both tasks' bytes are still on storage, the first staged, the second in its attempt
        staged = os.path.join(target, "_temporary", "job", "0", "_committed", "same.txt")
        attempt = os.path.join(target, "_temporary", "job", "0", "_temporary", "attempt_00001_1", "same.txt")
        assert open(staged, "rb").read() == b"task 0" and open(attempt, "rb").read() == b"task 1"
    assert not os.path.exists(os.path.join(target, "_SUCCESS"))


def test_v2_file_deleted_outside_the_protocol_stops_job_commit(tmp_path):
    root = str(tmp_path / "out")
    c = FileOutputCommitter(root, "job", algorithm=2, mode="append")
    c.setup_job()
    outcome = run_task_attempt(c, 0, 1, lambda w: w.write(sc.task_table(0, 1)))
    os.remove(os.path.join(root, outcome.record["files"][0]["path"]))
    with pytest.raises(CorruptRecord, match="committed v2 file.* missing from the output"):
        c.commit_job(1)
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))


def test_plan_whose_task_record_was_deleted_stops_the_resumed_commit(tmp_path):
    root = str(tmp_path / "out")
    c = one_committed_task(root)
    sc.crash_after_plan(c)
    os.remove(os.path.join(root, "_temporary", "job", "0", "_commits", "task_00000.json"))
    with pytest.raises(CorruptRecord, match="the commit plan names task 0, whose record .* is gone"):
        c.commit_job(1)
    assert sc.read_rows(root) == [] and not os.path.exists(os.path.join(root, "_SUCCESS"))


@pytest.mark.parametrize("arg,value", [("rows", "3"), ("rows", -1), ("sizes", None), ("sizes", 1.5)])
def test_bad_row_or_size_counts_are_the_callers_error_and_write_nothing(tmp_path, arg, value):
    """A caller's bad count names the argument (it is not a corrupt record), and no record is written: the same
    attempt then commits with good counts."""
    c = FileOutputCommitter(str(tmp_path / "out"), "j", mode="append")
    c.setup_job()
    ta = c.setup_task(0, 1)
    w = TaskAttemptWriter(c, ta)
    w.write(sc.task_table(0, 1))
    w.close()
    counts = dict(w.rows if arg == "rows" else w.sizes)
    counts[next(iter(counts))] = value
    kwargs = {"sizes": counts} if arg == "sizes" else {}
    with pytest.raises(InvalidOutputSpec, match=rf"commit_task\({arg}=\.\.\.\)"):
        c.commit_task(ta, counts if arg == "rows" else w.rows, **kwargs)
    assert c.recover_task(0) is None
    c.commit_task(ta, w.rows, sizes=w.sizes)
    c.commit_job(1)
    assert len(sc.read_rows(str(tmp_path / "out"))) == len(sc.task_table(0, 1))


def _named(name: str):
    def write(w):
        with w.open_file(name) as fh:
            fh.write(name.encode())
    return write


@pytest.mark.parametrize("clash", ["two tasks", "a visible file"])
def test_a_name_the_commit_refuses_is_not_recovered_by_the_clear_that_fixes_it(target, clash):
    """Found from outside (session 19): a job commit refused two tasks' equal file names (or one the target
    already holds, in append mode), and the advice (fix the names, clear the run) could not work: the clear
    recovered both commits without running the fixed code, and the commit failed the same way for ever. The
    refused commits are recorded now (as a schema refusal's are), so the clear of the run runs them again."""
    c = FileOutputCommitter(target, "job", algorithm=1, mode="append")
    c.setup_job()
    if clash == "a visible file":
        with open(os.path.join(target, "taken.txt"), "wb") as fh:
            fh.write(b"someone else's")
    names = {0: "same.txt", 1: "same.txt"} if clash == "two tasks" else {0: "taken.txt", 1: "mine-1.txt"}
    for task in (0, 1):
        try:
            run_task_attempt(c, task, 1, _named(names[task]))
        except InvalidOutputSpec:   # the local store refuses the second same.txt at its task commit already
            assert clash == "two tasks" and task == 1
    refused = [0, 1] if clash == "two tasks" else [0]
    with pytest.raises(InvalidOutputSpec, match=r"(both wrote same.txt|append would replace existing file).* "
                                                rf"The files of tasks? {', '.join(map(str, refused))} are recorded "
                                                "as refused.*so fix the file names first"):
        c.commit_job(2)
    c.abort_job(keep_committed=True)   # the failed run's teardown
    c.setup_job()                      # the clear of the run, its setup included; the code now names by task
    outcomes = [run_task_attempt(c, t, 2, _named(f"fixed-{t}.txt")).status for t in (0, 1)]
    assert outcomes == ["committed" if t in refused else "recovered" for t in (0, 1)]
    c.commit_job(2)
    visible = sorted(sc.visible_files(target))
    assert [p for p in visible if p.endswith(".txt")] == (
        ["fixed-0.txt", "fixed-1.txt"] if clash == "two tasks" else ["fixed-0.txt", "mine-1.txt", "taken.txt"])
    assert read_success_marker(target, verify_files=True)
