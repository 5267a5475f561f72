"""The staged output of a job as one ``pyarrow.dataset.Dataset``: what an audit's data callable reads.

The committed tasks' files, where their task commits left them (algorithm 1: the application attempt's
``_committed`` directory on a local disk, the attempt directory on an object store; a recovered task's in the
application attempt it committed in), each with the partition values its path names: the rows the job commit
would publish, exactly, and nothing else. The partition columns of a directory target live in directory names;
their type is inferred as pyarrow's Hive partitioning infers it (integers when every value is one, else text), so
the dataset reads as ``pyarrow.dataset.dataset(<target>, partitioning="hive")`` will after the commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from ..paths import parse_partition, partition_of
from ..records.task import TaskCommitRecord
from ..stores import Store


def _filesystem(store: Store) -> tuple[Any, Any]:
    """The pyarrow file system of *store* and the function giving a path on it for a relative name."""
    fs = getattr(store, "fs", None)
    if fs is None:   # the local store: plain paths
        from pyarrow.fs import LocalFileSystem

        return LocalFileSystem(), lambda rel: store.url(rel).removeprefix("file://")
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    root = store.url().split("://", 1)[-1].rstrip("/")
    return PyFileSystem(FSSpecHandler(fs)), lambda rel: f"{root}/{rel}"


#: the directory value of a null partition value (Hive's, Spark's)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _partition_type(values: Iterable[str]) -> pa.DataType:
    vals = [v for v in values if v != NULL_PARTITION]
    try:
        for v in vals:
            int(v)
    except ValueError:
        return pa.string()
    return pa.int64() if vals else pa.string()


def staged_dataset(store: Store, recs: Sequence[TaskCommitRecord], partition_by: Sequence[str] = ()) -> ds.Dataset:
    """The staged Parquet files of *recs* as one dataset (an empty one when they hold none). Partition columns
    already in the files (a table target keeps them) are not added again."""
    filesystem, path_of = _filesystem(store)
    files = [(path_of(f"{rec.data_dir}/{f.path}" if rec.data_dir else f.path), partition_of(f.path))
             for rec in recs for f in rec.files if f.path.endswith(".parquet")]
    parquet = ds.ParquetFileFormat()
    if not files:
        return ds.dataset([], schema=pa.schema([]), format=parquet)
    # one schema per job (the job commit refuses two): the first file's
    physical = ds.dataset(files[0][0], format=parquet, filesystem=filesystem).schema
    parts = {p: parse_partition(p) for _, p in files}
    keys = [k for k in partition_by if k not in physical.names]
    fields = [pa.field(k, _partition_type(v[k] for v in parts.values() if k in v)) for k in keys]
    schema = pa.schema(list(physical) + fields)
    fragments = []
    for path, part in files:
        values = parts[part]
        expr = ds.scalar(True)
        for f in fields:
            value = values.get(f.name)
            if value == NULL_PARTITION:
                expr = expr & ds.field(f.name).is_null()
            elif value is not None:
                expr = expr & (ds.field(f.name) == pa.scalar(int(value) if f.type == pa.int64() else value,
                                                             f.type))
        fragments.append(parquet.make_fragment(path, filesystem=filesystem, partition_expression=expr))
    return ds.FileSystemDataset(fragments, schema, parquet, filesystem)


__all__ = ["staged_dataset"]
