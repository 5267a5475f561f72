"""The task commit record as a type (:mod:`airflow_commit_provider.protocol.records.task`): round trips, every kind
of corruption named with its file and field, and records written by the previous release (``fixtures/
records_head``: a job set up, its tasks committed in application attempt 0, then cleared once, by the code as it
was before the record was typed) read, recovered and committed by this one."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from airflow_commit_provider.protocol import CorruptRecord, FileOutputCommitter, run_task_attempt
from airflow_commit_provider.protocol import records
from airflow_commit_provider.protocol.records.task import FileEntry, TaskCommitRecord
from airflow_commit_provider.protocol.stores.local import LocalStore

FIXTURE = Path(__file__).parent / "fixtures" / "records_head"
JOB = "records-head"
WHERE = "s3://bucket/out/_temporary/j/0/_commits/task_00007.json"


def head_record(app: int, task: int) -> bytes:
    return (FIXTURE / "_temporary" / JOB / str(app) / "_commits" / f"task_{task:05d}.json").read_bytes()


def head_records() -> list[Path]:
    """Every task commit record of the fixture: the local job's and the magic committer's."""
    return sorted(FIXTURE.glob("**/_commits/task_*.json"))


def magic_doc() -> dict[str, Any]:
    doc = json.loads(head_record(0, 2))
    doc["files"][0].update(upload_id="2~upload", parts=[[1, '"etag-1"'], [2, '"etag-2"']])
    return doc


# ---------------------------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("path", head_records(), ids=lambda p: "/".join(p.parts[-3:]))
def test_head_records_read_and_write_back_byte_for_byte(path):
    """Every record the previous release wrote (fresh and adopted) is read, and written back as the same bytes:
    the same keys, in the same order, with the same values, so either release reads the other's records."""
    data = path.read_bytes()
    rec = TaskCommitRecord.from_json(data, str(path))
    assert rec.to_json() == data
    assert TaskCommitRecord._checked(json.loads(data), str(path)) == rec, "the inline check and the field by " \
        "field check read the same record"
    assert rec.to_doc() == records.loads("task-commit", data, str(path)), "the public dict is the one read before"
    assert rec == TaskCommitRecord.from_doc(json.loads(data), str(path)), "the one-pass decoding of a record as " \
        "to_json writes it reads what json and from_doc read"


@pytest.mark.parametrize("job", [JOB, "magic"])
def test_adoption_is_the_previous_releases_adoption(job):
    """``adopted_by`` writes what the previous release's recovery wrote (only the adoption time differs); adopting
    an adopted record keeps pointing at the application attempt that holds the files."""
    base = FIXTURE / "_temporary" / JOB if job == JOB else FIXTURE / "magic" / "records-head-magic"
    before, after = ((base / str(app) / "_commits" / "task_00000.json").read_bytes() for app in (0, 1))
    original = TaskCommitRecord.from_json(before, "app 0")
    written_by_head = TaskCommitRecord.from_json(after, "app 1")
    adopted = original.adopted_by(1)
    assert adopted.recovered is not None and adopted.recovered != written_by_head.recovered
    assert adopted.to_json().replace(adopted.recovered.encode(), written_by_head.recovered.encode()) == after
    again = written_by_head.adopted_by(2)
    assert (again.app_attempt, again.recovered_from_app, again.original_app_attempt, again.committed_in_app) \
        == (2, 0, 0, 0)
    assert again.adopted and not original.adopted and original.committed_in_app == 0
    assert TaskCommitRecord.from_json(again.to_json(), "x") == again


def test_magic_uploads_round_trip():
    doc = magic_doc()
    rec = TaskCommitRecord.from_doc(doc, WHERE)
    entry = rec.files[0]
    assert entry.upload_id == "2~upload" and entry.parts == ((1, '"etag-1"'), (2, '"etag-2"'))
    assert rec.to_doc() == doc
    assert TaskCommitRecord.from_json(rec.to_json(), WHERE) == rec
    assert json.loads(rec.to_json()) == doc


