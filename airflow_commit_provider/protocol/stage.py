"""The one base of the protocol's multi-step operations, job commit's stages and the abort's, after Hadoop's
manifest committer (each stage given the run it belongs to, and timed, counted and logged by its base).

A stage is timed, counted (store requests by operation) and logged by :class:`Stage` whether it succeeds or fails;
a stage that raises is logged with its error and recorded on the run's clock, so that a failed run's summary names
the stage, what it had cost and why it failed. Before it works, a stage asks its run whether the job is still the
one the run started on (:meth:`StageRun.check_current`): a run that paused (a zombie commit or teardown) and wakes
after the job moved on must not act on what it read before. Job commit and the abort declare that check once, in
their run; what each does about a job that moved on differs (the commit stops with an error, the abort stands down).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, Protocol, TypeVar

from .faults import inject
from .job import Job
from .timing import StageClock, Timed

In = TypeVar("In")
Out = TypeVar("Out")
R = TypeVar("R", bound="StageRun")


class StageRun(Protocol):
    """What a run gives its stages: the job's scope, the clock, and the check that the job is still the run's."""

    scope: Job
    clock: StageClock

    def check_current(self, stage: str) -> None:
        """Raise (the run says what) when the job is no longer the one this run started on."""


class Stage(ABC, Generic[R, In, Out]):
    """One stage of a run: timed, counted and logged by this base (:class:`~.timing.Timed`), in success and
    failure, then its fault point fired."""

    #: the stage's name in the durations and in the log
    name: str = ""
    #: the fault point fired after the stage (:mod:`.faults`), if any
    fault: str | None = None
    #: whether the stage first checks that the job is still the run's (:meth:`StageRun.check_current`)
    checks_generation: bool = True

    def __init__(self, run: R) -> None:
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


__all__ = ["Stage", "StageRun"]
