"""Declarative audit checks: judged on the statistics the task commits recorded (:mod:`.stats`), no file read.

Each check says what it expects and, when it fails, what it observed and which tasks it **blames**: a check on
what each task wrote (``NotNull``, ``Between``, ``Columns``, ``Rows(per="task")``) blames the tasks that broke
it; a check on the whole job (``Rows()``, ``Partitions``, ``Files``, ``Bytes``) cannot tell, and blames every
task. A failed audit records its blamed tasks as refused (:mod:`..records.refused`), so the next clear of the run
runs their code again instead of recovering what failed; the others are recovered (docs/user-guide.md, "Audit").

A check that needs statistics a task did not record (files written through ``open_file``) fails, naming the
task, and blames nothing: its next run would record none either. Use a ``data`` callable for such output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..errors import InvalidOutputSpec
from .stats import JobStats, Observed, columns_of, decode_value


@dataclass(frozen=True)
class Outcome:
    """One check's result: passed or not, what it observed, and the tasks it blames (``None``: every task)."""

    check: str
    passed: bool
    observed: Any = None
    expected: str = ""
    column: str | None = None
    message: str = ""
    blamed: tuple[int, ...] | None = ()

    def to_doc(self) -> dict[str, Any]:
        return {"check": self.check, "passed": self.passed, "observed": self.observed, "expected": self.expected,
                "column": self.column, "message": self.message,
                "blamed": None if self.blamed is None else list(self.blamed)}


class Check:
    """The base of a declarative check: :meth:`evaluate` on the job's statistics, :meth:`to_doc` for the spec's
    digest and the record."""

    kind: ClassVar[str] = ""

    def evaluate(self, stats: JobStats) -> Outcome:
        raise NotImplementedError

    def to_doc(self) -> dict[str, Any]:
        return {"check": self.kind, **{k: _plain(v) for k, v in vars(self).items()}}

    @property
    def label(self) -> str:
        args = ", ".join(f"{k}={_plain(v)!r}" for k, v in vars(self).items() if v not in (None, ()))
        return f"{type(self).__name__}({args})"


def _plain(value: Any) -> Any:
    """A bound or parameter as JSON (dates and decimals as text), for the digest and the record."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _bounds(lo: Any, hi: Any) -> str:
    return " and ".join(p for p in (f">= {_plain(lo)}" if lo is not None else "",
                                    f"<= {_plain(hi)}" if hi is not None else "") if p)


def _check_bounds(owner: str, lo: Any, hi: Any) -> None:
    if lo is None and hi is None:
        raise InvalidOutputSpec(f"{owner}: give min, max or both")
    if lo is not None and hi is not None and lo > hi:
        raise InvalidOutputSpec(f"{owner}: min {lo!r} is above max {hi!r}")


def _unmeasured(check: str, column: str | None, tasks: set[int]) -> Outcome:
    shown = ", ".join(map(str, sorted(tasks)[:10]))
    return Outcome(check, False, None, "", column, f"task(s) {shown} recorded no column statistics (files written "
                   "through open_file, or committed by an earlier release): use a data callable", ())


@dataclass(frozen=True)
class Rows(Check):
    """Row counts: of the whole job (``per="job"``, the default), of each task or of each partition."""

    min: int | None = None
    max: int | None = None
    per: Literal["job", "task", "partition"] = "job"
    kind: ClassVar[str] = "rows"

    def __post_init__(self) -> None:
        _check_bounds("Rows", self.min, self.max)
        if self.per not in ("job", "task", "partition"):
            raise InvalidOutputSpec(f"Rows(per={self.per!r}): use 'job', 'task' or 'partition'")

    def evaluate(self, stats: JobStats) -> Outcome:
        groups: dict[Any, Observed] = ({"job": stats.total} if self.per == "job" else
                                       stats.tasks if self.per == "task" else stats.partitions)
        unknown = [k for k, o in groups.items() if o.rows is None]
        if unknown:
            return Outcome(self.label, False, None, _bounds(self.min, self.max), None,
                           f"row counts unknown for {self.per} {unknown[:5]} (files that are not Parquet)", ())
        bad = {k: o.rows for k, o in groups.items() if not _within(o.rows, self.min, self.max)}
        observed = stats.total.rows if self.per == "job" else {str(k): o.rows for k, o in sorted(groups.items())}
        if not bad:
            return Outcome(self.label, True, observed, _bounds(self.min, self.max))
        blamed: tuple[int, ...] | None = None
        if self.per == "task":
            blamed = tuple(sorted(bad))
        elif self.per == "partition":
            blamed = tuple(sorted({t for p in bad for t in stats.writers.get(p, ())}))
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(bad.items(), key=str)[:10])
        return Outcome(self.label, False, observed, _bounds(self.min, self.max), None,
                       f"rows out of bounds ({shown})" if self.per != "job" else f"{stats.total.rows} rows", blamed)


def _within(value: Any, lo: Any, hi: Any) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


@dataclass(frozen=True, init=False)
class NotNull(Check):
    """No null in the given columns (per task: the tasks that wrote nulls are blamed)."""

    columns: tuple[str, ...] = ()
    kind: ClassVar[str] = "not_null"

    def __init__(self, *columns: str) -> None:
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise InvalidOutputSpec("NotNull: name the columns, NotNull('id', 'day')")
        object.__setattr__(self, "columns", tuple(columns))

    def evaluate(self, stats: JobStats) -> Outcome:
        return _all(self.label, [self._one(stats, c) for c in self.columns])

    def _one(self, stats: JobStats, column: str) -> Outcome:
        missing = [t for t, cols in stats.schemas.items() if cols is not None and column not in columns_of(cols)]
        if missing:
            return Outcome(self.label, False, None, "no nulls", column,
                           f"column {column!r} is not in the files of task(s) {missing[:10]}", tuple(missing))
        if stats.total.unmeasured:
            return _unmeasured(self.label, column, stats.total.unmeasured)
        nulls = {t: (o.columns.get(column) or [None])[0] for t, o in stats.tasks.items()}
        unknown = [t for t, n in nulls.items() if n is None and stats.tasks[t].files]
        bad = sorted(t for t, n in nulls.items() if n)
        total = sum(n or 0 for n in nulls.values())
        if bad:
            return Outcome(self.label, False, total, "no nulls", column,
                           f"{total} null(s) in {column!r}, written by task(s) {bad[:10]}", tuple(bad))
        if unknown:
            return Outcome(self.label, False, None, "no nulls", column,
                           f"null counts of {column!r} unknown for task(s) {unknown[:10]}", ())
        return Outcome(self.label, True, 0, "no nulls", column)


def _all(label: str, parts: Sequence[Outcome]) -> Outcome:
    """One outcome of several columns' (the first failure's message, every failure's blame)."""
    failed = [o for o in parts if not o.passed]
    if not failed:
        return Outcome(label, True, {o.column: o.observed for o in parts}, parts[0].expected)
    blamed: set[int] | None = set()
    for o in failed:
        blamed = None if blamed is None or o.blamed is None else blamed | set(o.blamed)
    return Outcome(label, False, {o.column: o.observed for o in parts}, parts[0].expected,
                   failed[0].column if len(failed) == 1 else None, "; ".join(o.message for o in failed),
                   None if blamed is None else tuple(sorted(blamed)))


