"""The orders the Commit status view's task table sorts by, on the server: a 1,000-task stage is paged, so a
page of the table sorted by bytes is the stage's largest tasks, not the largest of the page shown.

Ties keep task order, and a task without the value (no committed attempt, rows unknown, a task instance that has
not run) comes last in either direction: sorting by rows never opens on the tasks that have none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

from .view_models import TaskRow, TaskStatus

TaskSort = Literal["task", "status", "attempt", "files", "rows", "bytes", "duration"]

_STATUS_RANK = {s: i for i, s in enumerate(get_args(TaskStatus))}


def _attempt(row: TaskRow) -> tuple[int, ...] | None:
    """``"A.T"`` as ``(A, T)``: attempt 0.10 after 0.9."""
    if row.committed_attempt is None:
        return None
    return tuple(int(p) for p in row.committed_attempt.split(".") if p.isdigit())


def _committed(value: Callable[[TaskRow], Any]) -> Callable[[TaskRow], Any]:
    """A count of the committed attempt's output: none without a committed attempt (the table shows "—")."""
    return lambda row: value(row) if row.committed_attempt is not None else None


SORT_KEYS: dict[str, Callable[[TaskRow], Any]] = {
    "task": lambda row: row.task,
    "status": lambda row: _STATUS_RANK.get(row.status, len(_STATUS_RANK)),
    "attempt": _attempt,
    "files": _committed(lambda row: row.files),
    "rows": _committed(lambda row: row.rows),
    "bytes": _committed(lambda row: row.bytes),
    "duration": lambda row: row.duration,
}


def sort_rows(rows: Sequence[TaskRow], sort: str | None, descending: bool = False) -> list[TaskRow]:
    """*rows* by *sort* (task order for ``None``), descending if asked; rows without the value last, ties in task
    order. :class:`ValueError` naming the orders there are for an unknown *sort*."""
    if sort is None:
        return sorted(rows, key=lambda row: row.task, reverse=descending)
    key = SORT_KEYS.get(sort)
    if key is None:
        raise ValueError(f"no task order {sort!r}: the orders are {', '.join(SORT_KEYS)}")
    by_task = sorted(rows, key=lambda row: row.task)
    have = [r for r in by_task if key(r) is not None]
    lack = [r for r in by_task if key(r) is None]
    return sorted(have, key=key, reverse=descending) + lack