def test_records_are_frozen_and_plain_entries_carry_no_upload():
    rec = TaskCommitRecord.from_json(head_record(0, 1), WHERE)
    with pytest.raises(AttributeError):
        rec.attempt = 3  # type: ignore[misc]
    assert rec.files == (FileEntry(rec.files[0].path, 466, 1, 1),)
    assert "upload_id" not in rec.files[0].to_doc() and "original_app_attempt" not in json.loads(rec.to_json())
    assert TaskCommitRecord.VERSION == records.VERSION


# ---------------------------------------------------------------------------------------------- corruption
def _set(path: str, value: Any):
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = doc
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is _DELETE:
            del target[last]
        else:
            target[int(last) if last.isdigit() else last] = value
    return change


_DELETE = object()

CORRUPTIONS = [
    # (what changes, the message it must give)
    ("job_id", 7, "field 'job_id' has type int, not str"),
    ("job_uuid", None, "field 'job_uuid' has type NoneType, not str"),
    ("task", "3", "field 'task' has type str, not int"),
    ("attempt", True, "field 'attempt' has type bool, not int"),
    ("attempt", 1.0, "field 'attempt' has type float, not int"),
    ("app_attempt", _DELETE, "lacks the field 'app_attempt'"),
    ("work_dir", _DELETE, "lacks the field 'work_dir'"),
    ("data_dir", ["x"], "field 'data_dir' has type list, not str"),
    ("recovered_from_app", "0", "field 'recovered_from_app' has type str, not int or null"),
    ("recovered_from_app", _DELETE, "lacks the field 'recovered_from_app'"),
    ("committed", 1, "field 'committed' has type int, not str"),
    ("files", {}, "field 'files' has type dict, not list"),
    ("files", _DELETE, "lacks the field 'files'"),
    ("original_app_attempt", "0", "field 'original_app_attempt' has type str, not int or null"),
    ("recovered", 3, "field 'recovered' has type int, not str or null"),
    ("files.0", "part-0.parquet", "field 'files[0]' has type str, not object"),
    ("files.0.path", 5, "field 'files[0].path' has type int, not str"),
    ("files.0.size", "466", "field 'files[0].size' has type str, not int"),
    ("files.0.size", _DELETE, "lacks the field 'files[0].size'"),
    ("files.0.rows", 1.5, "field 'files[0].rows' has type float, not int or null"),
    ("files.0.task", _DELETE, "lacks the field 'files[0].task'"),
    ("files.0.upload_id", 12, "field 'files[0].upload_id' has type int, not str or null"),
    ("format", "airflow-commit-provider/job", "is not an airflow-commit-provider task-commit record"),
    ("version", 2, "has unsupported record version 2"),
]


#: a record spaced as json.dumps writes it, and compact as to_json does (the one-pass decoding's way in)
ENCODINGS = {"spaced": lambda doc: json.dumps(doc).encode(), "compact": records.encode}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("field,value,message", CORRUPTIONS,
                         ids=[f"{f}={'deleted' if v is _DELETE else repr(v)}" for f, v, _ in CORRUPTIONS])
def test_each_corruption_is_named_with_file_and_field(field, value, message, encoding):
    doc = json.loads(head_record(1, 0))   # an adopted record: every field present
    _set(field, value)(doc)
    with pytest.raises(CorruptRecord) as raised:
        TaskCommitRecord.from_json(ENCODINGS[encoding](doc), WHERE)
    assert str(raised.value).startswith(WHERE) and message in str(raised.value)


@pytest.mark.parametrize("field,value,message", [
    ("files.0.parts", _DELETE, "lacks the field 'files[0].parts'"),
    ("files.0.parts", "1:etag", "field 'files[0].parts' has type str, not list"),
    ("files.0.parts.1", [2], "field files[0].parts[1] is [2], not [part number, ETag]"),
    ("files.0.parts.0", ["1", "etag"], "field files[0].parts[0] is ['1', 'etag'], not [part number, ETag]"),
])
def test_magic_corruption_is_named(field, value, message):
    doc = magic_doc()
    _set(field, value)(doc)
    with pytest.raises(CorruptRecord, match=None) as raised:
        TaskCommitRecord.from_doc(doc, WHERE)
    assert str(raised.value).startswith(WHERE) and message in str(raised.value)


