"""The job's own records as types: the job record, the commit plan and the commit log.

Like :class:`~.taskrecord.TaskCommitRecord`: frozen, versioned (:data:`.records.VERSION`), validated when read
(:class:`CorruptRecord` naming the field), and written as the same JSON earlier releases wrote (same keys, same
order), so a job started by an older release is finished by this one.

====================  ==================================================================================
record                what it decides
====================  ==================================================================================
:class:`JobRecord`    the generation (``job_uuid``), its configuration (a retry with another one is
                      refused), its first application attempt, and what its commit replaces
:class:`CommitPlan`   what a job commit does, fixed exclusively before anything visible changes: a crashed
                      commit is resumed from it, and the teardown refuses to abort once it exists
:class:`CommitLog`    the committed generation's manifest (what ``_SUCCESS`` says) and the earlier
                      generations' summaries; it outlives ``_temporary``, and the next generation's commit
                      replaces its files
====================  ==================================================================================
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import records
from ..errors import CorruptRecord
from ..stores import Store


def _strings(doc: Mapping[str, Any], key: str, where: str, kind: str, prefix: str = "", *, required: bool = True,
             default: tuple[str, ...] = ()) -> tuple[str, ...]:
    values = records.get_field(doc, key, list, where, kind, prefix, required=required, default=list(default))
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise CorruptRecord(f"{where}: field {prefix}{key}[{i}] is {v!r}, not a string; the {kind} record is "
                                "corrupt")
    return tuple(values)


def _objects(doc: Mapping[str, Any], key: str, fields: Mapping[str, Any], where: str, kind: str) -> None:
    """Check that ``doc[key]`` lists objects whose *fields* have the given types (``None`` in a type tuple: may be
    null), so that code reading them meets a :class:`CorruptRecord`, not a ``KeyError`` or ``TypeError``."""
    for i, entry in enumerate(records.get_field(doc, key, list, where, kind)):
        if not isinstance(entry, dict):
            raise CorruptRecord(f"{where}: field {key}[{i}] is {entry!r}, not an object; the {kind} record is corrupt")
        for name, typ in fields.items():
            types = typ if isinstance(typ, tuple) else (typ,)
            records.get_field(entry, name, tuple(t for t in types if t is not None), where, kind, f"{key}[{i}].",
                              nullable=None in types)


def _inputs(doc: Mapping[str, Any], where: str) -> tuple[InputFile, ...]:
    if "replace_inputs" not in doc:
        return ()
    _objects(doc, "replace_inputs", {"path": str, "size": int, "version": str}, where, JobRecord.KIND)
    inputs = tuple(InputFile(e["path"], e["size"], e["version"]) for e in doc["replace_inputs"])
    if [f.path for f in inputs] != list(doc.get("replace_files") or []):
        raise CorruptRecord(f"{where}: fields replace_inputs and replace_files name different files; the job record "
                            "is corrupt")
    return inputs


def _table(doc: Mapping[str, Any], where: str) -> dict[str, str] | None:
    """The job's table (absent in a directory job's record, and in every record of releases before tables)."""
    table = records.get_field(doc, "table", dict, where, JobRecord.KIND, required=False)
    if table is None:
        return None
    if not isinstance(table.get("format"), str) or not all(isinstance(v, str) for v in table.values()):
        raise CorruptRecord(f"{where}: field 'table' is {table!r}, not the table's format and name as strings; the "
                            "job record is corrupt")
    return dict(table)


def _names(doc: Mapping[str, Any], where: str, kind: str) -> dict[str, str] | None:
    """What named the job (``CommitConfig(names=...)``); absent in records of releases before it, and of callers
    that name nothing."""
    names = records.get_field(doc, "names", dict, where, kind, required=False)
    if names is None:
        return None
    if not all(isinstance(v, str) for v in names.values()):
        raise CorruptRecord(f"{where}: field 'names' is {names!r}, not names mapped to strings; the {kind} record "
                            "is corrupt")
    return dict(names)


@dataclass(frozen=True)
class Replaces:
    """The committed generation a new generation's commit replaces: its uuid, number and files."""

    job_uuid: str
    generation: int
    files: tuple[str, ...]


@dataclass(frozen=True)
class InputFile:
    """An existing file a job will replace, as the job read it: its size and version (:meth:`.Store.file_versions`),
    so that its commit can tell whether the file is still the one it read."""

    path: str
    size: int
    version: str

    def to_doc(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "version": self.version}


