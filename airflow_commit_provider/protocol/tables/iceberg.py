"""Apache Iceberg tables through pyiceberg: a job commit is one snapshot, committed by the catalog's
compare-and-swap.

The snapshot's summary carries the job's tag (:class:`~.common.JobTag`). Whether the table holds the job's
generation is asked twice: before building the snapshot (a resumed commit that finds it adds nothing), and by a
table requirement (:class:`GenerationAbsent`) that the catalog validates against the metadata it swaps from, in
the same step as the swap. The second matters because pyiceberg retries a commit that lost a race by rebuilding
it on the new metadata: without the requirement a second process committing the same generation at the same
moment would be rebuilt on top of the first one's snapshot and add the files again. Catalogs that validate
requirements themselves before their swap (SQL, Glue, Hive) run it; a REST catalog would refuse the unknown
requirement, never commit twice. The walk covers every ancestor of the current snapshot on ``main`` (the whole
history that snapshot expiry kept), not only the last few.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from ..errors import CommitProtocolError, InvalidOutputSpec
from ..faults import inject
from .common import DataFile, GenerationSuperseded, JobTag, SchemaMismatch, TableCommit, TableTarget

try:
    from pyiceberg.catalog import Catalog, load_catalog
    from pyiceberg.exceptions import (CommitFailedException, NoSuchTableError, TableAlreadyExistsError,
                                      ValidationException)
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema, assign_fresh_schema_ids
    from pyiceberg.table import Table, TableProperties
    from pyiceberg.table.snapshots import ancestors_of
    from pyiceberg.table.update import ValidatableTableRequirement
    from pyiceberg.transforms import IdentityTransform
    from pydantic import Field
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("table_format='iceberg' needs pyiceberg: pip install 'airflow-commit-provider[iceberg]'") from exc

#: how often a commit is rebuilt when the table was created concurrently under it
_ATTEMPTS = 3
#: the embedded catalog's file under the warehouse directory, and its name (a SQL catalog keys its tables by
#: catalog name too: a reader opens it as ``SqlCatalog("commit_provider", uri="sqlite:///<warehouse>/catalog.db",
#: warehouse="file://<warehouse>")``)
CATALOG_FILE = "catalog.db"
CATALOG_NAME = "commit_provider"


class GenerationPresent(ValidationException):
    """Raised inside the catalog's commit when the table already holds the generation (or a later one): the
    commit is dropped, not retried (pyiceberg retries only :class:`CommitFailedException`)."""


class GenerationAbsent(ValidatableTableRequirement):
    """The requirement that the table's ``main`` history holds no snapshot of *job_id* at generation
    *generation* or later, validated by the catalog against the metadata it swaps from."""

    type: Literal["commit-provider-generation-absent"] = Field(default="commit-provider-generation-absent")
    job_id: str = Field(...)
    generation: int = Field(...)

    def validate(self, base_metadata: Any) -> None:
        if base_metadata is None:
            return
        for tag, snapshot_id in tags(base_metadata):
            if tag.job_id == self.job_id and tag.generation >= self.generation:
                raise GenerationPresent(f"snapshot {snapshot_id} holds generation {tag.generation} of job "
                                        f"{self.job_id}")


def tags(metadata: Any) -> list[tuple[JobTag, int]]:
    """The job tags of every snapshot in the ``main`` history of *metadata*, newest first."""
    ref = metadata.refs.get("main")
    current = metadata.snapshot_by_id(ref.snapshot_id) if ref is not None else None
    out = []
    for snapshot in ancestors_of(current, metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if (tag := JobTag.from_properties(props)) is not None:
            out.append((tag, snapshot.snapshot_id))
    return out


def local_path(uri: str) -> str:
    """A ``file:`` URI as a path (the committer's store takes paths for the local disk); other URIs unchanged."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return uri


class IcebergTarget(TableTarget):
    """Table *identifier* (``namespace.name``) in *catalog*; its data files go under ``<location>/data``."""

    format = "iceberg"

    def __init__(self, catalog: Catalog, identifier: str, location: str) -> None:
        self.catalog = catalog
        self.identifier = identifier
        self.location = location.rstrip("/")

    @classmethod
    def open(cls, table_name: str | None, catalog: Mapping[str, Any] | None, warehouse: str | None) -> IcebergTarget:
        """The table named *table_name* in the catalog *catalog* describes (pyiceberg catalog properties), or, with
        no catalog, in an embedded SQL catalog on SQLite in *warehouse* (``<warehouse>/catalog.db``)."""
        if not table_name or "." not in table_name:
            raise InvalidOutputSpec(f"table_format='iceberg' needs table_name='namespace.table', got {table_name!r}")
        if catalog is None:
            if not warehouse:
                raise InvalidOutputSpec("table_format='iceberg' needs catalog= (pyiceberg catalog properties) or a "
                                        "target: the warehouse directory of an embedded SQLite catalog")
            root = os.path.abspath(local_path(str(warehouse))) if "://" not in str(warehouse) or \
                str(warehouse).startswith("file:") else None
            if root is None:
                raise InvalidOutputSpec(f"the embedded SQLite catalog needs a local warehouse, not {warehouse!r}; "
                                        "pass catalog= for a catalog elsewhere")
            os.makedirs(root, exist_ok=True)
            catalog = {"type": "sql", "uri": f"sqlite:///{root}/{CATALOG_FILE}", "warehouse": f"file://{root}"}
        props = dict(catalog)
        cat = load_catalog(str(props.pop("name", CATALOG_NAME)), **props)
        namespace = table_name.rsplit(".", 1)[0]
        try:
            location = cat.load_table(table_name).location()
        except NoSuchTableError:
            # where the catalog would put the table (pyiceberg has no public call for it): the files go there
            cat.create_namespace_if_not_exists(namespace)
            location = cat._resolve_table_location(None, namespace, table_name.rsplit(".", 1)[1])
        return cls(cat, table_name, location)

    @property
    def data_uri(self) -> str:
        return f"{self.location}/data"

    @property
    def data_root(self) -> str:
        return local_path(self.data_uri)

    @property
    def name(self) -> str:
        return self.identifier

    def identity(self) -> dict[str, str]:
        return {"format": self.format, "name": self.identifier}

    def _load(self) -> Table | None:
        try:
            return self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            return None

    def exists(self) -> bool:
        return self._load() is not None

    def files_at(self, version: int | None) -> dict[str, int]:
        table = self._load()
        if table is not None and version is not None and table.snapshot_by_id(version) is None:
            version = None   # the snapshot expired since (pyiceberg would scan it as empty): what is read now
        if table is None or (version is None and table.current_snapshot() is None):
            return {}
        prefix = self.data_uri + "/"
        scan = table.scan() if version is None else table.scan(snapshot_id=version)
        return {t.file.file_path.removeprefix(prefix): t.file.file_size_in_bytes for t in scan.plan_files()}

    def check_schema(self, schema: pa.Schema) -> None:
        table = self._load()
        if table is not None:
            _check_schema(table, schema, self.identifier)

    def check_partitioning(self, partition_by: Sequence[str]) -> None:
        table = self._load()
        if table is not None:
            _check_partitioning(table, partition_by, self.identifier)

    def check_empty(self, own: Collection[str] = ()) -> None:
        table = self._load()
        mine = {f"{self.data_uri}/{p}" for p in own}
        if table is not None and table.current_snapshot() is not None and \
                {df.file_path for df in _files(table)} - mine:
            raise InvalidOutputSpec(f"Iceberg table {self.identifier} already holds data (snapshot "
                                    f"{table.current_snapshot().snapshot_id}) and mode is 'error'; use "
                                    "mode='append', 'overwrite' or 'dynamic' to write there")

    def committed(self, tag: JobTag, files: Sequence[DataFile] = ()) -> TableCommit | None:
        table = self._load()
        return None if table is None else self._committed(table, tag, files)

    def _committed(self, table: Table, tag: JobTag, files: Sequence[DataFile]) -> TableCommit | None:
        for found, snapshot_id in tags(table.metadata):
            if found.job_id != tag.job_id or found.generation < tag.generation:
                continue
            if found.generation > tag.generation:
                raise GenerationSuperseded(
                    f"Iceberg table {self.identifier} holds generation {found.generation} of job {tag.job_id} "
                    f"(snapshot {snapshot_id}), later than generation {tag.generation} (job uuid {tag.job_uuid}) "
                    "committing now: this is a zombie of an older generation; nothing was added")
            if found.job_uuid != tag.job_uuid:
                raise CommitProtocolError(
                    f"Iceberg table {self.identifier}: snapshot {snapshot_id} holds generation {found.generation} "
                    f"of job {tag.job_id} with job uuid {found.job_uuid}, not {tag.job_uuid}: another job with the "
                    "same id (whose commit log was removed) committed there; use another job id")
            return TableCommit(self.format, self.identifier, snapshot_id, 0, 0, already=True)
        # its snapshot expired (the job tag with it): adding the files again would read every row twice
        ours = {f"{self.data_uri}/{f.path}" for f in files}
        current = table.current_snapshot()
        if not ours or current is None or not ours & {df.file_path for df in _files(table)}:
            return None
        return TableCommit(self.format, self.identifier, current.snapshot_id, 0, 0, already=True)

    def _create(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        iceberg = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
        spec = PartitionSpec(*[PartitionField(source_id=iceberg.find_field(col).field_id, field_id=1000 + i,
                                              transform=IdentityTransform(), name=col)
                               for i, col in enumerate(partition_by)])
        self.catalog.create_table(self.identifier, schema=iceberg, location=self.location, partition_spec=spec)

    def commit(self, tag: JobTag, files: Sequence[DataFile], schema: pa.Schema | None, mode: str,
               partition_by: Sequence[str], replaces: Collection[str]) -> TableCommit:
        for _ in range(_ATTEMPTS):
            table = self._load()
            if table is None:
                assert schema is not None, "a table is created from the files' schema"
                try:
                    self._create(schema, partition_by)
                except TableAlreadyExistsError:
                    pass
                continue
            if (done := self._committed(table, tag, ())) is not None:
                return done
            if schema is not None:
                _check_schema(table, schema, self.identifier)
            _check_partitioning(table, partition_by, self.identifier)
            if mode == "error":
                self.check_empty(replaces)
            try:
                removed = self._commit(table, tag, files, mode, {f"{self.data_uri}/{p}" for p in replaces})
            except GenerationPresent:
                if (done := self.committed(tag)) is not None:
                    return done
                raise   # pragma: no cover - the requirement saw a generation the walk does not
            except CommitFailedException:
                if (done := self.committed(tag)) is not None:
                    return done
                raise
            return self._landed(tag, len(files), removed)
        raise CommitProtocolError(f"Iceberg table {self.identifier}: could not commit after {_ATTEMPTS} attempts")

    def _commit(self, table: Table, tag: JobTag, files: Sequence[DataFile], mode: str, replaces: set[str]) -> int:
        """Build and send the snapshot; returns how many files it removed."""
        tx = table.transaction()
        # validated by the catalog against the metadata it swaps from; staged first, as pyiceberg validates a
        # requirement against the transaction's metadata when it is staged (there is no public call for this)
        tx._apply((), (GenerationAbsent(job_id=tag.job_id, generation=tag.generation),))
        if tx.table_metadata.name_mapping() is None:
            # the files carry no Iceberg field ids: readers map their columns by name (as add_files does)
            tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                 tx.table_metadata.schema().name_mapping.model_dump_json()})
        data_files = [parquet_file_to_data_file(table.io, tx.table_metadata, f"{self.data_uri}/{f.path}")
                      for f in files]
        removed = _removals(table, mode, data_files, replaces)
        update = tx.update_snapshot(snapshot_properties=tag.properties())
        with (update.overwrite() if removed else update.fast_append()) as producer:
            for df in removed:
                producer.delete_data_file(df)
            for df in data_files:
                producer.append_data_file(df)
        inject("table_commit.before")   # checked on the snapshot the transaction is built on; not yet sent
        tx.commit_transaction()
        return len(removed)

    def _landed(self, tag: JobTag, added: int, removed: int) -> TableCommit:
        table = self._load()
        for found, snapshot_id in tags(table.metadata) if table is not None else []:
            if found.job_uuid == tag.job_uuid:
                return TableCommit(self.format, self.identifier, snapshot_id, added, removed)
        raise CommitProtocolError(  # pragma: no cover - the catalog returned from a commit it did not make
            f"Iceberg table {self.identifier}: the snapshot of job {tag.job_id} is not in its history")


