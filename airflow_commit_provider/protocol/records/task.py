"""The task commit record as a type: what ``_temporary/<job>/<app>/_commits/task_<task>.json`` holds.

After Hadoop's manifest committer ``TaskManifest``: a typed, versioned record that validates what it reads. Its
creation (exclusive) is the commit decision of one task; everything after it is an effect any party can finish
from it. The JSON is the one earlier releases of this package wrote (same keys, same order, same meaning), so a
job started by an older release is recovered and committed by this one, and the other way round.

==========================  ==============================================================================
field                       meaning
==========================  ==============================================================================
``job_id``, ``job_uuid``    the job and its generation (a record of another generation is ignored)
``task``, ``attempt``       the task and its committed attempt (Airflow's try number)
``app_attempt``             the application attempt the record belongs to (its directory)
``work_dir``                the committed attempt's directory (relative to the output root)
``data_dir``                where the files lie until job commit: the attempt directory, the application
                            attempt's ``_committed`` directory (v1 on local disk) or ``""`` (v2: the output)
``recovered_from_app``      ``None``; on an adopted record, the application attempt whose commit it adopts
``committed``               when the task committed (UTC, ISO 8601)
``files``                   :class:`FileEntry` per file, sorted by path
``original_app_attempt``    adopted records only: the application attempt the task committed in
``recovered``               adopted records only: when it was adopted
``inputs``                  what the task was given (an opaque digest from the caller, see
                            :meth:`TaskCommitRecord.same_inputs`); absent: not known (an earlier release)
``schema``                  only when the attempt wrote Parquet through its writer: the digest of its files'
                            Arrow schema (:func:`..schemas.schema_digest`), what a directory job's commit
                            compares (one schema per job) without reading a footer
``stats``                   only when the attempt wrote Parquet through its writer: its columns and, per
                            partition, null counts and min/max per column, from the footers the writer held
                            (:mod:`..audit.stats`): what an audit checks without reading a file
==========================  ==============================================================================
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from .. import records
from ..errors import CorruptRecord
from ..stores import Store

KIND = "task-commit"
_FORMAT = f"{records.FORMAT}/{KIND}"
#: how :meth:`TaskCommitRecord.to_json` starts every record: the format and version the fast path then need not check
_HEAD = records.encode({"format": _FORMAT, "version": records.VERSION})[:-1] + b","


def _bad(where: str, field: str, value: Any, want: str) -> CorruptRecord:
    return CorruptRecord(f"{where}: field {field!r} has type {type(value).__name__}, not {want}; the task commit "
                         "record is corrupt")


def _get(doc: Mapping[str, Any], key: str, typ: type, where: str, prefix: str = "", **kw: Any) -> Any:
    return records.get_field(doc, key, typ, where, KIND, prefix, **kw)


class FileEntry(msgspec.Struct, frozen=True):
    """One committed file: its final path (relative to the output root), bytes, rows (``None``: unknown) and
    task. The magic committer's entries also name the pending multipart upload: its id and ordered parts
    (``(number, ETag)``)."""

    path: str
    size: int
    rows: int | None
    task: int
    upload_id: str | None = None
    parts: tuple[tuple[int, str], ...] | None = None

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"path": self.path, "size": self.size, "rows": self.rows, "task": self.task}
        if self.upload_id is not None:
            doc["upload_id"] = self.upload_id
            doc["parts"] = [list(p) for p in self.parts or ()]
        return doc

    @classmethod
    def from_doc(cls, doc: Any, where: str, i: int = 0) -> FileEntry:
        prefix = f"files[{i}]."
        if not isinstance(doc, dict):
            raise _bad(where, f"files[{i}]", doc, "object")
        upload_id = _get(doc, "upload_id", str, where, prefix, nullable=True, required=False)
        parts = None
        if upload_id is not None:
            raw = _get(doc, "parts", list, where, prefix)
            for j, p in enumerate(raw):
                if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and not isinstance(p[0], bool)
                        and isinstance(p[1], str)):
                    raise CorruptRecord(f"{where}: field {prefix}parts[{j}] is {p!r}, not [part number, ETag]; "
                                        "the task commit record is corrupt")
            parts = tuple((n, e) for n, e in raw)
        return cls(_get(doc, "path", str, where, prefix), _get(doc, "size", int, where, prefix),
                   _get(doc, "rows", int, where, prefix, nullable=True), _get(doc, "task", int, where, prefix),
                   upload_id, parts)


class TaskCommitRecord(msgspec.Struct, frozen=True):
    """The commit record of one task in one application attempt (see the module's table of fields).

    A frozen msgspec ``Struct``, not a dataclass: job commit decodes 10,000 of them at once, and msgspec builds a
    ``Struct`` in a third of the time of a dataclass (7.6 against 23 ms for 10,000 records, one run)."""

    #: the record format version this class reads and writes (:data:`.records.VERSION`)
    VERSION = records.VERSION

    job_id: str
    job_uuid: str
    task: int
    attempt: int
    app_attempt: int
    work_dir: str
    data_dir: str
    recovered_from_app: int | None
    committed: str
    files: tuple[FileEntry, ...]
    original_app_attempt: int | None = None
    recovered: str | None = None
    inputs: str | None = None
    schema: str | None = None
    #: as read: the JSON dict, or (decoded by msgspec, the job commit's fast path) its bytes undecoded, which only
    #: an audit reads (:attr:`stats_doc`): a job commit of 10,000 records does not decode 10,000 of them
    stats: msgspec.Raw = None   # type: ignore[assignment]
    #: the ``format`` and ``version`` msgspec read (the last of a repeated key, as ``json`` reads it; never
    #: written: :meth:`to_json` stamps them), which its fast paths check (:func:`_as_from_doc`)
    record_format: str = msgspec.field(default=_FORMAT, name="format")
    record_version: int = msgspec.field(default=records.VERSION, name="version")

    @property
    def stats_doc(self) -> dict[str, Any] | None:
        """The column statistics (see the table above), decoded; :class:`CorruptRecord` if they are no object."""
        stats = self.stats
        if isinstance(stats, msgspec.Raw):
            stats = msgspec.json.decode(stats)
        if stats is not None and not isinstance(stats, dict):
            raise CorruptRecord(f"task {self.task}'s commit record: field 'stats' has type {type(stats).__name__}, "
                                "not object; the task commit record is corrupt")
        return stats

    def same_inputs(self, inputs: str | None) -> bool:
        """Whether this commit was made for *inputs* (the digest of what a write task is given now), so that it
        may be recovered for them: equal digests, or either unknown (``None``: a record of an earlier release, or
        a caller that does not say), which keeps recovering what upgrades and bare protocol users recovered."""
        return self.inputs is None or inputs is None or self.inputs == inputs

    @property
    def adopted(self) -> bool:
        """Whether this record adopts a commit of an earlier application attempt: its files are that attempt's,
        and its task commit's effect was finished there."""
        return self.recovered_from_app is not None

    @property
    def committed_in_app(self) -> int:
        """The application attempt the task's winning attempt committed in."""
        return self.app_attempt if self.original_app_attempt is None else self.original_app_attempt

    def adopted_by(self, app: int) -> TaskCommitRecord:
        """The record by which application attempt *app* adopts this one (recovery: no data moves). It points at
        the application attempt whose attempt directory and files it is, through any chain of adoptions."""
        return msgspec.structs.replace(self, app_attempt=app,
                       recovered_from_app=self.app_attempt if self.recovered_from_app is None
                       else self.recovered_from_app,
                       original_app_attempt=self.committed_in_app, recovered=records.now_iso())

    # ------------------------------------------------------------------ JSON
    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job_id": self.job_id, "job_uuid": self.job_uuid, "task": self.task, "attempt": self.attempt,
            "app_attempt": self.app_attempt, "work_dir": self.work_dir, "data_dir": self.data_dir,
            "recovered_from_app": self.recovered_from_app, "committed": self.committed,
            "files": [f.to_doc() for f in self.files]}
        if self.original_app_attempt is not None:
            body["original_app_attempt"] = self.original_app_attempt
        if self.recovered is not None:
            body["recovered"] = self.recovered
        if self.inputs is not None:
            body["inputs"] = self.inputs
        if self.schema is not None:
            body["schema"] = self.schema
        if self.stats is not None:   # as read: bytes go back as they came
            body["stats"] = records.Encoded(bytes(self.stats)) if isinstance(self.stats, msgspec.Raw) else self.stats
        return body

    def to_doc(self) -> dict[str, Any]:
        """The record as the plain dict :func:`.records.read` gives (format and version included): what the
        committer's public methods return."""
        body = self._body()
        if "stats" in body:
            body["stats"] = self.stats_doc
        return {"format": _FORMAT, "version": records.VERSION, **body}

    def to_json(self) -> bytes:
        """The record's bytes, format and version stamped by :func:`.records.dumps`."""
        return records.dumps(KIND, self._body())

    @classmethod
    def from_json(cls, data: bytes, where: str) -> TaskCommitRecord:
        """Parse and validate; :class:`CorruptRecord` naming *where* (and the field) when it is not a valid
        task commit record of this version.

        Job commit reads one record per task (10,000 and more): a record as :meth:`to_json` writes it (format and
        version first, no upload) is decoded and type-checked in one pass by msgspec, straight into this class, in
        a sixth of the time of ``json`` and :meth:`from_doc`. msgspec is as strict (no ``bool`` for an ``int``,
        no ``float``, every field without a default required, unknown fields ignored); anything it refuses, and
        any other record, takes :meth:`from_doc`, which accepts the same records and names what is wrong."""
        if data.startswith(_HEAD):
            try:
                rec = _DECODER.decode(data)
            except msgspec.MsgspecError:   # not JSON, or a field of another type: from_doc says which
                pass
            else:
                if _as_from_doc([rec]):
                    return rec
        return cls.from_doc(records.parse(KIND, data, where), where)

    @classmethod
    def decode_many(cls, datas: Sequence[bytes], tasks: Sequence[int]) -> list[TaskCommitRecord] | None:
        """Every record *datas* (of *tasks*, in order) decoded by msgspec, one call each mapped in C: job commit's
        10,000 records, where every one is the common record (written by :meth:`to_json`, no upload); ``None``
        when one is not. Each file is decoded on its own (one call over the records joined into an array was
        slower, and let two files that are no record alone make two records together); the records are taken
        only when each is of its task, and what msgspec decoded is what :meth:`from_doc` would read
        (:func:`_as_from_doc`: looked for in what was decoded, where searching the bytes for upload keys cost
        half as much as decoding them)."""
        if not all(d.startswith(_HEAD) for d in datas):
            return None
        try:
            out = list(map(_DECODER.decode, datas))
        except msgspec.MsgspecError:
            return None
        if list(map(_task_of, out)) != list(tasks):
            return None
        return out if _as_from_doc(out) else None

    @classmethod
    def from_json_many(cls, datas: Sequence[bytes], tasks: Sequence[int],
                       where: Callable[[int], str]) -> list[TaskCommitRecord]:
        """:meth:`from_json` of every record *datas* (of *tasks*, in order): at once where :meth:`decode_many` can,
        else one by one, through :meth:`from_json`, which names the one that is wrong (*where* of its index).
        Whether each is of its task is the caller's to check (:meth:`of_task`: a record of another generation is
        ignored, whatever its task)."""
        out = cls.decode_many(datas, tasks)
        return out if out is not None else [cls.from_json(d, where(i)) for i, d in enumerate(datas)]

    def of_task(self, task: int, where: str) -> TaskCommitRecord:
        """This record, read at task *task*'s name (*where*); :class:`CorruptRecord` when it is another task's: a
        record copied over another's name would be committed, and recovered, as the other task."""
        if self.task != task:
            raise CorruptRecord(f"{where} holds the commit record of task {self.task}, not of task {task}; the task "
                                "commit record is corrupt")
        return self

    @classmethod
    def read(cls, store: Store, rel: str) -> TaskCommitRecord | None:
        """The record at *rel*, or ``None`` when there is none."""
        return records.read(store, rel, KIND, cls.from_json)

    @classmethod
    def from_doc(cls, doc: Any, where: str) -> TaskCommitRecord:
        """Validate a parsed record: format, version, and the type of every field. Unknown fields are ignored
        (a later version may add some).

        Job commit reads one record per task (10,000 and more), so the common record (exact types, no uploads)
        is checked inline, in a few microseconds; anything else takes :meth:`_checked`, which accepts the same
        records and names the field of one that is not."""
        records.check(KIND, doc, where)
        try:
            job_id, job_uuid, task, attempt, app, work_dir, data_dir, adopted_from, committed, files = (
                doc["job_id"], doc["job_uuid"], doc["task"], doc["attempt"], doc["app_attempt"], doc["work_dir"],
                doc["data_dir"], doc["recovered_from_app"], doc["committed"], doc["files"])
            entries = []
            for f in files:
                path, size, rows, owner = f["path"], f["size"], f["rows"], f["task"]
                if (type(path) is not str or type(size) is not int or (rows is not None and type(rows) is not int)
                        or type(owner) is not int or "upload_id" in f):
                    return cls._checked(doc, where)
                entries.append(FileEntry(path, size, rows, owner))
        except (KeyError, TypeError):
            return cls._checked(doc, where)
        original, recovered = doc.get("original_app_attempt"), doc.get("recovered")
        inputs, schema, stats = doc.get("inputs"), doc.get("schema"), doc.get("stats")
        if (type(job_id) is str and type(job_uuid) is str and type(task) is int and type(attempt) is int
                and type(app) is int and type(work_dir) is str and type(data_dir) is str
                and (adopted_from is None or type(adopted_from) is int) and type(committed) is str
                and (original is None or type(original) is int) and (recovered is None or type(recovered) is str)
                and (inputs is None or type(inputs) is str) and (schema is None or type(schema) is str)
                and (stats is None or type(stats) is dict) and type(files) is list):
            return cls(job_id, job_uuid, task, attempt, app, work_dir, data_dir, adopted_from, committed,
                       tuple(entries), original, recovered, inputs, schema, stats)
        return cls._checked(doc, where)

    @classmethod
    def _checked(cls, doc: dict[str, Any], where: str) -> TaskCommitRecord:
        """:meth:`from_doc` field by field: :class:`CorruptRecord` naming the first field that is wrong."""
        files = _get(doc, "files", list, where)
        return cls(
            _get(doc, "job_id", str, where), _get(doc, "job_uuid", str, where), _get(doc, "task", int, where),
            _get(doc, "attempt", int, where), _get(doc, "app_attempt", int, where),
            _get(doc, "work_dir", str, where), _get(doc, "data_dir", str, where),
            _get(doc, "recovered_from_app", int, where, nullable=True), _get(doc, "committed", str, where),
            tuple(FileEntry.from_doc(f, where, i) for i, f in enumerate(files)),
            _get(doc, "original_app_attempt", int, where, nullable=True, required=False),
            _get(doc, "recovered", str, where, nullable=True, required=False),
            _get(doc, "inputs", str, where, nullable=True, required=False),
            _get(doc, "schema", str, where, nullable=True, required=False),
            _get(doc, "stats", dict, where, nullable=True, required=False))

_DECODER = msgspec.json.Decoder(TaskCommitRecord)
_task_of = operator.attrgetter("task")


def _as_from_doc(recs: Sequence[TaskCommitRecord]) -> bool:
    """Whether records msgspec decoded are what :meth:`TaskCommitRecord.from_doc` reads from the same bytes, for
    the fast paths: their format and version this class's, ``stats`` an object (msgspec keeps any JSON value raw),
    and no upload (``from_doc`` checks an upload's parts, and drops parts without one). A pass per check, in C
    where it can: job commit checks 10,000 at once."""
    return (all(rec.record_format == _FORMAT and rec.record_version == records.VERSION for rec in recs)
            and not any(f.upload_id is not None or f.parts is not None for rec in recs for f in rec.files)
            and all(memoryview(rec.stats)[:1] == b"{" for rec in recs if rec.stats is not None))

__all__ = ["FileEntry", "KIND", "TaskCommitRecord"]
