"""What a job commit needs from a table format, whatever the format: one transaction that adds a job
generation's files and removes the files it replaces, tagged with the job's identity, and the question "is this
generation already in the table?".

A table format's writers are exactly-once only inside one process (delta-rs and pyiceberg recognise a commit
whose response was lost by what they hold in memory). A job commit here is resumed by another process (an Airflow
retry, a cleared run, a zombie waking up), so the identity the table transaction carries is the job's own: its id
(stable across retries and clears), its generation (one per successful commit of the job: a clear after success
starts the next) and the generation's uuid. Before committing, and atomically with the commit (the format's own
conflict check), the table is asked whether the job has committed this generation or a later one:

- this generation: the transaction landed earlier (a commit killed after it, then resumed): nothing is added;
- a later generation: the caller is a zombie of an older generation: :class:`GenerationSuperseded`, nothing added.

No Airflow import here (the protocol core).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import CommitProtocolError, InvalidOutputSpec
from ..paths import NULL_PARTITION, parse_partition, partition_of
from ..stores import Store

#: the table formats a job commit can publish into
FORMATS = ("delta", "iceberg")
#: the modes of a table commit (the file committer's modes, with table semantics)
TABLE_MODES = ("error", "append", "overwrite", "dynamic")
#: bytes read from a Parquet file's end at first: its footer, for most files
_FOOTER_GUESS = 64 * 1024
#: prefix of the keys a table commit carries (Delta commitInfo, Iceberg snapshot summary)
TAG_PREFIX = "commit-provider."


class SchemaMismatch(InvalidOutputSpec):
    """The job's files do not have the table's schema (or not one schema among themselves); nothing was
    committed. Schema evolution is not done implicitly."""


class GenerationSuperseded(CommitProtocolError):
    """The table holds a later generation of the job than the one committing: the committer is a zombie of an
    older generation, and its files must never be added."""


@dataclass(frozen=True)
class JobTag:
    """Who commits: the job id, the generation's uuid and number (what makes a table commit idempotent)."""

    job_id: str
    job_uuid: str
    generation: int

    def properties(self) -> dict[str, str]:
        """The tag as string properties (Delta commitInfo, Iceberg snapshot summary)."""
        return {f"{TAG_PREFIX}job-id": self.job_id, f"{TAG_PREFIX}job-uuid": self.job_uuid,
                f"{TAG_PREFIX}generation": str(self.generation)}

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> JobTag | None:
        """The tag a commit carried, or ``None`` for a commit made by anyone else."""
        try:
            return cls(str(props[f"{TAG_PREFIX}job-id"]), str(props[f"{TAG_PREFIX}job-uuid"]),
                       int(props[f"{TAG_PREFIX}generation"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class DataFile:
    """One Parquet file a job adds: its path relative to the table's data root, size, rows and partition values
    (column -> value as a string, ``None`` for the null partition), taken from its Hive-style directory."""

    path: str
    size: int
    rows: int | None
    partition: Mapping[str, str | None] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, path: str, size: int, rows: int | None, partition_by: Sequence[str]) -> DataFile:
        values = dict(parse_partition(partition_of(path))) if partition_by else {}
        missing = [k for k in partition_by if k not in values]
        if missing:
            raise InvalidOutputSpec(f"file {path!r} is not in a partition directory of {list(partition_by)} "
                                    f"(missing {missing}); a partitioned table needs key=value directories")
        return cls(path, size, rows, {k: None if values[k] == NULL_PARTITION else values[k] for k in partition_by})


@dataclass(frozen=True)
class TableCommit:
    """The outcome of a job's table transaction: the version (Delta) or snapshot id (Iceberg) holding the
    generation, and what it added and removed. ``already`` when the transaction had landed before (a resumed
    commit found it and added nothing)."""

    format: str
    table: str
    version: int
    added: int
    removed: int
    already: bool = False

    def to_doc(self) -> dict[str, Any]:
        key = "version" if self.format == "delta" else "snapshot_id"
        return {"format": self.format, "table": self.table, key: self.version, "files_added": self.added,
                "files_removed": self.removed, "already_committed": self.already}


def parquet_schema(store: Store, rel: str) -> pa.Schema:
    """The Arrow schema in a Parquet file's footer, reading only the file's tail."""
    tail = store.read_tail(rel, _FOOTER_GUESS)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise InvalidOutputSpec(f"{store.url(rel)} is not a Parquet file; a table holds Parquet files only")
    need = int.from_bytes(tail[-8:-4], "little") + 8
    if need > len(tail):
        tail = store.read_tail(rel, need)
    return pq.read_schema(pa.BufferReader(b"PAR1" + tail[-need:])).remove_metadata()


def describe_difference(expected: pa.Schema, got: pa.Schema) -> str:
    """The columns added, missing or of another type in *got* compared with *expected*, in words."""
    exp = {f.name: f.type for f in expected}
    new = {f.name: f.type for f in got}
    parts = []
    if missing := [n for n in exp if n not in new]:
        parts.append(f"missing column(s) {missing}")
    if added := [n for n in new if n not in exp]:
        parts.append(f"new column(s) {added}")
    if changed := [f"{n}: {exp[n]} -> {new[n]}" for n in exp if n in new and exp[n] != new[n]]:
        parts.append(f"changed type(s) {changed}")
    return "; ".join(parts) or f"same columns, different order or nullability ({expected} vs {got})"


class TableTarget(ABC):
    """A table that job commits publish into. The committer's output root is :attr:`data_root`: the job's
    files are moved to their final names there before the transaction; a table reader sees only the files a
    committed snapshot lists, so the move is invisible, and the transaction is the one visibility point."""

    format: str = ""

    @property
    @abstractmethod
    def data_root(self) -> str:
        """Where the job's files go (local path or URL), the committer's output root."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The table, as ``_SUCCESS`` names it (its location, or its catalog identifier)."""

    def identity(self) -> dict[str, str]:
        """What the job record keeps of the table (the format, and for a catalog table its identifier), so a
        later committer of the job publishing elsewhere is refused: a Delta table is its location, which is
        the job's store already."""
        return {"format": self.format}

    @abstractmethod
    def exists(self) -> bool:
        """Whether the table exists yet (the first job's commit creates it)."""

    @abstractmethod
    def check_schema(self, schema: pa.Schema) -> None:
        """:class:`SchemaMismatch` naming the difference when the table exists with another schema."""

    @abstractmethod
    def check_partitioning(self, partition_by: Sequence[str]) -> None:
        """:class:`SchemaMismatch` when the table exists partitioned otherwise than by *partition_by*: checked
        before a job's plan is fixed, since the transaction would refuse the job's files on every try."""

    @abstractmethod
    def check_empty(self, own: Collection[str] = ()) -> None:
        """:class:`InvalidOutputSpec` when the table exists and holds data files other than *own* (mode
        ``error``; *own*: the job's earlier generation, which a clear after success replaces, paths relative to
        :attr:`data_root`)."""

    @abstractmethod
    def files_at(self, version: int | None) -> dict[str, int]:
        """The data files the table's *version* (Delta version, Iceberg snapshot id; ``None``: the current one)
        references, relative to :attr:`data_root`, with their sizes: what a reader of that version reads. The
        data root holds more (files older versions still list), so the job's markers list these, not the
        directory's listing. Empty while the table does not exist; the current version's when *version* is no
        longer in the table (expired, its log cleaned up: a commit resumed long after its transaction)."""

    @abstractmethod
    def committed(self, tag: JobTag, files: Sequence[DataFile] = ()) -> TableCommit | None:
        """The transaction of this job generation if the table holds it; :class:`GenerationSuperseded` when it
        holds a later generation of the job; ``None`` when neither. Once the table's maintenance made its history
        forget the transaction (an expired snapshot, a cleaned-up log), the generation's *files* still in the
        current version prove it: their names are the generation's own, so only its transaction added them
        (looked up only when *files* are given: a commit that may have landed, a resumed one)."""

    @abstractmethod
    def commit(self, tag: JobTag, files: Sequence[DataFile], schema: pa.Schema | None, mode: str,
               partition_by: Sequence[str], replaces: Collection[str]) -> TableCommit:
        """Add *files* in one transaction tagged with *tag*, removing the table's files *mode* replaces (all of
        them for ``overwrite``, those in the partitions written for ``dynamic``) and those of *replaces* (the
        job's earlier generation, paths relative to :attr:`data_root`) still in the table. Idempotent: a
        generation already in the table (checked atomically with the commit) is reported, not added again.
        *schema* is the files' (``None`` when there are none: an overwrite that empties the table)."""
