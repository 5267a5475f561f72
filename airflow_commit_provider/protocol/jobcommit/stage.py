"""The base of job commit's stages and what they share: the run (scope, job record, clock) and the clock.

Each stage is timed, counted (store requests by operation) and logged by :class:`Stage` whether it succeeds or
fails; a stage that raises is logged with its error and recorded on the clock, so that the commit's failure summary
(:func:`~.run_job_commit`) names the stage, what it had cost and why it failed, as Hadoop's manifest committer
saves its summary on failure too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import JobAlreadyCommitted
from ..faults import inject
from ..job import Job
from ..records.job import CommitLog, CommitPlan, JobRecord
from ..records.task import TaskCommitRecord
from ..tables.common import TableCommit
from ..timing import StageClock, Timed

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass
class JobCommitRun:
    """What every stage of one job commit shares: the job's scope, its record, and the clock."""

    scope: Job
    job: JobRecord
    clock: StageClock
    started: str
    resumed: bool = False
    #: leave the renamed job directory in ``_temporary/_trash`` for a later :meth:`remove_trash`
    defer_cleanup: bool = False
    #: the commit log as it was before this commit, read (and validated) before anything visible changes
    previous_log: CommitLog | None = None
    #: a table target's transaction (:class:`~.table.TableCommitStage`), reported in the manifest
    table_commit: TableCommit | None = None
    #: the audit's verdict the commit took before its plan (:class:`~..audit.run.AuditGate`), for the plan
    audit: dict[str, Any] | None = None

    def check_current(self, stage: str) -> None:
        """:class:`~..errors.JobAlreadyCommitted` when the job record is no longer this commit's generation:
        another run finished this very commit meanwhile (it took the record away), and a newer generation may be
        set up already. A commit that paused (a zombie commit task) and wakes then changes nothing: its next stage
        would redo what the other run did, or withdraw, replace or clean up the newer generation's state (its
        cleanup would move the new job record and application attempt away)."""
        now = self.scope.job_record()
        if now is None or now.job_uuid != self.job.job_uuid:
            raise JobAlreadyCommitted(
                f"job {self.scope.job_id}: generation {self.job.generation} ({self.job.job_uuid}) was committed by "
                f"another run while this commit was at {stage}"
                + ("" if now is None else f", and generation {now.generation} has started since")
                + "; this commit stops here and changes nothing")


@dataclass
class Plan:
    """The commit plan record and the task records it fixed, in task order."""

    fixed: CommitPlan
    recs: list[TaskCommitRecord] = field(default_factory=list)


class Stage(ABC, Generic[In, Out]):
    """One stage of job commit: timed, counted and logged by this base (:class:`~..timing.Timed`), in success and
    failure, then its fault point fired."""

    #: the stage's name in ``_SUCCESS.durations`` and in the log
    name: str = ""
    #: the fault point fired after the stage (:mod:`.faults`), if any
    fault: str | None = None
    #: whether the stage first checks that the job is still this commit's generation (:meth:`JobCommitRun.
    #: check_current`): every stage that writes, but the recovery before the plan (it adopts into this
    #: generation's own application attempt only)
    checks_generation: bool = True

    def __init__(self, run: JobCommitRun) -> None:
        self.run = run
        self.scope = run.scope

    def __call__(self, arg: In) -> Out:
        with Timed(self.run.clock, f"job {self.scope.job_id}", self.name) as t:
            if self.checks_generation:
                self.run.check_current(self.name)
            out = self.apply(arg)
            t.counts = self.counts(out)
        if self.fault:
            inject(self.fault)
        return out

    @abstractmethod
    def apply(self, arg: In) -> Out:
        """Do the stage's work on the previous stage's output."""

    def counts(self, out: Out) -> dict[str, int]:
        """What the log line reports besides the time (files, bytes, ...)."""
        return {}


