"""Job commits into Delta Lake and Apache Iceberg tables: the write stage as for files, and job commit as one
table transaction that is idempotent across processes (:mod:`.common`).

::

    table = table_target("delta", "/data/events")
    committer = FileOutputCommitter(table.data_root, "events-2024-01-01", mode="append", table=table)

The format modules import their libraries (``deltalake``, ``pyiceberg``) only when a table of theirs is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidOutputSpec
from ..stores import AZURE_SCHEMES, GCS_SCHEMES, process_local, target_scheme
from .common import FORMATS, DataFile, GenerationSuperseded, JobTag, SchemaMismatch, TableCommit, TableTarget


def table_target(table_format: str, location: str | None = None, *, table_name: str | None = None,
                 catalog: Mapping[str, Any] | None = None,
                 storage_options: Mapping[str, str] | None = None) -> TableTarget:
    """The table *table_format* names: ``"delta"`` at *location*; ``"iceberg"`` named *table_name* in the
    pyiceberg *catalog* (catalog properties; by default a SQL catalog on SQLite under *location*), its data at
    *location* if given when the table is created.

    A table on ``memory://`` is refused before anything is opened: the format libraries keep their own memories
    (delta-rs's ``memory://`` is not fsspec's), so the table's log and the job's records would live in two
    different places, and either lives in one process only."""
    if process_local(location) or (isinstance(catalog, Mapping) and process_local(catalog.get("warehouse"))):
        raise _memory_table(table_format, location if process_local(location) else catalog["warehouse"])
    check_table_location(table_format, location)
    if table_format == "delta":
        if not location:
            raise InvalidOutputSpec("table_format='delta' needs the table's location as target")
        if table_name or catalog:
            raise InvalidOutputSpec("table_name and catalog are Iceberg parameters; a Delta table is its location")
        from .delta import DeltaTarget
        return DeltaTarget(location, dict(storage_options or {}))
    if table_format == "iceberg":
        from .iceberg import IcebergTarget
        table = IcebergTarget.open(table_name, catalog, location)
        if process_local(table.location):
            raise _memory_table(table_format, table.location)
        return table
    raise InvalidOutputSpec(f"unknown table_format {table_format!r}: use one of {', '.join(FORMATS)}")


def check_table_location(table_format: str, location: Any) -> None:
    """Tables live on a local disk or S3: on Google Cloud Storage or Azure the format library would write the
    table's log with credentials of its own, not the connection's the stage's files go through (only S3's are
    handed to delta-rs and pyiceberg), so a table there is refused before anything is made."""
    if target_scheme(location) in GCS_SCHEMES + AZURE_SCHEMES:
        raise InvalidOutputSpec(
            f"a {table_format} table on {location!r} is not supported: tables are committed on a local path or on "
            f"s3://bucket/prefix. There write a directory of files (no table_format), which commits exactly once")


def _memory_table(table_format: str, where: Any) -> InvalidOutputSpec:
    return InvalidOutputSpec(
        f"a {table_format} table on {where!r} is refused: memory:// lives inside one process, and the table "
        f"library's memory is not the one the job's records are kept in, so the commit would read neither the "
        f"other's writes. Put the table on a local path (e.g. '/data/events') or on s3://bucket/prefix")


__all__ = ["FORMATS", "DataFile", "GenerationSuperseded", "JobTag", "SchemaMismatch", "TableCommit", "TableTarget",
           "check_table_location", "table_target"]
