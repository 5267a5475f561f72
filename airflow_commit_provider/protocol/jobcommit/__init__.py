"""Job commit as named stages, after Hadoop's manifest committer (``CommitJobStage``).

::

    RecoverTasks -> FixPlan -> WithdrawMarkers -> Publish -> DeleteOld -> SaveCommitLog -> WriteMarkers -> Cleanup

and, for a table target (:mod:`.table`), ``TableCommit`` (the one table transaction) after ``DeleteOld``.

The stages (:mod:`.stages`) take the job's scope (:class:`~..job.Job`) through the run they share
(:class:`~.stage.JobCommitRun`), never the committer; the base :class:`~.stage.Stage` times, counts, logs and
fault-injects each, in success and failure. A commit that fails leaves its summary (the stage that failed, the
error, what every stage before it cost) in ``_temporary/<job>/_commit_failure.json`` beside the job's records, for
the Commit status view and whoever retries; the next successful commit takes it away with the job's records.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .. import records
from ..config import check_number
from ..errors import JobAlreadyCommitted, JobNotSetUp
from ..faults import inject
from ..job import Job
from ..records.job import JobRecord
from ..records.task import TaskCommitRecord
from ..timing import StageClock
from . import names
from .stage import JobCommitRun, Plan
from .table import TableCommitStage
from .stages import (
    Cleanup,
    DeleteOld,
    FixPlan,
    Publish,
    RecoverTasks,
    SaveCommitLog,
    WithdrawMarkers,
    WriteMarkers,
    check_tree,
    planned_records,
)

log = logging.getLogger(__name__)


#: what a job commit may require before it fixes its plan (the audit's, :class:`~..audit.run.AuditGate`): given the
#: scope, the job record and the recovered task records, it returns the verdict the plan keeps, or raises
Gate = Callable[[Job, JobRecord, Mapping[int, TaskCommitRecord]], dict[str, Any]]


def commit_job(scope: Job, expected_tasks: int | Iterable[int] | None = None, *,
               defer_cleanup: bool = False, gate: Gate | None = None) -> dict[str, Any]:
    """See :meth:`~..committer.FileOutputCommitter.commit_job`."""
    with cyclic_gc_paused():
        return _commit_job(scope, expected_tasks, defer_cleanup, gate)


def _commit_job(scope: Job, expected_tasks: int | Iterable[int] | None, defer_cleanup: bool,
                gate: Gate | None = None) -> dict[str, Any]:
    clock = StageClock(scope.store)  # first: on S3 it times the client's start-up apart from every stage
    job = scope.job_record()
    if job is None:
        log_ = scope.commit_log()
        scope.refuse_if_purged(log_)
        if log_ is None:
            raise JobNotSetUp(f"job {scope.job_id} was never set up at {scope.store.url()}")
        if not defer_cleanup:
            scope.remove_trash()   # a cleanup deferred, or killed midway, by an earlier call
        # Nothing is written: _SUCCESS was written before the job record went, and if it is gone now a later
        # job withdrew it; writing it back would describe a directory that has changed since (I9).
        return dict(log_.manifest)
    scope.check_config(job)
    if scope.config.owner is not None:   # a run commits only the application attempt its own setup claimed
        scope.own_app_attempts(job, doing="job commit")
    if expected_tasks is None:
        tasks = None
    elif isinstance(expected_tasks, int) and not isinstance(expected_tasks, bool):
        tasks = list(range(check_number(expected_tasks, "expected_tasks")))
    else:
        tasks = sorted({check_number(t, "task") for t in expected_tasks})
    try:
        return run_job_commit(scope, job, tasks, clock, defer_cleanup, gate)
    except JobAlreadyCommitted:
        # a stage found the job record gone (:meth:`~.stage.JobCommitRun.check_current`): another run finished
        # this very commit meanwhile; unless a newer generation started since, the caller gets its manifest, as a
        # commit_job called after it does
        log_ = scope.commit_log()
        if scope.job_record() is None and log_ is not None and log_.manifest.get("job_uuid") == job.job_uuid:
            return dict(log_.manifest)
        raise
    except Exception:
        now = scope.job_record()
        # a stage failed (not a fault injected between two) of a generation still uncommitted: a failed cleanup
        # after _SUCCESS leaves nothing behind, its job directory is gone
        if clock.failure is not None and now is not None and now.job_uuid == job.job_uuid:
            save_failure(scope, job, clock)
        raise


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (reference counting still frees everything). Job commit
    allocates a record, a dict and a list per file and per task and frees them only at its end: each allocation
    threshold reached started a pass over every live object of the process (an Airflow task process holds
    hundreds of thousands) that finds nothing to free; at 10,000 one-file tasks that was a sixth of the commit
    alone, more in a big process. A collector someone else turned off stays off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_job_commit(scope: Job, job: JobRecord, tasks: Sequence[int] | None,
                   clock: StageClock, defer_cleanup: bool = False, gate: Gate | None = None) -> dict[str, Any]:
    """Run the stages: from the start, or, when a plan exists (a crashed commit), from the withdrawal on. A
    *gate* is asked after the recovery and before the plan (nothing visible has changed then); a resumed commit
    has passed it already (its plan keeps the verdict)."""
    # Every record the commit reads is read (and validated) before anything changes: a commit log that cannot be
    # read stops the commit here, naming it, not after the new files are published and the old ones deleted.
    run = JobCommitRun(scope, job, clock, records.now_iso(), defer_cleanup=defer_cleanup,
                       previous_log=scope.commit_log())
    stored = scope.commit_plan(job)
    if stored is None:
        if tasks is None:
            tasks = sorted(scope.registered_tasks(job))
        recs = RecoverTasks(run)(tasks)
        if gate is not None:
            run.audit = gate(scope, job, recs)
        plan = FixPlan(run)(recs)
    else:
        run.resumed = True
        plan = Plan(stored, planned_records(scope, stored))
        check_tree(scope, plan.recs)
    inject("commit_job.after_plan")
    if scope.target_claim:
        # every run of a plan, resumed ones too, holds the claim before its first visible change: a plan fixed
        # without one (by an earlier release), or one whose claim an abort freed under it, takes it now or stops
        scope.target_claim.take(job)
    plan = WithdrawMarkers(run)(plan)
    renamed = Publish(run)(plan)
    DeleteOld(run)(plan)
    if scope.table is not None:
        TableCommitStage(run)(plan)
    manifest = WriteMarkers(run)(SaveCommitLog(run)((plan, renamed)))
    # _SUCCESS holds the stages up to its own writing; the caller also gets the markers stage and the cleanup
    manifest["durations"][names.MARKERS] = run.clock.durations[names.MARKERS]
    manifest["durations"]["total"] = round(time.monotonic() - run.clock.start, 6)
    cleanup_started = time.monotonic()
    Cleanup(run)(manifest)
    manifest["durations"][names.CLEANUP_AFTER_SUCCESS] = round(time.monotonic() - cleanup_started, 6)
    manifest["diagnostics"]["cleanup_deferred"] = defer_cleanup and scope.store.renames_directories
    return manifest


def save_failure(scope: Job, job: JobRecord, clock: StageClock) -> None:
    """Write the failed commit's summary beside the job's records (replacing an earlier one). Best effort: the
    store that failed the stage may refuse this write too (a full disk), and the stage's own error is the one the
    caller must see."""
    doc = {"job_id": scope.job_id, "job_uuid": job.job_uuid, "generation": job.generation, "at": records.now_iso(),
           **(clock.failure or {}), **clock.summary()}
    try:
        scope.store.write_bytes(scope.layout.commit_failure, records.dumps("commit-failure", doc))
    except Exception as exc:
        log.warning("job %s: the failed commit's summary could not be saved: %s: %s", scope.job_id,
                    type(exc).__name__, exc)


def read_failure(scope: Job) -> dict[str, Any] | None:
    """The summary of the job's last failed commit, while the generation is uncommitted (``None`` otherwise)."""
    return records.read(scope.store, scope.layout.commit_failure, "commit-failure")


__all__ = ["commit_job", "read_failure", "run_job_commit"]
