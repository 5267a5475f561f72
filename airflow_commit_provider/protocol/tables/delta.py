"""Delta Lake tables through delta-rs (the ``deltalake`` package): a job commit is one Delta transaction.

The transaction carries the application transaction ``(app id, version)`` = (``commit-provider:<job id>``,
generation) and the job's tag in its commitInfo. delta-rs records the pair but leaves skipping a duplicate to the
caller; what makes it safe across processes is its conflict checker: a commit fails ("Concurrent transaction
failed") when a commit that landed since the snapshot it read carries the same app id. So the check "is this
generation (or a later one) in the table?" is made on the very snapshot the transaction is built on, and a second
process that passed the same check concurrently is refused by delta-rs and then finds the generation present.
Different jobs (app ids) appending at once both land; two overwrites of the same files: the second fails on
delta-rs's delete/delete conflict, nothing of it visible.

Files are committed with ``create_write_transaction`` in append mode with explicit remove actions (the files the
mode replaces, and the job's earlier generation), so every removed file is one this commit read.
"""

from __future__ import annotations

import json
import time
from urllib.parse import unquote
from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa

from ..errors import CommitProtocolError, InvalidOutputSpec
from ..faults import inject
from ..paths import partition_of
from .common import DataFile, GenerationSuperseded, JobTag, SchemaMismatch, TableCommit, TableTarget, \
    describe_difference, TAG_PREFIX

try:
    from deltalake import CommitProperties, DeltaTable, Schema as DeltaSchema, Transaction
    from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("table_format='delta' needs the deltalake package: pip install "
                      "'airflow-commit-provider[delta]'") from exc

#: how often a commit is rebuilt on a new snapshot when the table was created concurrently under it
_ATTEMPTS = 3


def app_id(job_id: str) -> str:
    """The Delta application id of a job: stable across its retries, clears and generations."""
    return f"commit-provider:{job_id}"


