"""The job record, commit plan and commit log as types (:mod:`airflow_commit_provider.protocol.records.job`): records
written by the previous release (``fixtures/jobrecords_head``) read and written back byte for byte, a commit that
release crashed resumed by this one exactly once, and every corruption named with its file and field."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from airflow_commit_provider.protocol import CorruptRecord, make_committer
from airflow_commit_provider.protocol.records.job import CommitLog, CommitPlan, JobRecord

FIXTURE = Path(__file__).parent / "fixtures" / "jobrecords_head"
CRASHED = FIXTURE / "crashed" / "_temporary" / "jobrec-head"
WHERE = "s3://bucket/out/_temporary/j/_job.json"


def plan_path() -> Path:
    return next(CRASHED.glob("_commit_plan_*.json"))


RECORDS = {
    "job": (JobRecord, lambda: CRASHED / "_job.json"),
    "job_compaction": (JobRecord, lambda: FIXTURE / "job_compaction.json"),
    "commit_plan": (CommitPlan, plan_path),
    "commit_log_gen0": (CommitLog, lambda: FIXTURE / "commit_log_gen0.json"),
    "commit_log": (CommitLog, lambda: FIXTURE / "commit_log.json"),
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_head_records_read_and_write_back_byte_for_byte(name):
    """Either release reads the other's records: same keys, same order, same values."""
    cls, path = RECORDS[name]
    data = path().read_bytes()
    rec = cls.from_json(data, str(path()))
    assert rec.to_json() == data
    if cls is CommitLog:
        assert rec.to_doc() == json.loads(data)


def test_head_records_as_types():
    job = JobRecord.from_json((CRASHED / "_job.json").read_bytes(), "job")
    gen0 = CommitLog.from_json((FIXTURE / "commit_log_gen0.json").read_bytes(), "log")
    assert (job.generation, job.first_app_attempt, job.mode, job.partition_by) == (1, 1, "overwrite", ("day",))
    assert job.replaces is not None and job.replaces.job_uuid == gen0.job_uuid
    assert job.replaced_files == {f["path"] for f in gen0.files} and len(job.replaced_files) == 3
    compaction = JobRecord.from_json((FIXTURE / "job_compaction.json").read_bytes(), "job")
    assert compaction.replace_first is True and compaction.replaces is None
    assert compaction.replace_files == ("day=d0/a.parquet", "day=d1/b.parquet")
    plan = CommitPlan.from_json(plan_path().read_bytes(), "plan")
    assert plan.tasks == (0, 1) and plan.withdraw == ("", "day=d0", "day=d1") and len(plan.deletions) == 3
    assert plan.attempt_history["0"]["failed_attempts"] == ["1.1"]


def test_commit_log_history_is_the_previous_releases():
    """A new generation's log carries the previous one's summary, as the previous release wrote it, and now its
    partitions too (a watcher of one partition reads them: ``airflow_commit_provider.protocol.history``)."""
    gen0 = CommitLog.from_json((FIXTURE / "commit_log_gen0.json").read_bytes(), "gen0")
    gen1 = CommitLog.from_json((FIXTURE / "commit_log.json").read_bytes(), "gen1")
    followed = gen0.followed_by(gen1.manifest)
    assert followed.manifest == gen1.manifest
    assert [{k: v for k, v in h.items() if k != "partitions"} for h in followed.history] == list(gen1.history)
    assert followed.history[0]["partitions"] == gen0.manifest["partitions"] == ["day=d0", "day=d1"]
    assert gen1.followed_by(gen1.manifest) == gen1, "a resumed commit of the same generation keeps the history"
    assert gen1.task_record(0)["attempt"] == 2 and gen1.task_record(7) is None