@pytest.mark.parametrize("data,message", [
    (b'{"format": "airflow-commit-provider/task-commit", "vers', "is not valid JSON"),
    (b"[1, 2]", "is not a JSON object"),
    (b"", "is not valid JSON"),
    (b"\xff\xfe", "is not valid JSON"),
    (b'{"format":"airflow-commit-provider/task-commit","version":1,"job_id":', "is not valid JSON"),
    (b'{"format":"airflow-commit-provider/task-commit","version":1,"job_id":"j\xff"}', "is not valid JSON"),
])
def test_unparsable_records_are_named(data, message):
    with pytest.raises(CorruptRecord) as raised:
        TaskCommitRecord.from_json(data, WHERE)
    assert str(raised.value).startswith(WHERE) and message in str(raised.value)


def test_unknown_fields_are_ignored():
    """A later version may add fields: this one reads the record, and writes back what it knows."""
    doc = json.loads(head_record(0, 1))
    doc["checksum"] = "abc"
    doc["files"][0]["etag"] = "x"
    rec = TaskCommitRecord.from_doc(doc, WHERE)
    assert rec == TaskCommitRecord.from_json(head_record(0, 1), WHERE) == TaskCommitRecord.from_json(
        records.encode(doc), WHERE)


# ---------------------------------------------------------------------------------------------- through the committer
def head_job(tmp_path: Path) -> tuple[str, FileOutputCommitter]:
    """The previous release's job, as a DAG run left it when it failed (tasks 0-2 committed in application attempt
    0, the run cleared once: task 0 adopted and task 3 committed in application attempt 1)."""
    root = tmp_path / "out"
    root.mkdir()
    shutil.copytree(FIXTURE / "_temporary", root / "_temporary")
    return str(root), FileOutputCommitter(str(root), JOB, algorithm=1, mode="append", partition_by=["day"],
                                          commit_threads=2)


def committed_tasks(root: str) -> list[int]:
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    return sorted(table.column("task").to_pylist())


@pytest.mark.parametrize("how", ["cleared", "resumed"])
def test_a_job_written_by_the_previous_release_commits_exactly_once(tmp_path, how):
    """``cleared``: the run is cleared after the upgrade: a new application attempt, every task found committed
    (recovered, nothing run again), then job commit. ``resumed``: job commit straight away, recovering tasks 1
    and 2 from application attempt 0. Either way every task's row is in the output exactly once."""
    root, c = head_job(tmp_path)
    status = c.status()
    assert status["state"] == "running" and [t["task"] for t in status["tasks"]] == [0, 1, 2, 3]
    assert [t["recovered_from_app"] for t in status["tasks"]] == [0, None, None, None]
    assert status["tasks"][1]["failed_attempts"] == ["0.1"]
    if how == "cleared":
        assert c.setup_job().app_attempt == 2
        for task in range(4):
            outcome = run_task_attempt(c, task, 1, lambda w: pytest.fail("a committed task ran again"))
            assert outcome.status == "recovered" and outcome.rows == 1
            assert outcome.record["recovered_from_app"] == (1 if task == 3 else 0)
    manifest = c.commit_job(4)
    assert committed_tasks(root) == [0, 1, 2, 3]
    assert manifest["totals"]["rows"] == 4 and manifest["totals"]["files"] == 4
    assert {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]} == (
        {0: 0, 1: 0, 2: 0, 3: 1} if how == "cleared" else {0: 0, 1: 0, 2: 0, 3: None})
    assert not os.path.exists(os.path.join(root, "_temporary", JOB))
    assert c.committed_task_record(1)["attempt"] == 2
    assert c.commit_job(4)["job_uuid"] == manifest["job_uuid"], "committing again changes nothing"
    assert committed_tasks(root) == [0, 1, 2, 3]


def test_a_corrupt_field_stops_job_commit_naming_the_record(tmp_path):
    root, c = head_job(tmp_path)
    record = Path(root) / "_temporary" / JOB / "1" / "_commits" / "task_00003.json"
    doc = json.loads(record.read_bytes())
    doc["files"][0]["size"] = "466"
    record.write_text(json.dumps(doc))
    with pytest.raises(CorruptRecord, match=r"task_00003\.json: field 'files\[0\]\.size' has type str"):
        c.commit_job(4)
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
    assert not any(p.suffix == ".parquet" for p in Path(root).glob("day=*/*"))