@dataclass(frozen=True)
class JobRecord:
    """One generation of a job: created once (exclusively) by the first ``setup_job`` after the previous
    generation's commit, deleted by this generation's commit."""

    KIND = "job"

    committer: str
    algorithm: int | str
    mode: str
    partition_by: tuple[str, ...]
    job_id: str
    job_uuid: str
    generation: int
    first_app_attempt: int
    created: str
    labels: Mapping[str, Any]
    replaces: Replaces | None
    #: existing files this generation's commit replaces (a compaction's inputs)
    replace_files: tuple[str, ...] = ()
    #: delete *replace_files* before publishing (a compaction: never a row twice)
    replace_first: bool = False
    #: *replace_files* as they were when the job record was created (size, version): job commit refuses if one of
    #: them is gone or changed since. Empty in records of releases before it (their commits do not check).
    replace_inputs: tuple[InputFile, ...] = ()
    #: the table the job publishes into (:meth:`~..tables.common.TableTarget.identity`: its format, and an
    #: Iceberg table's identifier); ``None`` for a directory of files, whose records have no such field
    table: Mapping[str, str] | None = None
    #: what named the job (``CommitConfig(names=...)``: the operators' DAG id, job key and job name), so that a
    #: set-up of this job id named otherwise is refused; ``None`` in records of earlier releases (accepted)
    names: Mapping[str, str] | None = None

    def config(self) -> dict[str, Any]:
        """What a job keeps across attempts: committer, algorithm, mode, partitioning, and the table if any (as in
        the JSON)."""
        out: dict[str, Any] = {"committer": self.committer, "algorithm": self.algorithm, "mode": self.mode,
                               "partition_by": list(self.partition_by)}
        if self.table is not None:
            out["table"] = dict(self.table)
        return out

    @property
    def maintenance(self) -> str | None:
        """The kind of maintenance this job is, for its manifest (``"compaction"``: a job whose new files hold the
        rows of the files it replaces, *replace_first*, changes no row), or ``None`` for a job that writes data."""
        return "compaction" if self.replace_first else None

    @property
    def replaced_files(self) -> set[str]:
        """The previous generation's files, which this generation's commit replaces."""
        return set(self.replaces.files) if self.replaces else set()

    def to_json(self) -> bytes:
        replaces = None if self.replaces is None else {
            "job_uuid": self.replaces.job_uuid, "generation": self.replaces.generation,
            "files": list(self.replaces.files)}
        inputs = {"replace_inputs": [f.to_doc() for f in self.replace_inputs]} if self.replace_inputs else {}
        return records.dumps(self.KIND, {
            **self.config(), "job_id": self.job_id, "job_uuid": self.job_uuid, "generation": self.generation,
            "first_app_attempt": self.first_app_attempt, "created": self.created, "labels": dict(self.labels),
            "replaces": replaces, "replace_files": list(self.replace_files), "replace_first": self.replace_first,
            **inputs, **({} if self.names is None else {"names": dict(self.names)})})

    @classmethod
    def from_json(cls, data: bytes, where: str) -> JobRecord:
        """Parse and validate; :class:`CorruptRecord` naming *where* and the field."""
        doc = records.loads(cls.KIND, data, where)
        k = cls.KIND

        def get(key: str, typ: type | tuple[type, ...], **kw: Any) -> Any:
            return records.get_field(doc, key, typ, where, k, **kw)

        raw = get("replaces", dict, nullable=True, required=False)
        replaces = None if raw is None else Replaces(
            records.get_field(raw, "job_uuid", str, where, k, "replaces."),
            records.get_field(raw, "generation", int, where, k, "replaces."),
            _strings(raw, "files", where, k, "replaces."))
        return cls(get("committer", str), get("algorithm", (int, str)), get("mode", str),
                   _strings(doc, "partition_by", where, k), get("job_id", str), get("job_uuid", str),
                   get("generation", int), get("first_app_attempt", int), get("created", str),
                   get("labels", dict, required=False, default={}), replaces,
                   _strings(doc, "replace_files", where, k, required=False),
                   get("replace_first", bool, required=False, default=False), _inputs(doc, where),
                   _table(doc, where), _names(doc, where, k))

    @classmethod
    def read(cls, store: Store, rel: str) -> JobRecord | None:
        return records.read(store, rel, cls.KIND, cls.from_json)

    @classmethod
    def parsed(cls, data: bytes, where: str) -> JobRecord:
        """:meth:`from_json`, remembered for the process: every task attempt reads its job's record at set-up,
        each through a committer of its own (one per Airflow task instance, one per shard), and the same bytes
        always parse to the same record. Each caller gets its own copy of the fields that hold JSON objects
        (``labels``, ``table``, ``names``: plain dicts): an edit one caller makes must not reach what every later committer
        of the process is handed, and so into its ``_SUCCESS`` (the copy costs under half a parse)."""
        shared = _parsed_job(data, where)
        return dataclasses.replace(shared, labels=_fresh(shared.labels),
                                   table=None if shared.table is None else dict(shared.table),
                                   names=None if shared.names is None else dict(shared.names))


