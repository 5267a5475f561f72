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
from .common import FORMATS, DataFile, GenerationSuperseded, JobTag, SchemaMismatch, TableCommit, TableTarget


def table_target(table_format: str, location: str | None = None, *, table_name: str | None = None,
                 catalog: Mapping[str, Any] | None = None,
                 storage_options: Mapping[str, str] | None = None) -> TableTarget:
    """The table *table_format* names: ``"delta"`` at *location*; ``"iceberg"`` named *table_name* in the
    pyiceberg *catalog* (catalog properties; by default a SQL catalog on SQLite under *location*), its data at
    *location* if given when the table is created."""
    if table_format == "delta":
        if not location:
            raise InvalidOutputSpec("table_format='delta' needs the table's location as target")
        if table_name or catalog:
            raise InvalidOutputSpec("table_name and catalog are Iceberg parameters; a Delta table is its location")
        from .delta import DeltaTarget
        return DeltaTarget(location, dict(storage_options or {}))
    if table_format == "iceberg":
        from .iceberg import IcebergTarget
        return IcebergTarget.open(table_name, catalog, location)
    raise InvalidOutputSpec(f"unknown table_format {table_format!r}: use one of {', '.join(FORMATS)}")


__all__ = ["FORMATS", "DataFile", "GenerationSuperseded", "JobTag", "SchemaMismatch", "TableCommit", "TableTarget",
           "table_target"]