def test_a_commit_the_previous_release_crashed_is_finished_exactly_once(tmp_path):
    """Generation 1's commit died after fixing its plan (previous release): this release resumes it from that plan
    and the output holds generation 1's rows, each once; generation 0's files are gone."""
    root = tmp_path / "out"
    shutil.copytree(FIXTURE / "crashed", root)
    c = make_committer(str(root), "jobrec-head", algorithm=1, mode="overwrite", partition_by=["day"],
                       labels={"dag_id": "d", "run_id": "r"})
    assert c.status()["state"] == "committing"
    manifest = c.commit_job(2)
    assert manifest["diagnostics"]["resumed"] is True and manifest["generation"] == 1
    rows = ds.dataset(str(root), format="parquet", partitioning="hive", exclude_invalid_files=True).to_table()
    assert sorted(zip(rows["task"].to_pylist(), rows["attempt"].to_pylist())) == [(0, 2), (1, 2)]
    log = c.commit_log()
    assert [h["generation"] for h in log.history] == [0] and log.generation == 1
    assert not (root / "_temporary").exists()


def _job_doc() -> dict[str, Any]:
    return json.loads((CRASHED / "_job.json").read_bytes())


def _without(doc: dict[str, Any], key: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    del doc[key]
    return doc


def _with(doc: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**copy.deepcopy(doc), key: value}


@pytest.mark.parametrize("doc,message", [
    (_without(_job_doc(), "job_uuid"), "lacks the field 'job_uuid'; the job record is corrupt"),
    (_without(_job_doc(), "first_app_attempt"), "lacks the field 'first_app_attempt'"),
    (_with(_job_doc(), "generation", "1"), "field 'generation' has type str, not int"),
    (_with(_job_doc(), "generation", True), "field 'generation' has type bool, not int"),
    (_with(_job_doc(), "algorithm", 1.0), "field 'algorithm' has type float, not int or str"),
    (_with(_job_doc(), "partition_by", "day"), "field 'partition_by' has type str, not list"),
    (_with(_job_doc(), "partition_by", [1]), "field partition_by[0] is 1, not a string"),
    (_with(_job_doc(), "replaces", {"job_uuid": "u", "generation": 0}), "lacks the field 'replaces.files'"),
    (_with(_job_doc(), "replaces", {"job_uuid": "u", "generation": 0, "files": [3]}),
     "field replaces.files[0] is 3, not a string"),
    (_with(_job_doc(), "replaces", {"job_uuid": 5, "generation": 0, "files": []}),
     "field 'replaces.job_uuid' has type int, not str"),
    (_with(_job_doc(), "replace_first", 1), "field 'replace_first' has type int, not bool"),
    (_with(_job_doc(), "labels", []), "field 'labels' has type list, not dict"),
    (_with(_job_doc(), "table", "delta"), "field 'table' has type str, not dict"),
    (_with(_job_doc(), "table", {"name": "ns.t"}), "field 'table' is {'name': 'ns.t'}, not the table's format"),
    (_with(_job_doc(), "format", "airflow-commit-provider/commit-plan"), "is not an airflow-commit-provider job"),
    (_with(_job_doc(), "version", 2), "unsupported record version 2"),
])
def test_job_record_corruption_is_named(doc, message):
    with pytest.raises(CorruptRecord, match=WHERE.replace(".", r"\.")) as err:
        JobRecord.from_json(json.dumps(doc).encode(), WHERE)
    assert message in str(err.value)


def test_optional_job_fields_default_and_old_plans_withdraw_the_root():
    """Fields the code always read with a default may be absent; a plan without ``withdraw`` (an older plan)
    withdraws the root's marker, as before."""
    doc = _job_doc()
    for key in ("labels", "replaces", "replace_files", "replace_first"):
        del doc[key]
    job = JobRecord.from_json(json.dumps(doc).encode(), WHERE)
    assert (dict(job.labels), job.replaces, job.replace_files, job.replace_first) == ({}, None, (), False)
    assert job.table is None, "a record without the field is a directory job's"
    table_job = JobRecord.from_json(json.dumps({**doc, "table": {"format": "iceberg", "name": "ns.t"}}).encode(),
                                    WHERE)
    assert table_job.table == {"format": "iceberg", "name": "ns.t"}
    assert json.loads(table_job.to_json())["table"] == {"format": "iceberg", "name": "ns.t"}
    plan = json.loads(plan_path().read_bytes())
    del plan["withdraw"], plan["attempt_history"]
    fixed = CommitPlan.from_json(json.dumps(plan).encode(), "plan")
    assert fixed.withdraw == ("",) and fixed.attempt_history == {}


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(tasks=[0, "1"]), "field 'tasks' must list task numbers"),
    (lambda d: d.update(deletions="a"), "field 'deletions' has type str, not list"),
    (lambda d: d.pop("app_attempt"), "lacks the field 'app_attempt'; the commit plan record is corrupt"),
    (lambda d: d.update(attempt_history={"0": [1]}), "field attempt_history['0'] is [1], not lists of attempt names"),
    (lambda d: d.update(attempt_history={"0": {"failed_attempts": [1]}}), "not lists of attempt names"),
    (lambda d: d.update(restore="day=d0"), "field 'restore' has type str, not list"),
    (lambda d: d.update(restore=["day=d9"]), "field 'restore' names ['day=d9'], not partitions whose marker"),
    (lambda d: d.update(restore=[""]), "field 'restore' names [''], not partitions whose marker"),
])
def test_commit_plan_corruption_is_named(change, message):
    plan = json.loads(plan_path().read_bytes())
    change(plan)
    with pytest.raises(CorruptRecord, match="plan.json") as err:
        CommitPlan.from_json(json.dumps(plan).encode(), "x/_commit_plan.json")
    assert message in str(err.value)


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(history={}), "field 'history' has type dict, not list"),
    (lambda d: d.update(history=[1]), "field 'history' must list objects"),
    (lambda d: d["files"].pop(), "totals.files=2 but 1 files are listed"),
    (lambda d: d.pop("job_uuid"), "lacks the field 'job_uuid'"),
    (lambda d: d.update(format="airflow-commit-provider/success"), "is not an airflow-commit-provider commit-log"),
    (lambda d: d.pop("generation"), "lacks the field 'generation'"),
    (lambda d: d.update(generation="1"), "field 'generation' has type str, not int"),
    (lambda d: d.update(tasks="0,1"), "field 'tasks' has type str, not list"),
    (lambda d: d["tasks"][0].pop("attempt"), "lacks the field 'tasks[0].attempt'"),
    (lambda d: d["tasks"][0].update(recovered_from_app="0"), "field 'tasks[0].recovered_from_app' has type str"),
    (lambda d: d["files"][0].pop("task"), "lacks the field 'files[0].task'"),
])
def test_commit_log_corruption_is_named(change, message):
    log = json.loads((FIXTURE / "commit_log.json").read_bytes())
    change(log)
    with pytest.raises(CorruptRecord, match="_commits/j.json") as err:
        CommitLog.from_json(json.dumps(log).encode(), "out/_commits/j.json")
    assert message in str(err.value)