@pytest.mark.parametrize("value", [
    [{"path": "p=1/part-00000.parquet", "size": 466, "rows": None, "task": 0}, {"path": "b", "size": 1, "rows": 3,
                                                                                 "task": 10 ** 20}],
    [{"task": 1, "failed_attempts": ["0.1"], "denied_attempts": [], "recovered_from_app": None, "ok": True}],
    ["date=2026-12-02/région=é", 'a"b', "back\\slash", "tab\there", "\x1f", "\u2028"],
    [Path("/x"), {"k": Path("y")}],   # not JSON: json's default=str
    [],
])
def test_long_lists_encode_to_jsons_bytes(value):
    """The manifest's long lists (msgspec, for speed) are the bytes ``json`` writes: _SUCCESS is byte for byte
    what it was, escapes and non-ASCII included."""
    assert records.encode_plain(value) == records.encode(value) == json.dumps(
        value, separators=(",", ":"), default=str).encode()


# ---------------------------------------------------------------------------------------------- job commit's reads
def test_records_decoded_at_once_are_the_records_decoded_one_by_one():
    """Job commit decodes all its records in one call (``decode_many``): the same records ``from_json`` reads, one
    by one; a batch holding a record it does not take (an upload, which ``from_doc`` checks; one cut short; a
    record of another task) is not decoded at once, and ``from_json_many`` then reads each as ``from_json`` does."""
    paths = [p for p in head_records() if "magic" not in p.parts]
    datas = [p.read_bytes() for p in paths]
    tasks = [int(p.stem[5:]) for p in paths]
    one_by_one = [TaskCommitRecord.from_json(d, str(p)) for d, p in zip(datas, paths)]
    assert TaskCommitRecord.decode_many(datas, tasks) == one_by_one
    upload = json.dumps(magic_doc(), separators=(",", ":")).encode()
    assert TaskCommitRecord.from_json(upload, WHERE).files[0].upload_id == "2~upload"
    for bad_batch, bad_tasks in [(datas + [upload], tasks + [2]), (datas[:-1] + [datas[-1][:-1]], tasks),
                                 (datas, tasks[1:] + tasks[:1])]:
        assert TaskCommitRecord.decode_many(bad_batch, bad_tasks) is None
    mixed = TaskCommitRecord.from_json_many(datas + [upload], tasks + [2], lambda i: WHERE)
    assert mixed[:-1] == one_by_one and mixed[-1].files[0].parts == ((1, '"etag-1"'), (2, '"etag-2"'))
    no_parts = magic_doc()
    del no_parts["files"][0]["parts"]
    with pytest.raises(CorruptRecord, match=r"task_00007\.json lacks the field 'files\[0\]\.parts'"):
        TaskCommitRecord.from_json_many(datas + [json.dumps(no_parts).encode()], tasks + [2], lambda i: WHERE)