@dataclass(frozen=True)
class CommitPlan:
    """What one job commit does, named by task (a task's record in an application attempt is never rewritten), so
    it stays small whatever the number of files."""

    KIND = "commit-plan"

    job_id: str
    job_uuid: str
    app_attempt: int
    started: str
    tasks: tuple[int, ...]
    #: visible files deleted once the new ones are in place
    deletions: tuple[str, ...]
    #: directories whose ``_SUCCESS`` goes before the first visible change
    withdraw: tuple[str, ...]
    #: per task (as a string), its failed, denied and unfinished attempts, for the manifest
    attempt_history: Mapping[str, Any]
    #: directories of *withdraw* (not the root) whose ``_SUCCESS`` existed when the plan was fixed and that the
    #: commit writes again: a compaction's partitions, whose rows it does not change. Once withdrawn, a resumed
    #: commit cannot see which existed; absent (empty) in every other job's plan and in older releases' plans
    restore: tuple[str, ...] = ()
    #: the audit's verdict the commit took (:class:`~..audit.run.AuditGate`), for ``_SUCCESS``; absent (``None``)
    #: for a stage without an audit
    audit: Mapping[str, Any] | None = None

    def to_json(self) -> bytes:
        restore = {"restore": list(self.restore)} if self.restore else {}
        audit = {"audit": dict(self.audit)} if self.audit is not None else {}
        return records.dumps(self.KIND, {
            "job_id": self.job_id, "job_uuid": self.job_uuid, "app_attempt": self.app_attempt,
            "started": self.started, "tasks": list(self.tasks), "deletions": list(self.deletions),
            "withdraw": list(self.withdraw), **restore, "attempt_history": dict(self.attempt_history), **audit})

    @classmethod
    def from_json(cls, data: bytes, where: str) -> CommitPlan:
        doc = records.loads(cls.KIND, data, where)
        k = cls.KIND
        tasks = records.get_field(doc, "tasks", list, where, k)
        if not all(type(t) is int for t in tasks):
            raise CorruptRecord(f"{where}: field 'tasks' must list task numbers; the commit plan is corrupt")
        history = records.get_field(doc, "attempt_history", dict, where, k, required=False, default={})
        for task, entry in history.items():
            if not isinstance(entry, dict) or not all(
                    isinstance(v, list) and all(isinstance(a, str) for a in v) for v in entry.values()):
                raise CorruptRecord(f"{where}: field attempt_history[{task!r}] is {entry!r}, not lists of attempt "
                                    "names; the commit plan is corrupt")
        # a plan without the field withdraws the root's marker, as the plans that lacked it did
        withdraw = _strings(doc, "withdraw", where, k, required=False, default=("",))
        restore = _strings(doc, "restore", where, k, required=False)
        wrong = sorted(d for d in restore if not d or d not in withdraw)
        if wrong:
            raise CorruptRecord(f"{where}: field 'restore' names {wrong}, not partitions whose marker the plan "
                                "withdraws; the commit plan is corrupt")
        return cls(records.get_field(doc, "job_id", str, where, k), records.get_field(doc, "job_uuid", str, where, k),
                   records.get_field(doc, "app_attempt", int, where, k), records.get_field(doc, "started", str, where, k),
                   tuple(tasks), _strings(doc, "deletions", where, k), withdraw, history, restore,
                   records.get_field(doc, "audit", dict, where, k, nullable=True, required=False))

    @classmethod
    def read(cls, store: Store, rel: str) -> CommitPlan | None:
        return records.read(store, rel, cls.KIND, cls.from_json)