def test_a_corrupt_job_record_stops_every_operation_naming_it(tmp_path):
    """Setup, task set-up and job commit all refuse a job whose record is corrupt, naming the file; nothing
    visible changes."""
    root = tmp_path / "out"
    shutil.copytree(FIXTURE / "crashed", root)
    record = root / "_temporary" / "jobrec-head" / "_job.json"
    record.write_bytes(json.dumps(_with(_job_doc(), "first_app_attempt", "1")).encode())
    before = sorted(p.name for p in root.rglob("*.parquet") if "_temporary" not in p.parts)
    c = make_committer(str(root), "jobrec-head", algorithm=1, mode="overwrite", partition_by=["day"])
    for call in (c.setup_job, lambda: c.setup_task(0, 9), lambda: c.commit_job(2)):
        with pytest.raises(CorruptRecord, match="_job.json.*first_app_attempt"):
            call()
    assert sorted(p.name for p in root.rglob("*.parquet") if "_temporary" not in p.parts) == before


def _committed_then_next_generation(root: Path) -> Any:
    """Generation 0 committed (one file), generation 1's one task committed: the next commit replaces the file."""
    import pyarrow as pa

    from airflow_commit_provider.protocol import run_task_attempt

    c = make_committer(str(root), "j", mode="overwrite")
    for gen in range(2):
        c.setup_job()
        run_task_attempt(c, 0, 1, lambda w, g=gen: w.write(pa.table({"task": [0], "attempt": [g]})))
        if gen == 0:
            c.commit_job(1)
    return c


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("started"),
    lambda d: d.pop("generation"),
    lambda d: d["tasks"][0].pop("attempt"),
])
def test_a_damaged_commit_log_stops_the_next_commit_before_anything_visible_changes(tmp_path, damage):
    """The commit log is read when the commit starts, before its plan: a damaged one stops it naming the file,
    with the previous generation's data and _SUCCESS untouched and the job still running (not committing: the
    teardown may still abort it). It used to be read after the new files were published and the old deleted,
    leaving a commit that failed the same way on every retry."""
    root = tmp_path / "out"
    c = _committed_then_next_generation(root)
    log_path = root / "_commits" / "j.json"
    doc = json.loads(log_path.read_bytes())
    damage(doc)
    log_path.write_bytes(json.dumps(doc).encode())
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    with pytest.raises(CorruptRecord, match="_commits/j.json"):
        c.commit_job(1)
    assert {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()} == before
    assert not list((root / "_temporary" / "j").glob("_commit_plan_*")), "no plan was fixed"
    assert c.abort_job()["aborted"] is True


