"""Column statistics gathered at task commit, and the whole job's, as an audit reads them.

The writer closes every Parquet file it makes and holds its footer then (``ParquetWriter``'s metadata): row counts,
null counts and min/max per column and row group. Reading them there costs no I/O and works for every committer,
the magic one included, whose staged files cannot be read before the job commit. A task commit records them
(:attr:`~..records.task.TaskCommitRecord.stats`) per partition, so an audit sees, from the task records alone,
what each task wrote where:

``{"columns": [[name, arrow type], ...], "partitions": {"<partition>": {"<column>": [nulls, min, max, values]}}}``

``""`` is the partition of an unpartitioned file. ``nulls`` (and ``values``, the values that are not null) are
``None`` when a row group did not say; ``min`` and ``max`` are JSON values (numbers, strings, booleans; dates,
times and timestamps in ISO form, decimals as strings), ``None`` when there is no value or they are unknown: a
column without statistics, a NaN-only float column, bytes, or text longer than :data:`MAX_TEXT` characters (a
truncated bound would be a lie). Nested columns (lists, structs, maps) are listed
in ``columns`` with no statistics. Files written through ``open_file`` have rows only (no statistics).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..paths import partition_of
from ..records.task import TaskCommitRecord

#: text and binary bounds longer than this are not kept (min/max unknown)
MAX_TEXT = 64

#: one column's statistics in a record: ``[nulls, min, max, values]``
ColumnStats = list


def encode_value(value: Any) -> Any:
    """A statistics bound as JSON, or ``None`` when it cannot be kept exactly."""
    if value is None or isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else None
    if isinstance(value, (dt.date, dt.time)):   # datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value) if value.is_finite() else None
    return None   # bytes, and anything else without an exact JSON form


def decode_value(value: Any, arrow_type: str) -> Any:
    """A bound as :func:`encode_value` wrote it, back in the column's Python type (for comparisons)."""
    if value is None or not isinstance(value, str):
        return value
    if arrow_type.startswith("date"):
        return dt.date.fromisoformat(value)
    if arrow_type.startswith("timestamp"):
        return dt.datetime.fromisoformat(value)
    if arrow_type.startswith("time"):
        return dt.time.fromisoformat(value)
    if arrow_type.startswith("decimal"):
        return decimal.Decimal(value)
    return value


def _leaves(typ: pa.DataType) -> int:
    """How many Parquet leaf columns an Arrow type takes (a struct one per field, a list its values', ...)."""
    if pa.types.is_struct(typ):
        return sum(_leaves(typ.field(i).type) for i in range(typ.num_fields)) or 1
    if pa.types.is_map(typ):
        return _leaves(typ.key_type) + _leaves(typ.item_type)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return _leaves(typ.value_type)
    return 1


def _flat(typ: pa.DataType) -> bool:
    return _leaves(typ) == 1 and not pa.types.is_nested(typ)


def file_stats(metadata: Any, schema: pa.Schema) -> dict[str, ColumnStats]:
    """``{column: [nulls, min, max, values]}`` of one Parquet file from its footer (``pyarrow.parquet.FileMetaData``), for
    the top-level columns of *schema* that are not nested."""
    out: dict[str, ColumnStats] = {}
    leaf = 0
    for f in schema:
        n = _leaves(f.type)
        if _flat(f.type):
            out[f.name] = _column(metadata, leaf)
        leaf += n
    return out


def _column(metadata: Any, index: int) -> ColumnStats:
    nulls: int | None = 0
    values: int | None = 0
    low: Any = None
    high: Any = None
    known = True
    for g in range(metadata.num_row_groups):
        chunk = metadata.row_group(g).column(index)
        s = chunk.statistics
        if s is None:
            nulls, values, known = None, None, False
            continue
        if nulls is not None:
            nulls = nulls + s.null_count if s.has_null_count else None
        if values is not None:
            values = values + chunk.num_values - s.null_count if s.has_null_count else None
        if s.has_min_max:
            lo, hi = encode_value(s.min), encode_value(s.max)
            if lo is None or hi is None:
                known = False
                continue
            low = lo if low is None else min(low, lo, key=_key(s.min))
            high = hi if high is None else max(high, hi, key=_key(s.max))
        elif not (s.has_null_count and s.null_count == chunk.num_values):
            known = False   # values without bounds (a float column of NaN only): nothing can be said
    return [nulls, low if known else None, high if known else None, values]


def _key(sample: Any) -> Any:
    """Order encoded bounds as their values order (ISO dates and times order as text; decimals do not)."""
    return decimal.Decimal if isinstance(sample, decimal.Decimal) else None