@dataclass(frozen=True)
class CommitLog:
    """The job's commit log: the last committed generation's manifest (the ``_SUCCESS`` document as the commit log
    stage saw it, durations aside) and the summaries of the generations before it, oldest first."""

    KIND = "commit-log"

    manifest: Mapping[str, Any]
    history: tuple[Mapping[str, Any], ...] = ()

    @property
    def job_uuid(self) -> str:
        return self.manifest["job_uuid"]

    @property
    def generation(self) -> int:
        return self.manifest["generation"]

    @property
    def app_attempt(self) -> int:
        return self.manifest["app_attempt"]

    @property
    def files(self) -> list[dict[str, Any]]:
        return self.manifest["files"]

    @property
    def names(self) -> dict[str, str] | None:
        """What named the committed generation's job (``None``: committed by an earlier release, or unnamed)."""
        return self.manifest.get("names")

    def summary(self) -> dict[str, Any]:
        """This generation as the next one's history holds it: with its partitions, so that a watcher of one
        partition can tell whether a generation it never saw as current touched it, and its ``maintenance`` (only
        when it was some), so that a watcher tells a compaction from a commit of data by summaries alone
        (:mod:`..history`)."""
        kept = {k: self.manifest.get(k) for k in ("job_uuid", "generation", "app_attempt", "finished", "totals",
                                                  "partitions")}
        return {**kept, "maintenance": self.manifest["maintenance"]} if "maintenance" in self.manifest else kept

    def followed_by(self, manifest: Mapping[str, Any]) -> CommitLog:
        """The log after committing *manifest*: a new generation adds this one to the history; a resumed commit
        of the same generation keeps the history as it is."""
        history = self.history + ((self.summary(),) if manifest["job_uuid"] != self.job_uuid else ())
        return CommitLog(manifest, history)

    def task_record(self, task: int) -> dict[str, Any] | None:
        """The committed record of *task*, rebuilt from the manifest (the live records are cleaned up), or
        ``None`` when the generation had no such task."""
        info = next((t for t in self.manifest["tasks"] if t["task"] == task), None)
        if info is None:
            return None
        return {"job_id": self.manifest["job_id"], "job_uuid": self.job_uuid, "task": task,
                "attempt": info["attempt"], "app_attempt": info["app_attempt"],
                "recovered_from_app": info["recovered_from_app"],
                "files": [f for f in self.files if f["task"] == task], "from_commit_log": True}

    def to_doc(self) -> dict[str, Any]:
        """The record as its JSON reads (format and version, the manifest, ``history``; ``files`` last)."""
        body = {k: v for k, v in self.manifest.items() if k != "files"}
        return {"format": f"{records.FORMAT}/{self.KIND}", "version": records.VERSION, **body,
                "history": list(self.history), "files": self.files}

    def to_json(self, encoded: Mapping[str, records.Encoded] | None = None) -> bytes:
        """The record's bytes; *encoded*: the manifest's long lists already encoded (``_SUCCESS`` holds the same
        lists: :meth:`~.success.SuccessManifest.encode_long`)."""
        encoded = encoded or {}
        body = {k: encoded.get(k, v) for k, v in self.manifest.items() if k != "files"}
        return records.dumps(self.KIND, {**body, "history": list(self.history)},
                             files=encoded["files"] if "files" in encoded else records.encode(self.files))

    @classmethod
    def from_json(cls, data: bytes, where: str) -> CommitLog:
        doc = records.validate_success(records.parse(cls.KIND, data, where), where, cls.KIND)
        # what the protocol reads from a commit log besides the manifest's own fields: the next generation's
        # number and files, a late retry's task record
        records.get_field(doc, "generation", int, where, cls.KIND)
        _objects(doc, "tasks", {"task": int, "attempt": int, "app_attempt": int, "recovered_from_app": (int, None)},
                 where, cls.KIND)
        _objects(doc, "files", {"task": int}, where, cls.KIND)
        _names(doc, where, cls.KIND)
        history = records.get_field(doc, "history", list, where, cls.KIND, required=False, default=[])
        if not all(isinstance(h, dict) for h in history):
            raise CorruptRecord(f"{where}: field 'history' must list objects; the commit log is corrupt")
        manifest = {k: v for k, v in doc.items() if k not in ("format", "version", "history")}
        return cls(manifest, tuple(history))

    @classmethod
    def read(cls, store: Store, rel: str) -> CommitLog | None:
        return records.read(store, rel, cls.KIND, cls.from_json)


__all__ = ["CommitLog", "CommitPlan", "InputFile", "JobRecord", "Replaces"]


@functools.lru_cache(maxsize=8)   # a process works on few jobs; a compaction's record may be large
def _parsed_job(data: bytes, where: str) -> JobRecord:
    return JobRecord.from_json(data, where)


def _fresh(value: Any) -> Any:
    """A copy of a JSON value (objects and arrays copied all the way down; strings, numbers are immutable)."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    return value