class DeltaTarget(TableTarget):
    """A Delta table at *uri* (local path or ``s3://``, *storage_options* as delta-rs takes them)."""

    format = "delta"

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = str(uri).rstrip("/")
        self.storage_options = dict(storage_options or {}) or None

    @property
    def data_root(self) -> str:
        return self.uri

    @property
    def name(self) -> str:
        return self.uri

    def _load(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def exists(self) -> bool:
        return self._load() is not None

    def files_at(self, version: int | None) -> dict[str, int]:
        if version is None:
            dt = self._load()
        else:
            try:
                dt = DeltaTable(self.uri, version=version, storage_options=self.storage_options)
            except (TableNotFoundError, DeltaError):   # its log entries were cleaned up since: what is read now
                return self.files_at(None)
        return {} if dt is None else {path: size for path, (size, _) in _files(dt).items()}

    def check_schema(self, schema: pa.Schema) -> None:
        dt = self._load()
        if dt is not None:
            _check_schema(dt, schema, self.uri)

    def check_partitioning(self, partition_by: Sequence[str]) -> None:
        dt = self._load()
        if dt is not None:
            _check_partitioning(dt, partition_by, self.uri)

    def check_empty(self, own: Collection[str] = ()) -> None:
        dt = self._load()
        if dt is not None and set(_files(dt)) - set(own):
            raise InvalidOutputSpec(f"Delta table {self.uri} already holds data (version {dt.version()}) and mode "
                                    "is 'error'; use mode='append', 'overwrite' or 'dynamic' to write there")

    def committed(self, tag: JobTag, files: Sequence[DataFile] = ()) -> TableCommit | None:
        dt = self._load()
        return None if dt is None else self._committed(dt, tag, files)

    def _committed(self, dt: DeltaTable, tag: JobTag, files: Sequence[DataFile]) -> TableCommit | None:
        landed = dt.transaction_version(app_id(tag.job_id))
        if landed is None or landed < tag.generation:
            return None
        if landed > tag.generation:
            raise GenerationSuperseded(
                f"Delta table {self.uri} holds generation {landed} of job {tag.job_id}, later than generation "
                f"{tag.generation} (job uuid {tag.job_uuid}) committing now: this is a zombie of an older "
                "generation; nothing was added")
        version = self._version_of(dt, tag)
        if version is None and {f.path for f in files} & set(_files(dt)):
            version = dt.version()   # the log before the checkpoint was cleaned up; the files are the proof
        if version is None:
            raise CommitProtocolError(
                f"Delta table {self.uri} records generation {landed} of job {tag.job_id} (app id "
                f"{app_id(tag.job_id)}), but no commit of it carries job uuid {tag.job_uuid}: another job with the "
                "same id (whose commit log was removed) committed there; use another job id")
        return TableCommit(self.format, self.uri, version, 0, 0, already=True)

    def _version_of(self, dt: DeltaTable, tag: JobTag) -> int | None:
        """The table version whose commitInfo carries *tag*'s job uuid (newest first)."""
        for entry in dt.history():
            if entry.get(f"{TAG_PREFIX}job-uuid") == tag.job_uuid:
                return int(entry["version"])
        return None

    def commit(self, tag: JobTag, files: Sequence[DataFile], schema: pa.Schema | None, mode: str,
               partition_by: Sequence[str], replaces: Collection[str]) -> TableCommit:
        props = CommitProperties(custom_metadata=tag.properties(),
                                 app_transactions=[Transaction(app_id(tag.job_id), tag.generation)])
        adds = [_add(f) for f in files]
        for _ in range(_ATTEMPTS):
            dt = self._load()
            if dt is None:
                assert schema is not None, "a table is created from the files' schema"
                inject("table_commit.before")
                try:
                    create_table_with_add_actions(self.uri, DeltaSchema.from_arrow(schema), adds, mode="error",
                                                  partition_by=list(partition_by),
                                                  storage_options=self.storage_options, commit_properties=props)
                except Exception:  # noqa: BLE001 - created concurrently (delta-rs raises a generic error)
                    if self._load() is None:
                        raise
                    continue
                return self._landed(tag, len(adds), 0)
            if (done := self._committed(dt, tag, ())) is not None:
                return done
            if schema is not None:
                _check_schema(dt, schema, self.uri)
            _check_partitioning(dt, partition_by, self.uri)
            if mode == "error":
                self.check_empty(replaces)
            removes = _removals(dt, mode, {partition_of(f.path) for f in files}, set(replaces))
            inject("table_commit.before")   # checked on the snapshot the transaction is built on; not yet sent
            try:
                dt.create_write_transaction(adds + removes, "append",
                                            dt.schema() if schema is None else DeltaSchema.from_arrow(schema),
                                            list(partition_by), commit_properties=props)
            except CommitFailedError:
                # the same job committed concurrently (delta-rs refuses the same app id): it landed, or a later
                # generation did; otherwise a real conflict (an overwrite lost to another), raised as it is
                if (done := self.committed(tag)) is not None:
                    return done
                raise
            return self._landed(tag, len(adds), len(removes))
        raise CommitProtocolError(f"Delta table {self.uri}: could not commit after {_ATTEMPTS} attempts")

    def _landed(self, tag: JobTag, added: int, removed: int) -> TableCommit:
        dt = self._load()
        version = None if dt is None else self._version_of(dt, tag)
        if version is None:  # pragma: no cover - delta-rs returned from a commit it did not make
            raise CommitProtocolError(f"Delta table {self.uri}: the commit of job {tag.job_id} is not in its history")
        return TableCommit(self.format, self.uri, version, added, removed)


def _add(f: DataFile) -> AddAction:
    stats = json.dumps({"numRecords": f.rows}) if f.rows is not None else ""
    return AddAction(f.path, f.size, dict(f.partition), int(time.time() * 1000), True, stats)


def _files(dt: DeltaTable) -> dict[str, tuple[int, dict[str, str | None]]]:
    """The table's current files: path (as the file is named under the table's root) -> (size, partition values
    as strings). The log keeps paths URI-encoded and delta-rs hands them out so (``p=x%252Fy/...`` for the
    directory ``p=x%2Fy``), while add and remove actions take the file's own name and encode it themselves: decoded
    here, so the paths compare with the job's and a remove names the file its add did."""
    actions = pa.table(dt.get_add_actions(flatten=False)).to_pylist()
    return {unquote(a["path"]): (a["size_bytes"], {k: None if v is None else _partition_str(v)
                                          for k, v in (a.get("partition") or {}).items()})
            for a in actions}


def _partition_str(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _removals(dt: DeltaTable, mode: str, partitions: set[str], replaces: set[str]) -> list[RemoveAction]:
    now = int(time.time() * 1000)
    out = []
    for path, (size, values) in _files(dt).items():
        if mode == "overwrite" or path in replaces or (mode == "dynamic" and partition_of(path) in partitions):
            out.append(RemoveAction(path, True, now, size, values or None))
    return out


def _check_schema(dt: DeltaTable, schema: pa.Schema, uri: str) -> None:
    ours = DeltaSchema.from_arrow(schema)
    if json.loads(ours.to_json()) != json.loads(dt.schema().to_json()):
        raise SchemaMismatch(f"the job's files do not have the schema of Delta table {uri}: "
                             f"{describe_difference(pa.schema(dt.schema().to_arrow()), schema)}; nothing was "
                             "committed (schema evolution is not implied)")


def _check_partitioning(dt: DeltaTable, partition_by: Sequence[str], uri: str) -> None:
    if list(dt.metadata().partition_columns) != list(partition_by):
        raise SchemaMismatch(f"Delta table {uri} is partitioned by {list(dt.metadata().partition_columns)}, the "
                             f"job by {list(partition_by)}; nothing was committed")
