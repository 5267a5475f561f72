"""One base for every stage of the protocol, on the task side (set-up, write, task commit, abort) and in job commit:
timed, counted (store requests by operation) and logged the same way, in success and in failure.

A stage that raises is logged with its error at WARNING and recorded on its clock, so that whoever owns the clock
can save a summary of a failed run (job commit writes one beside the job's records: :mod:`.jobcommit`), as Hadoop's
manifest committer saves its summary on failure too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from .stores import Store

log = logging.getLogger(__name__)


class StageClock:
    """Wall time per stage and, on object stores, requests by operation and bytes copied; the first failure."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.durations: dict[str, float] = {}
        self.requests: dict[str, dict[str, int]] = {}
        #: the stage that failed first, its error type and message (``None`` while none has)
        self.failure: dict[str, str] | None = None
        connecting = time.monotonic()
        self._r = store.request_counts()  # on S3 the first call starts the client: timed apart, not as a stage
        self.start = self._t = time.monotonic()
        self.connect = self.start - connecting
        self.bytes_copied_start = store.bytes_copied

    def end(self, stage: str, error: BaseException | None = None) -> dict[str, int]:
        """Close *stage* (failed with *error*, if given): its duration and the requests it made (returned)."""
        now, counts = time.monotonic(), self.store.request_counts()
        self.durations[stage] = round(now - self._t, 6)
        delta = {op: n - self._r.get(op, 0) for op, n in counts.items() if n != self._r.get(op, 0)}
        if counts:
            self.requests[stage] = delta
        self._t, self._r = now, counts
        if error is not None and self.failure is None:
            self.failure = {"stage": stage, "error": type(error).__name__, "message": str(error)[:2000]}
        return delta

    def summary(self) -> dict[str, Any]:
        self.durations["total"] = round(time.monotonic() - self.start, 6)
        if self.connect >= 0.001:
            self.durations["client_start"] = round(self.connect, 6)
        return {"durations": dict(self.durations), "requests": dict(self.requests),
                "bytes_copied": self.store.bytes_copied - self.bytes_copied_start}


class StageStopped(Exception):
    """A run that stops on purpose (an abort standing down for a job that moved on): its stage is logged as
    stopped, at INFO, not as failed."""


class Timed:
    """``with Timed(clock, "job j task 3 attempt 1", "commit_task") as t: ...``: the stage's time and requests go
    on *clock*; the log says what it did (``t.counts``) or how it failed. Exceptions pass through unchanged."""

    def __init__(self, clock: StageClock, owner: str, name: str) -> None:
        self.clock, self.owner, self.name = clock, owner, name
        #: what the log line reports besides the time (files, bytes, ...), set by the stage
        self.counts: Mapping[str, int] = {}

    def __enter__(self) -> Timed:
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        requests = self.clock.end(self.name, exc)
        ms = self.clock.durations[self.name] * 1000
        sent = f", requests {sum(requests.values())}" if requests else ""
        if exc is None:
            if log.isEnabledFor(logging.INFO):   # the counts are formatted only for a log that shows them
                log.info("%s: %s: %.1f ms%s%s", self.owner, self.name, ms,
                         "".join(f", {k} {v}" for k, v in self.counts.items()), sent)
        elif isinstance(exc, StageStopped):
            log.info("%s: %s: stopped after %.1f ms%s: %s", self.owner, self.name, ms, sent, exc)
        else:
            log.warning("%s: %s failed after %.1f ms%s: %s: %s", self.owner, self.name, ms, sent,
                        type(exc).__name__, exc)


def timed(store: Store, owner: str, name: str) -> Timed:
    """A stage timed on a clock of its own (the task side: one clock per call)."""
    return Timed(StageClock(store), owner, name)


__all__ = ["StageClock", "StageStopped", "Timed", "timed"]