def test_a_resumed_commit_with_a_damaged_plan_stops_before_anything_visible_changes(tmp_path):
    from airflow_commit_provider.protocol import faults

    root = tmp_path / "out"
    c = _committed_then_next_generation(root)
    faults.arm("commit_job.after_plan", "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            c.commit_job(1)
    finally:
        faults.disarm()
    plan_file = next((root / "_temporary" / "j").glob("_commit_plan_*"))
    plan = json.loads(plan_file.read_bytes())
    plan["attempt_history"] = {"0": [1]}
    plan_file.write_bytes(json.dumps(plan).encode())
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    with pytest.raises(CorruptRecord, match="_commit_plan_.*attempt_history"):
        c.commit_job(1)
    assert {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()} == before


def _compaction_doc() -> dict[str, Any]:
    doc = json.loads((FIXTURE / "job_compaction.json").read_bytes())
    doc["replace_inputs"] = [{"path": p, "size": 10 + i, "version": f"v{i}"}
                             for i, p in enumerate(doc["replace_files"])]
    return doc


def test_a_compaction_record_with_its_inputs_reads_and_writes_back():
    """A record with ``replace_inputs`` (sizes and versions) round-trips; without the field (the previous release)
    it reads as having none and is written back as it was (the byte-for-byte test above)."""
    data = json.dumps(_compaction_doc(), separators=(",", ":")).encode()
    job = JobRecord.from_json(data, WHERE)
    assert [(f.path, f.size, f.version) for f in job.replace_inputs] == [
        ("day=d0/a.parquet", 10, "v0"), ("day=d1/b.parquet", 11, "v1")]
    assert job.to_json() == data
    old = JobRecord.from_json((FIXTURE / "job_compaction.json").read_bytes(), WHERE)
    assert old.replace_inputs == () and old.replace_files == job.replace_files


@pytest.mark.parametrize("change,message", [
    (lambda d: d["replace_inputs"][1].update(size="11"), "field 'replace_inputs[1].size' has type str, not int"),
    (lambda d: d["replace_inputs"][0].pop("version"), "lacks the field 'replace_inputs[0].version'"),
    (lambda d: d["replace_inputs"].pop(), "replace_inputs and replace_files name different files"),
    (lambda d: d.update(replace_inputs={}), "field 'replace_inputs' has type dict, not list"),
])
def test_compaction_input_corruption_is_named(change, message):
    doc = _compaction_doc()
    change(doc)
    with pytest.raises(CorruptRecord, match=WHERE.replace(".", r"\.")) as err:
        JobRecord.from_json(json.dumps(doc).encode(), WHERE)
    assert message in str(err.value)


def test_a_thread_gets_the_job_record_it_read_while_another_thread_reads_an_older_one(tmp_path):
    """The Job keeps the last record it parsed, shared by the threads that use it (shards, a commit's pool). A
    thread must get the generation whose bytes it read: another thread that read the previous generation's bytes
    earlier, and stores them while this one is between its read and its return, must not hand this one that
    older record (a try set up against it would take the newer generation's application attempt and fence its
    attempts). Both threads are paused at the exact step, with events: one inside its read, the other at the line
    that returns the record."""
    import sys
    import threading

    from airflow_commit_provider.protocol.job import Job
    from airflow_commit_provider.protocol.stores import LocalStore

    class PausingStore(LocalStore):
        """Pauses the thread named ``slow`` just after it read the job record's bytes."""

        def __init__(self, root: str) -> None:
            super().__init__(root, durable=False)
            self.read_done, self.resume = threading.Event(), threading.Event()

        def read_bytes(self, rel: str) -> bytes:
            data = super().read_bytes(rel)
            if threading.current_thread().name == "slow" and rel.endswith("_job.json"):
                self.read_done.set()
                assert self.resume.wait(30)
            return data

    root = str(tmp_path / "out")
    store = PausingStore(root)
    c = make_committer(store, "job", mode="append")
    old = c.setup_job().job_uuid
    got: dict[str, str] = {}
    slow = threading.Thread(name="slow", target=lambda: got.update(slow=c.job.job_record().job_uuid))
    slow.start()
    assert store.read_done.wait(30)   # it holds the old generation's bytes
    c.commit_job(0)
    new = make_committer(root, "job", mode="append").setup_job().job_uuid
    at_return, go = threading.Event(), threading.Event()
    code = Job.job_record.__code__

    def tracer(frame, event, arg):   # pause the fast thread at job_record's return line, after its read
        if frame.f_code is not code:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno > code.co_firstlineno and \
                    open(code.co_filename).readlines()[frame.f_lineno - 1].strip().startswith("return"):
                sys.settrace(None)
                at_return.set()
                assert go.wait(30)
            return line
        return line

    def fast() -> None:
        sys.settrace(tracer)
        got["fast"] = c.job.job_record().job_uuid

    fast_thread = threading.Thread(name="fast", target=fast)
    fast_thread.start()
    assert at_return.wait(30)   # it read (and parsed) the new generation's record
    store.resume.set()
    slow.join(30)               # the slow thread stores the old one
    go.set()
    fast_thread.join(30)
    assert got == {"slow": old, "fast": new}, got


def test_a_record_one_committer_changes_in_memory_is_not_what_another_committer_reads(tmp_path):
    """Found from outside: the parse of a job record is remembered for the process (every committer of a task
    attempt reads the same bytes), and the record handed out held the remembered parse's own ``labels`` dict. A
    caller that edited the labels of the record it got (``committer.job_record().labels``, a plain dict) changed
    the record every later committer of the process was handed: a fresh committer's commit then wrote labels
    that are not in the job record into ``_SUCCESS``. Each committer must get the record as its bytes say."""
    import pyarrow as pa

    from airflow_commit_provider.protocol import read_success_marker, run_task_attempt

    root = str(tmp_path / "out")
    labels = {"dag_id": "daily", "nested": {"runs": [1]}}
    first = make_committer(root, "job", labels=labels)
    first.setup_job()
    got = first.job_record()
    got.labels["dag_id"] = "edited"
    got.labels["nested"]["runs"].append(2)
    second = make_committer(root, "job")
    assert second.job_record().labels == labels
    run_task_attempt(second, 0, 1, lambda w: w.write(pa.table({"id": [1]})))
    assert second.commit_job(1)["labels"] == labels
    assert read_success_marker(root)["labels"] == labels