def _files(table: Table) -> list[Any]:
    """The data files of the table's current snapshot."""
    return [task.file for task in table.scan().plan_files()]


def _removals(table: Table, mode: str, added: Sequence[Any], replaces: set[str]) -> list[Any]:
    """The current snapshot's data files that *mode* and the earlier generation replace. Partitions are compared
    as pyiceberg derived them for the files being added (its own representation: dates as days, and so on)."""
    if table.current_snapshot() is None:
        return []
    written = {tuple(df.partition) for df in added}
    return [df for df in _files(table)
            if mode == "overwrite" or df.file_path in replaces or (mode == "dynamic" and tuple(df.partition) in written)]


def _fields(schema: Schema) -> dict[str, str]:
    return {f.name: str(f.field_type) for f in schema.fields}


def _check_schema(table: Table, schema: pa.Schema, identifier: str) -> None:
    ours, theirs = _fields(Catalog._convert_schema_if_needed(schema)), _fields(table.schema())
    if ours != theirs:
        parts = []
        if missing := [n for n in theirs if n not in ours]:
            parts.append(f"missing column(s) {missing}")
        if added := [n for n in ours if n not in theirs]:
            parts.append(f"new column(s) {added}")
        if changed := [f"{n}: {theirs[n]} -> {ours[n]}" for n in theirs if n in ours and theirs[n] != ours[n]]:
            parts.append(f"changed type(s) {changed}")
        raise SchemaMismatch(f"the job's files do not have the schema of Iceberg table {identifier}: "
                             f"{'; '.join(parts)}; nothing was committed (schema evolution is not implied)")


def _check_partitioning(table: Table, partition_by: Sequence[str], identifier: str) -> None:
    spec = [(f.name, str(f.transform)) for f in table.spec().fields]
    if spec != [(col, "identity") for col in partition_by]:
        raise SchemaMismatch(f"Iceberg table {identifier} is partitioned by {spec}, the job by identity of "
                             f"{list(partition_by)}; nothing was committed")