class CutFirstReads(LocalStore):
    """The local disk, read as a network file system may: a first read returns less than it asked for, and less
    than the file (POSIX allows it; NFS and FUSE do it), here half of every task commit record."""

    reads_whole = 0

    def read_in_dir(self, rel: str, names: Sequence[str]) -> list[bytes | None]:
        self.reads_whole += 1
        return super().read_in_dir(rel, names)

    def read_in_dir_once(self, rel: str, names: Sequence[str]) -> list[bytes | None]:
        return [None if data is None else data[: len(data) // 2] for data in super().read_in_dir_once(rel, names)]


def test_a_record_cut_by_a_short_read_is_read_again_whole_not_taken_for_damaged(tmp_path):
    """Job commit reads each record with one system call where a short read is the end of the file (a local
    disk); when its records do not decode at once, it reads them again whole: a record cut short by the file
    system is committed, not refused as corrupt."""
    root = tmp_path / "out"
    root.mkdir()
    shutil.copytree(FIXTURE / "_temporary", root / "_temporary")
    store = CutFirstReads(str(root))
    c = FileOutputCommitter(store, JOB, algorithm=1, mode="append", partition_by=["day"])
    manifest = c.commit_job(4)
    assert store.reads_whole >= 1, "the records were read again whole"
    assert committed_tasks(str(root)) == [0, 1, 2, 3] and manifest["totals"]["files"] == 4


def _with(key: str, value: str) -> Any:
    """A damage: *key* written once more, with *value* (JSON), at the record's end (``json`` reads the last)."""
    return lambda data: data[:-1] + f',"{key}":{value}}}'.encode()


def _upload_null(data: bytes) -> bytes:
    return data.replace(b'"rows":', b'"upload_id":null,"rows":', 1)


@pytest.mark.parametrize("damage, message", [
    (_with("stats", "[1]"), "field 'stats' has type list"),
    (lambda d: _with("stats", "[1]")(_upload_null(d)), "field 'stats' has type list"),
    (_with("version", "2"), "unsupported record version 2"),
    (lambda d: _with("version", "2")(_upload_null(d)), "unsupported record version 2"),
    (_with("format", '"airflow-commit-provider/job-commit"'), "is not an airflow-commit-provider task-commit record"),
    (lambda d: head_record(1, 0), "holds the commit record of task 0, not of task 3"),
    (lambda d: d.replace(b'"task":3,', b'"task":9,', 1), "holds the commit record of task 9, not of task 3"),
], ids=["stats-list", "stats-list-upload-null", "version-again", "version-again-upload-null", "format-again",
        "another-tasks-record", "task-field-changed"])
def test_a_damaged_record_job_commit_reads_at_once_is_refused_as_when_read_alone(tmp_path, damage, message):
    """What job commit decodes at once (msgspec) it accepts only where reading the record alone (``json`` and
    ``from_doc``) would: a repeated ``format`` or ``version`` (``json`` reads the last), ``stats`` that are no
    object, an ``upload_id`` of null beside either, a record at another task's name. Each is refused naming the
    record, nothing visible changed (all were committed before, some named as another task's clash)."""
    root, c = head_job(tmp_path)
    record = Path(root) / "_temporary" / JOB / "1" / "_commits" / "task_00003.json"
    record.write_bytes(damage(record.read_bytes()))
    if "holds the commit record" not in message:   # alone, a record does not know its name
        with pytest.raises(CorruptRecord, match=message):
            TaskCommitRecord.from_json(record.read_bytes(), str(record))
    with pytest.raises(CorruptRecord, match=rf"task_00003\.json.*{message}"):
        c.commit_job(4)
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
    assert not any(p.suffix == ".parquet" for p in Path(root).glob("day=*/*"))


def test_a_record_of_another_task_in_an_earlier_attempt_is_refused_before_it_is_recovered(tmp_path):
    """Recovery reads an earlier application attempt's records one at a time: a record there that is another
    task's is refused as job commit's one pass refuses it, before it is adopted or planned (accepted there, the
    plan named it and every resumed commit refused the same record: stuck)."""
    root, c = head_job(tmp_path)
    record = Path(root) / "_temporary" / JOB / "0" / "_commits" / "task_00002.json"
    record.write_bytes(record.read_bytes().replace(b'"task":2,', b'"task":5,', 1))
    for _ in range(2):   # the same verdict again: nothing was adopted or planned by the first
        with pytest.raises(CorruptRecord, match=r"0/_commits/task_00002\.json holds the commit record of task 5, "
                                                r"not of task 2"):
            c.commit_job(4)
    assert not (Path(root) / "_temporary" / JOB / "1" / "_commits" / "task_00002.json").exists()
    assert not list((Path(root) / "_temporary" / JOB).glob("_commit_plan_*"))
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))


def test_two_files_that_are_no_record_alone_are_not_two_records_together(tmp_path):
    """Each record file is decoded on its own: one left open and another that closes it and then holds a record
    were two valid records when job commit decoded its records joined into one array (from the first release of
    that pass on); alone, each is refused, as reading it alone refuses it."""
    root, c = head_job(tmp_path)
    commits = Path(root) / "_temporary" / JOB / "1" / "_commits"
    first, last = commits / "task_00000.json", commits / "task_00003.json"
    record = last.read_bytes()
    first.write_bytes(first.read_bytes()[:-1] + b',"x":[0')
    last.write_bytes(record + b"]}," + record)
    with pytest.raises(CorruptRecord, match=r"1/_commits/task_00000\.json"):
        c.commit_job(4)
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