@dataclass(frozen=True)
class Between(Check):
    """Every value of *column* within ``[min, max]`` (either may be ``None``), judged on the recorded min and max
    of each task's files: the tasks whose range leaves the bounds are blamed. Nulls are not values here (use
    :class:`NotNull`)."""

    column: str = ""
    min: Any = None
    max: Any = None
    kind: ClassVar[str] = "between"

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise InvalidOutputSpec("Between: name the column, Between('amount', 0, 1000)")
        _check_bounds(f"Between({self.column!r})", self.min, self.max)

    def evaluate(self, stats: JobStats) -> Outcome:
        expected = _bounds(self.min, self.max)
        if stats.total.unmeasured:
            return _unmeasured(self.label, self.column, stats.total.unmeasured)
        typ = stats.types.get(self.column, "")
        bad, unknown = [], []
        for t, o in sorted(stats.tasks.items()):
            col = o.columns.get(self.column)
            if col is None:
                if o.files and o.rows:
                    unknown.append(t)
                continue
            lo, hi, values = col[1], col[2], col[3]
            if lo is None or hi is None:
                if values != 0:   # values whose bounds were not kept (or an unknown count of them)
                    unknown.append(t)
                continue
            lo, hi = decode_value(lo, typ), decode_value(hi, typ)
            try:
                if (self.min is not None and lo < self.min) or (self.max is not None and hi > self.max):
                    bad.append(t)
            except TypeError as exc:
                raise InvalidOutputSpec(f"{self.label}: the bounds cannot be compared with column {self.column!r} "
                                        f"of type {typ}: {exc}") from None
        whole = stats.total.columns.get(self.column)
        observed = None if whole is None else {"min": whole[1], "max": whole[2]}
        if bad:
            return Outcome(self.label, False, observed, expected, self.column,
                           f"{self.column!r} spans {observed}, beyond {expected}, in task(s) {bad[:10]}", tuple(bad))
        if unknown:
            return Outcome(self.label, False, observed, expected, self.column,
                           f"min/max of {self.column!r} not kept for task(s) {unknown[:10]} (text over the length "
                           "kept, binary, or no statistics)", ())
        return Outcome(self.label, True, observed, expected, self.column)


