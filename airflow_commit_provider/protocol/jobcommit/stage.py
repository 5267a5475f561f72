"""What job commit's stages share: the run (scope, job record, clock) and the plan. Their base is the protocol's
(:mod:`..stage`): each is timed, counted and logged, and the commit's failure summary (:func:`~.run_job_commit`)
names the stage that failed, what it had cost and why, as Hadoop's manifest committer saves its summary on failure
too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import JobAlreadyCommitted
from ..job import Job
from ..records.job import CommitLog, CommitPlan, JobRecord
from ..records.task import TaskCommitRecord
from ..stage import Stage as BaseStage
from ..tables.common import TableCommit
from ..timing import StageClock

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


class Stage(BaseStage[JobCommitRun, In, Out]):
    """One stage of job commit (:class:`~..stage.Stage`), its run the commit's :class:`JobCommitRun`."""
