"""Writing a task attempt's files: Parquet from pyarrow data, or arbitrary files through a file object.

Files go into the attempt's work directory only; nothing here makes them visible. Names follow Spark so that
existing tools recognise them: ``part-<task:05d>-<job uuid>-c<file:03d>.<codec>.parquet``, one counter per task
across partitions, partition directories ``key=value`` (Hive), partition columns left out of the files (kept for a table target).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .context import TaskAttemptContext
from ..audit.stats import file_stats, merge_into, task_stats_doc
from ..records.merged import without_provenance
from ..errors import InvalidOutputSpec
from ..faults import inject
from ..paths import check_partition_key, check_relative, partition_dir
from ..stores import Store

_CODEC_SUFFIX = {"snappy": "snappy", "gzip": "gz", "zstd": "zstd", "lz4": "lz4", "brotli": "br", "none": None}


class TaskAttemptWriter:
    """Writes one task attempt's output and records rows and bytes per file for the commit record.

    Use as a context manager, or call :meth:`close`; :attr:`rows` maps each file (relative to the work directory)
    to its row count and :attr:`sizes` each Parquet file to its size in bytes: what
    :meth:`FileOutputCommitter.commit_task` takes, and checks against the attempt's directory before it commits, so
    that an attempt whose files someone removed can never commit an empty or partial record.
    """

    def __init__(self, target: Store | Any, attempt: TaskAttemptContext, *, partition_by: Iterable[str] = (),
                 compression: str = "snappy", max_rows_per_file: int | None = None,
                 name_prefix: str | None = None) -> None:
        """*target* is the committer (whose ``open_task_file`` decides where bytes go: the attempt directory, or
        a pending multipart upload for the magic committer) or, for plain file committers, its store.
        *name_prefix*: how default names begin (the attempt's :attr:`~.TaskAttemptContext.file_prefix`; a
        :meth:`part` extends it)."""
        if compression not in _CODEC_SUFFIX:
            raise InvalidOutputSpec(f"unknown Parquet compression {compression!r}: use one of {sorted(_CODEC_SUFFIX)}")
        if max_rows_per_file is not None and max_rows_per_file < 1:
            raise InvalidOutputSpec("max_rows_per_file must be at least 1")
        if hasattr(target, "open_task_file"):
            self._open_raw = lambda rel: target.open_task_file(attempt, rel)
        else:
            self._open_raw = lambda rel: target.open_write(f"{attempt.work_dir}/{rel}")
        self._target = target
        self.attempt = attempt
        self.name_prefix = attempt.file_prefix if name_prefix is None else name_prefix
        self.partition_by = tuple(partition_by)
        #: a table commit (:mod:`.tables`) derives partition values from the columns (Iceberg) and reads types
        #: from the files (Delta): the partition columns stay in the files
        self.keep_partition_columns = getattr(target, "table", None) is not None
        self.compression = compression
        self.max_rows_per_file = max_rows_per_file
        self.rows: dict[str, int | None] = {}
        self.sizes: dict[str, int] = {}
        self._counter = 0
        self._open: dict[str, tuple[str, IO[bytes], pq.ParquetWriter, int]] = {}
        self._schema: pa.Schema | None = None
        #: per partition, the column statistics of the Parquet files closed so far (:mod:`..audit.stats`)
        self._stats: dict[str, dict[str, list[Any]]] = {}
        self._closed = False
        #: shared by a writer and its parts (:meth:`part`): the names opened by any of them, and whether the
        #: attempt was abandoned (:meth:`abandon`)
        self._shared = _Shared()
        #: a part's raw files (:meth:`open_file`) refuse writes once the attempt is abandoned
        self._is_part = False

    @property
    def schema(self) -> pa.Schema | None:
        """The Arrow schema of every Parquet file :meth:`write` made (partition columns left out, as in the files;
        ``None`` before the first row): what the task commit records, so a job commit compares it with the other
        tasks' (:mod:`..schemas`). Files from :meth:`open_file` are the caller's, and not covered."""
        return self._schema

    @property
    def stats(self) -> dict[str, Any] | None:
        """The columns and, per partition, the null counts and min/max per column of every Parquet file
        :meth:`write` closed, read from the footers it held (no I/O): what the task commit records for an audit
        (:mod:`..audit.stats`); ``None`` before the first row."""
        return task_stats_doc(self._schema, self._stats)

    # ------------------------------------------------------------------ names
    def next_file_name(self, extension: str = "parquet") -> str:
        """The next Spark-style file name of this task: ``part-00003-<uuid>-c000.<extension>``."""
        name = f"{self.name_prefix}c{self._counter:03d}.{extension}"
        self._counter += 1
        return name

    def _parquet_name(self) -> str:
        suffix = _CODEC_SUFFIX[self.compression]
        return self.next_file_name(f"{suffix}.parquet" if suffix else "parquet")

    # ------------------------------------------------------------------ parts written side by side
    def part(self, index: int) -> TaskAttemptWriter:
        """A writer of this attempt for part *index* (a shard of a task instance whose shards commit together),
        to be used from a thread of its own: its default names extend this writer's with ``s<index:03d>-``, so they
        still begin with the task's prefix (which the protocol finds a task's files by) and no part writes
        another's. Give every part back to :meth:`adopt` once they are closed."""
        part = TaskAttemptWriter(self._target, self.attempt, partition_by=self.partition_by,
                                 compression=self.compression, max_rows_per_file=self.max_rows_per_file,
                                 name_prefix=f"{self.name_prefix}s{index:03d}-")
        part._shared = self._shared
        part._is_part = True
        return part

    def abandon(self) -> None:
        """Make this writer, its parts and their raw files refuse to open or write anything more
        (:class:`AttemptAbandoned`): the attempt is about to be aborted (an interruption such as Airflow's timeout,
        or another shard's failure), and a part still running in another thread stops at its next call."""
        self._shared.abandoned = True

    def adopt(self, parts: Sequence[TaskAttemptWriter]) -> None:
        """Take the closed *parts*' files, rows, sizes and statistics as this attempt's (no two parts opened one
        name: :meth:`open_file` refuses the second). Raises :class:`InvalidOutputSpec`, before anything commits,
        when their Parquet schemas differ (one task's files share one schema, as :meth:`write` keeps them)."""
        self._check_open()
        for index, part in enumerate(parts):
            if not part._closed:
                raise InvalidOutputSpec(f"part {index} of this task attempt is still open")
            if part._schema is not None:
                if self._schema is None:
                    self._schema = part._schema
                elif not part._schema.equals(self._schema):
                    raise InvalidOutputSpec(f"the shards of one task attempt wrote different schemas: "
                                            f"{part._schema} vs {self._schema}; cast them to one schema")
            self.rows.update(part.rows)
            self.sizes.update(part.sizes)
        types = {f.name: str(f.type) for f in self._schema} if self._schema is not None else {}
        for part in parts:
            for where, columns in part._stats.items():
                merge_into(self._stats.setdefault(where, {}), columns, types)

    # ------------------------------------------------------------------ arbitrary files
    def open_file(self, name: str | None = None, *, partition: dict[str, Any] | None = None,
                  extension: str = "dat") -> IO[bytes]:
        """A binary file in the attempt (the lower-level form, for formats other than Parquet).

        *name* defaults to the next Spark-style name with *extension*; a given name is checked (no traversal, no
        hidden components) and must be unique across the job's tasks. Rows of such files are unknown unless they are
        Parquet, whose footer is read at task commit. *partition* (``{column: value}``) puts the file in that
        partition's directory: columns follow the partition column rule, values are escaped as Spark does, and a
        directory name over 255 bytes is refused before anything is opened.
        """
        self._check_open()
        part = ""
        if partition:
            part = partition_dir([check_partition_key(k) for k in partition], list(partition.values()))
        if name is None:
            name = self.next_file_name(check_relative(extension, what="file extension"))
        rel = check_relative(name)
        if part:
            rel = f"{part}/{rel}"
        if rel in self.rows:
            raise InvalidOutputSpec(f"file {rel!r} was already written by this task attempt")
        with self._shared.lock:   # checked and taken at once: two parts opening one name never both start it
            if rel in self._shared.names:
                raise InvalidOutputSpec(f"file {rel!r} was already opened by another part (shard) of this task "
                                        "attempt: give each shard names of its own (or leave names to the writer)")
            self._shared.names.add(rel)
        self.rows[rel] = None
        fh = self._open_raw(rel)   # outside the lock: on S3 an open is a request, and parts open side by side
        return _Guarded(fh, self._shared) if self._is_part else fh

    # ------------------------------------------------------------------ parquet
    def write(self, data: pa.Table | pa.RecordBatch | Iterable[pa.Table | pa.RecordBatch]) -> int:
        """Write a Table, a RecordBatch or an iterable of them; returns the number of rows written.

        The partition directories of a Table (or RecordBatch) are all computed before any of its files is opened: a
        value no directory name can hold (see :func:`~.paths.partition_value_to_str`: too long, empty string) raises
        :class:`InvalidOutputSpec` with nothing of that Table written. An iterable is written one item at a time.
        """
        self._check_open()
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if not isinstance(data, pa.Table):
            if isinstance(data, (str, bytes, dict)) or not isinstance(data, Iterable):
                raise InvalidOutputSpec(f"write() takes pyarrow Tables or RecordBatches, got {type(data).__name__}")
            return sum(self.write(part) for part in data)
        missing = [k for k in self.partition_by if k not in data.column_names]
        if missing:
            raise InvalidOutputSpec(f"partition column(s) {missing} are not in the data (columns: {data.column_names})")
        if data.num_rows == 0:
            return 0
        if not self.partition_by:
            self._write_part("", data)
            return data.num_rows
        parts = _split_by_partition(data, self.partition_by)  # every directory validated before any file opens
        for part, rows in parts:
            self._write_part(part, rows if self.keep_partition_columns else rows.drop_columns(list(self.partition_by)))
        return data.num_rows

    def _write_part(self, part: str, table: pa.Table) -> None:
        if self._schema is None:   # rows read from a merged file and written again are no merge (:mod:`..records.merged`)
            self._schema = without_provenance(table.schema)
        elif not table.schema.equals(self._schema):
            try:
                table = table.cast(self._schema)
            except (pa.ArrowInvalid, ValueError) as exc:
                raise InvalidOutputSpec(f"schema changed between writes of one task: {table.schema} vs "
                                        f"{self._schema}") from exc
        offset = 0
        while offset < table.num_rows:
            rel, fh, writer, count = self._writer_for(part)
            take = table.num_rows - offset
            if self.max_rows_per_file:
                take = min(take, self.max_rows_per_file - count)
            writer.write_table(table.slice(offset, take))
            offset += take
            count += take
            self._open[part] = (rel, fh, writer, count)
            self.rows[rel] = count
            if self.max_rows_per_file and count >= self.max_rows_per_file:
                self._finish(part)

    def _writer_for(self, part: str) -> tuple[str, IO[bytes], pq.ParquetWriter, int]:
        if part not in self._open:
            rel = f"{part}/{self._parquet_name()}" if part else self._parquet_name()
            self._check_open()   # a default name is this part's own: no other part takes it
            fh = self._open_raw(rel)
            assert self._schema is not None
            writer = pq.ParquetWriter(fh, self._schema, compression=self.compression)
            self._open[part] = (rel, fh, writer, 0)
            self.rows[rel] = 0
        return self._open[part]

    def _finish(self, part: str) -> None:
        rel, fh, writer, _count = self._open.pop(part)
        writer.close()
        assert self._schema is not None
        merge_into(self._stats.setdefault(part, {}), file_stats(writer.writer.metadata, self._schema),
                   {f.name: str(f.type) for f in self._schema})
        self.sizes[rel] = fh.tell()
        fh.close()
        inject("writer.after_file")

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidOutputSpec("this task attempt writer is closed")
        if self._shared.abandoned:
            raise AttemptAbandoned("this task attempt was abandoned (interrupted); it is being aborted")

    def close(self) -> dict[str, int | None]:
        """Close every open file; returns :attr:`rows`."""
        if not self._closed:
            for part in list(self._open):
                self._finish(part)
            self._closed = True
        return self.rows

    def __enter__(self) -> TaskAttemptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AttemptAbandoned(RuntimeError):
    """Raised by a writer (or a part of it) once its attempt was abandoned (:meth:`TaskAttemptWriter.abandon`)."""


