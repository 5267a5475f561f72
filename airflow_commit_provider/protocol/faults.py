"""Named fault-injection points, so that tests can kill the protocol at every step.

Production code calls :func:`inject` at each step boundary; it costs one dict lookup when nothing is armed.
Faults are armed either in-process with :func:`arm` or, for real worker processes, through the environment
variable ``COMMIT_PROVIDER_FAULTS`` (read when the process first reaches a point): a comma-separated list of
``point=action`` or ``point=action@n`` entries, where *action* is

- ``exit``: ``os._exit(FAULT_EXIT_CODE)``, a process dying without cleanup (no ``finally``, no atexit);
- ``kill``: SIGKILL to the process itself, as the OOM killer or a lost worker does;
- ``raise``: :class:`InjectedFault`, an ordinary exception that cleanup code does see;
- ``stop``: SIGSTOP to the process itself: a zombie paused at the worst moment, which the test resumes (SIGCONT)
  after the rest of the lifecycle has moved on;

and ``@n`` fires on the n-th time the point is reached (1-based, default 1), which is how a test kills a job
commit after, say, 5 of 20 moves (``commit_job.mid_move`` is reached per file moved and per directory renamed
whole).
"""

from __future__ import annotations

import os
import signal
import threading

ENV_VAR = "COMMIT_PROVIDER_FAULTS"
FAULT_EXIT_CODE = 86

#: Every injection point the protocol reaches, in protocol order. Tests iterate over this list, so a step added
#: without a point here is a step the crash matrix does not cover.
POINTS: tuple[str, ...] = (
    "setup_job.before_record",
    "setup_job.after_app_marker",
    "setup_job.after_app_attempt",
    "setup_task.after_dir",
    "writer.after_file",
    "commit_task.before_record",
    "commit_task.after_claim",
    "commit_task.after_record",
    "commit_task.mid_move",
    "commit_task.after_move",
    "abort_task.after_marker",
    "abort_task.mid_delete",
    "recover_task.before_record",
    "recover_task.after_record",
    "commit_job.after_recovery",
    "commit_job.after_plan",
    "commit_job.after_withdraw",
    "commit_job.mid_move",
    "commit_job.after_moves",
    "commit_job.mid_delete",
    "commit_job.after_deletes",
    "commit_job.after_commit_log",
    "commit_job.after_success",
    "commit_job.after_cleanup",
    "abort_job.after_read",
    "abort_job.after_task_record",
    "abort_job.mid_delete",
    "abort_job.after_uploads",
    "abort_job.after_delete",
)

#: The points only a compaction (:mod:`.compaction`) reaches, around the job it runs (whose own steps are points
#: of :data:`POINTS`): after each input claimed, after its merge plan is fixed, after its job commit and before
#: its claims are released. Kept apart so that the crash matrices of ordinary jobs, which expect every point of
#: :data:`POINTS` to fire, do not wait for them.
COMPACTION_POINTS: tuple[str, ...] = (
    "compact.mid_claim",
    "compact.after_plan",
    "compact.before_release",
)

#: The steps of a deduplication job (:mod:`.dedupjob`), apart for the same reason.
DEDUP_POINTS: tuple[str, ...] = (
    "dedup.after_plan",
    "dedup.after_withdraw",
    "dedup.mid_delete",
    "dedup.after_deletes",
    "dedup.after_markers",
)

#: The points only a job commit into a table (:mod:`.tables`) reaches: after the check that the table does not
#: hold the generation yet (on the snapshot the transaction is built on), just before the transaction is sent, and
#: after it, before the commit log and ``_SUCCESS`` (a resumed commit then finds the generation in the table and
#: adds nothing).
TABLE_POINTS: tuple[str, ...] = (
    "table_commit.before",
    "table_commit.after",
)

#: The points of an audited stage's audit (:mod:`.audit`), between the last task commit and the job commit: after
#: its recovery (the job commit's own, adopting earlier application attempts' commits), before and after its record.
AUDIT_POINTS: tuple[str, ...] = (
    "audit.after_recovery",
    "audit.before_record",
    "audit.after_record",
)

#: Every point a fault can be armed at.
ALL_POINTS: tuple[str, ...] = POINTS + COMPACTION_POINTS + DEDUP_POINTS + TABLE_POINTS + AUDIT_POINTS


class InjectedFault(RuntimeError):
    """Raised by a point armed with the ``raise`` action."""


_lock = threading.Lock()
_armed: dict[str, tuple[str, int]] = {}
_hits: dict[str, int] = {}
_env_loaded: str | None = None


def _parse(spec: str) -> dict[str, tuple[str, int]]:
    armed: dict[str, tuple[str, int]] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        point, _, action = entry.partition("=")
        action, _, nth = action.partition("@")
        if point not in ALL_POINTS:
            raise ValueError(f"unknown fault injection point {point!r}; known points: "
                             f"{', '.join(ALL_POINTS)}")
        if action not in ("exit", "kill", "raise", "stop"):
            raise ValueError(f"unknown fault action {action!r} for {point!r}: use exit, kill, raise or stop")
        armed[point] = (action, int(nth or 1))
    return armed


def arm(point: str, action: str = "raise", nth: int = 1) -> None:
    """Arm *point* in this process (tests)."""
    with _lock:
        _armed.update(_parse(f"{point}={action}@{nth}"))
        _hits.pop(point, None)


def disarm() -> None:
    """Disarm every point armed with :func:`arm` and forget hit counts."""
    global _env_loaded
    with _lock:
        _armed.clear()
        _hits.clear()
        _env_loaded = None


def inject(point: str) -> None:
    """Fire the fault armed at *point*, if any. Called by the protocol at every step boundary, so once per file
    moved: the environment is read once per process (and again after :func:`disarm`), not on every call."""
    global _env_loaded
    if _env_loaded is None:
        spec = os.environ.get(ENV_VAR, "")
        with _lock:
            if spec:
                _armed.update(_parse(spec))
            _env_loaded = spec
    if not _armed:
        return
    with _lock:
        if point not in _armed:
            return
        action, nth = _armed[point]
        _hits[point] = _hits.get(point, 0) + 1
        if _hits[point] != nth:
            return
    if action == "exit":
        os._exit(FAULT_EXIT_CODE)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    raise InjectedFault(f"fault injected at {point}")


def mid_delete() -> None:
    """The fault point between two deletions of a job commit or abort (``commit_job.mid_delete``)."""
    inject("commit_job.mid_delete")