def merge_column(a: ColumnStats, b: ColumnStats, arrow_type: str) -> ColumnStats:
    """Two files' (or partitions') statistics of one column as one (a side without a value has no bounds)."""
    nulls = None if a[0] is None or b[0] is None else a[0] + b[0]
    values = None if a[3] is None or b[3] is None else a[3] + b[3]
    if a[3] == 0:
        return [nulls, b[1], b[2], values]
    if b[3] == 0:
        return [nulls, a[1], a[2], values]
    return [nulls, _bound(min, a[1], b[1], arrow_type), _bound(max, a[2], b[2], arrow_type), values]


def _bound(pick: Any, x: Any, y: Any, arrow_type: str) -> Any:
    if x is None or y is None:
        return None
    return pick(x, y, key=lambda v: decode_value(v, arrow_type))


def merge_into(into: dict[str, ColumnStats], more: Mapping[str, ColumnStats], types: Mapping[str, str]) -> None:
    """Add *more* to *into* (both ``{column: stats}``), column by column."""
    for name, stats in more.items():
        into[name] = list(stats) if name not in into else merge_column(into[name], stats, types.get(name, ""))


def task_stats_doc(schema: pa.Schema | None,
                   partitions: Mapping[str, Mapping[str, ColumnStats]]) -> dict[str, Any] | None:
    """What a task commit records (the module's format); ``None`` when the task wrote no Parquet through its writer."""
    if schema is None:
        return None
    return {"columns": [[f.name, str(f.type)] for f in schema],
            "partitions": {p: dict(cols) for p, cols in partitions.items()}}


@dataclass
class Observed:
    """What one task, one partition or the whole job holds: rows, files, bytes and column statistics."""

    rows: int | None = 0
    files: int = 0
    bytes: int = 0
    columns: dict[str, ColumnStats] = field(default_factory=dict)
    #: tasks whose files carry no statistics (written through ``open_file``, or committed by an earlier release)
    unmeasured: set[int] = field(default_factory=set)

    def add_files(self, rows: int | None, size: int) -> None:
        self.files += 1
        self.bytes += size
        self.rows = None if self.rows is None or rows is None else self.rows + rows

    def to_doc(self, types: Mapping[str, str]) -> dict[str, Any]:
        return {"rows": self.rows, "files": self.files, "bytes": self.bytes,
                "columns": {c: {"type": types.get(c), "nulls": s[0], "min": s[1], "max": s[2]}
                            for c, s in sorted(self.columns.items())}}


@dataclass
class JobStats:
    """The staged output of a job as its committed task records describe it: per task, per partition and in all.
    Built from the records alone (no file is read)."""

    tasks: dict[int, Observed]
    partitions: dict[str, Observed]
    total: Observed
    #: per task, its Parquet schema (``[[name, type], ...]``; ``None``: not known)
    schemas: dict[int, list[list[str]] | None]
    #: column -> Arrow type, as the tasks' schemas name them (the first task's wins)
    types: dict[str, str]
    #: partition -> the tasks that wrote files there
    writers: dict[str, set[int]]

    @classmethod
    def from_records(cls, recs: Iterable[TaskCommitRecord]) -> JobStats:
        tasks: dict[int, Observed] = {}
        partitions: dict[str, Observed] = {}
        total = Observed()
        schemas: dict[int, list[list[str]] | None] = {}
        types: dict[str, str] = {}
        writers: dict[str, set[int]] = {}
        for rec in recs:
            stats = rec.stats_doc or {}
            schemas[rec.task] = stats.get("columns")
            for name, typ in stats.get("columns") or ():
                types.setdefault(name, typ)
            mine = tasks.setdefault(rec.task, Observed())
            for f in rec.files:
                part = partition_of(f.path)
                for o in (mine, partitions.setdefault(part, Observed()), total):
                    o.add_files(f.rows, f.size)
                writers.setdefault(part, set()).add(rec.task)
            measured = stats.get("partitions") or {}
            for part in {partition_of(f.path) for f in rec.files}:
                cols = measured.get(part)
                if cols is None:
                    for o in (mine, partitions[part], total):
                        o.unmeasured.add(rec.task)
                    continue
                for o in (mine, partitions[part], total):
                    merge_into(o.columns, cols, types)
        return cls(tasks, partitions, total, schemas, types, writers)

    def summary(self) -> dict[str, Any]:
        """The whole job in a few numbers (what ``_SUCCESS``, the view and the approver see)."""
        return {**self.total.to_doc(self.types), "tasks": len(self.tasks), "partitions": len(self.partitions),
                "unmeasured_tasks": sorted(self.total.unmeasured)}


def columns_of(schema: Sequence[Sequence[str]] | None) -> dict[str, str]:
    """A recorded schema (``[[name, type], ...]``) as ``{name: type}``."""
    return {name: typ for name, typ in schema or ()}


__all__ = ["JobStats", "MAX_TEXT", "Observed", "columns_of", "decode_value", "encode_value", "file_stats",
           "merge_column", "merge_into", "task_stats_doc"]