class _Shared:
    """What a writer and its parts share: the names opened by any of them (under the lock) and the abandoned
    flag."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: set[str] = set()
        self.abandoned = False


class _Guarded:
    """A part's raw file (:meth:`TaskAttemptWriter.open_file`): the file itself, but a write after the attempt was
    abandoned raises :class:`AttemptAbandoned`, so a shard streaming into it stops there as well."""

    def __init__(self, fh: IO[bytes], shared: _Shared) -> None:
        self._fh = fh
        self._shared = shared

    def write(self, data: Any) -> int:
        if self._shared.abandoned:
            raise AttemptAbandoned("this task attempt was abandoned (interrupted); it is being aborted")
        return self._fh.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _Guarded:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


def _split_by_partition(table: pa.Table, keys: tuple[str, ...]) -> Iterator[tuple[str, pa.Table]]:
    """``(k=v/..., rows)`` for each distinct combination of partition values, in first-seen order.

    Rows are assigned to groups by position (group_by collects each group's row indices), never by comparing
    values again: an equality filter would drop NaN rows (NaN != NaN) and put a -0.0 row in both the ``0.0`` and
    the ``-0.0`` partition. Every row lands in exactly one partition, which is checked. Every directory name is
    computed, escaped and checked when this is called, so a bad value raises here, before the caller opens any
    file.
    """
    index = "__commit_provider_row__"
    # row numbers 0..n-1 from a compute kernel (a Python range costs ~76 ms per million rows)
    rows = pc.indices_nonzero(pa.repeat(pa.scalar(True), table.num_rows))
    indexed = table.select(list(keys)).append_column(index, rows)
    try:
        groups = indexed.group_by(list(keys), use_threads=False).aggregate([(index, "list")])
        combos = groups.select(list(keys)).to_pylist()
    except (ValueError, OverflowError, pa.ArrowException) as exc:
        raise InvalidOutputSpec(f"partition column(s) {list(keys)} hold values that cannot be rendered as directory "
                                f"names ({exc}); cast them to a coarser type or to strings first") from exc
    dirs = [partition_dir(keys, [combo[k] for k in keys]) for combo in combos]
    positions = groups.column(f"{index}_list")
    lengths = pc.list_value_length(positions).to_pylist()
    if sum(lengths) != table.num_rows or len(set(dirs)) != len(dirs):
        raise InvalidOutputSpec(f"partition column(s) {list(keys)}: distinct values render to the same directory "
                                f"({len(dirs) - len(set(dirs))} collision(s)), or rows could not be assigned to "
                                "exactly one partition; cast the column(s) to strings first")
    # one take puts every group's rows together, in group order; each partition is then a slice of it (no copy)
    grouped = table.take(pc.list_flatten(positions))
    starts = accumulate(lengths, initial=0)
    return ((part, grouped.slice(start, n)) for part, start, n in zip(dirs, starts, lengths))