@dataclass(frozen=True, init=False)
class Columns(Check):
    """Every task's files have these columns (``{name: arrow type}`` or names; types as Arrow prints them, say
    ``"int64"``, ``"string"``, ``"timestamp[us, tz=UTC]"``); with ``exact=True`` and no other. Partition columns
    of a directory target live in directory names and always count as present. Tasks that differ are blamed."""

    expected: Mapping[str, str | None] = field(default_factory=dict)
    exact: bool = False
    partition_by: tuple[str, ...] = ()
    kind: ClassVar[str] = "columns"

    def __init__(self, expected: Mapping[str, str | None] | Sequence[str], *, exact: bool = False) -> None:
        if isinstance(expected, str) or not expected:
            raise InvalidOutputSpec("Columns: give the columns, Columns({'id': 'int64', 'day': None}) or "
                                    "Columns(['id', 'day'])")
        cols = dict(expected) if isinstance(expected, Mapping) else dict.fromkeys(expected)
        object.__setattr__(self, "expected", cols)
        object.__setattr__(self, "exact", bool(exact))
        object.__setattr__(self, "partition_by", ())

    def with_partitions(self, partition_by: Sequence[str]) -> Columns:
        """This check for a directory stage partitioned by *partition_by* (columns not in its files)."""
        out = Columns(self.expected, exact=self.exact)
        object.__setattr__(out, "partition_by", tuple(partition_by))
        return out

    def evaluate(self, stats: JobStats) -> Outcome:
        bad: dict[int, str] = {}
        for t, cols in sorted(stats.schemas.items()):
            if cols is None:
                continue
            have = {**columns_of(cols), **{p: None for p in self.partition_by if p not in columns_of(cols)}}
            wrong = [f"{c} missing" for c in self.expected if c not in have]
            wrong += [f"{c} is {have[c]}, not {typ}" for c, typ in self.expected.items()
                      if typ is not None and c in have and have[c] is not None and have[c] != typ]
            if self.exact:
                wrong += [f"{c} not expected" for c in have if c not in self.expected]
            if wrong:
                bad[t] = ", ".join(wrong)
        unknown = sorted(t for t, cols in stats.schemas.items() if cols is None and stats.tasks[t].files)
        if bad:
            first = next(iter(bad.items()))
            return Outcome(self.label, False, None, _plain(dict(self.expected)), None,
                           f"task(s) {sorted(bad)[:10]} differ (task {first[0]}: {first[1]})", tuple(sorted(bad)))
        if unknown:
            return _unmeasured(self.label, None, set(unknown))
        return Outcome(self.label, True, sorted(stats.types), _plain(dict(self.expected)))


@dataclass(frozen=True)
class Partitions(Check):
    """The partitions the job wrote: how many (*min*, *max*) and, with *expected*, that each of those partition
    directories (``"day=2024-01-01"``) is among them. Judged on the whole job: a failure blames every task."""

    min: int | None = None
    max: int | None = None
    expected: tuple[str, ...] = ()
    kind: ClassVar[str] = "partitions"

    def __post_init__(self) -> None:
        object.__setattr__(self, "expected", tuple(self.expected))
        if self.min is None and self.max is None and not self.expected:
            raise InvalidOutputSpec("Partitions: give min, max or expected")

    def evaluate(self, stats: JobStats) -> Outcome:
        written = sorted(p for p in stats.partitions if p)
        missing = [p for p in self.expected if p not in written]
        expected = " and ".join(filter(None, [_bounds(self.min, self.max),
                                              f"including {list(self.expected)}" if self.expected else ""]))
        if missing or not _within(len(written), self.min, self.max):
            why = f"missing {missing[:10]}" if missing else f"{len(written)} partition(s)"
            return Outcome(self.label, False, len(written), expected, None, why, None)
        return Outcome(self.label, True, len(written), expected)


@dataclass(frozen=True)
class _JobTotal(Check):
    """A bound on one of the whole job's totals (:meth:`total`). Judged on the whole job: a failure blames every
    task."""

    min: int | None = None
    max: int | None = None

    def __post_init__(self) -> None:
        _check_bounds(type(self).__name__, self.min, self.max)

    def total(self, stats: JobStats) -> int:
        raise NotImplementedError

    def evaluate(self, stats: JobStats) -> Outcome:
        n = self.total(stats)
        ok = _within(n, self.min, self.max)
        return Outcome(self.label, ok, n, _bounds(self.min, self.max), None, "" if ok else f"{n} {self.kind}",
                       () if ok else None)


@dataclass(frozen=True)
class Files(_JobTotal):
    """How many files the job wrote (small files, or none)."""

    kind: ClassVar[str] = "files"

    def total(self, stats: JobStats) -> int:
        return stats.total.files


@dataclass(frozen=True)
class Bytes(_JobTotal):
    """How many bytes the job wrote."""

    kind: ClassVar[str] = "bytes"

    def total(self, stats: JobStats) -> int:
        return stats.total.bytes


__all__ = ["Between", "Bytes", "Check", "Columns", "Files", "NotNull", "Outcome", "Partitions", "Rows"]
