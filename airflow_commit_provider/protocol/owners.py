"""Who owns an application attempt: the one run of the scheduler whose setup claimed it.

Two runs of one job (one ``job_key`` rendered alike for two DAG runs) used to share an application attempt: each
worker took "the newest" one, so the second run's setup moved both runs' writes into its attempt, where equal try
numbers gave equal work directories and file names, and every later run of the job failed on the collision. The
rule (DESIGN.md, section 10): overlap is refused or serialised, never interleaved. So the setup records its run
in the application attempt's marker, and every task of a run works only in an attempt its own run owns:

- a setup that finds the job's current attempt owned by another run that has not finished refuses
  (:class:`~.errors.OverlappingRun`), before anything changes; one that has finished (its teardown recorded
  the abort, or the scheduler says it ended) is taken over: the new attempt recovers what it committed;
- a write, a job commit or an abort of a run that does not own the current attempt refuses (the abort stands
  down), rather than writing into (or deleting) another run's work.

A run is ``(dag_id, run_id)``; its ``clear_number`` is recorded too (a clear re-runs the setup of the same run,
which continues its own job) but does not make another run. A marker without an owner (an earlier release, or
a committer used without one) is anyone's, as before. No Airflow import: the operators build the owner
(:class:`~.config.RunOwner`, a field of the job's configuration).
"""

from __future__ import annotations

from collections.abc import Callable

from .config import RunOwner


#: Has that run ended? ``True`` (it succeeded or failed), ``False`` (it is queued or running), ``None`` (its state
#: cannot be read): what a setup asks of the scheduler about the run that owns the job's current attempt.
RunFinished = Callable[[RunOwner], "bool | None"]


#: what every refusal says about the rule and the ways out that need no command
_RULE = "two runs of one job never share an application attempt"
_WAYS_OUT = ("let that run finish and clear this one (its setup then takes the job over, recovering what the "
             "other run committed), serialise the runs (max_active_runs=1 on the DAG), or give the runs job_keys "
             "that differ")


def not_owned(job_id: str, ours: RunOwner, other: RunOwner, app: int, doing: str) -> str:
    """Why *ours* may not *doing* (``"write"``, ``"commit"``) in the job's current application attempt *app*."""
    return (f"job {job_id}: its current application attempt {app} is owned by {other.describe()}, not by "
            f"{ours.describe()}, so this {doing} is refused and nothing was written: {_RULE}. This run's setup "
            f"did not claim it (another run of the job took the job over, or this run's setup was refused). To "
            f"go on, {_WAYS_OUT}")


def still_running(job_id: str, other: RunOwner, app: int, started: str | None, finished: bool | None) -> str:
    """Why a setup is refused: *other* owns the job's current application attempt *app* and has not ended
    (*finished*: what the scheduler said, ``None`` when it could not say)."""
    state = "has not finished" if finished is False else "may still be running (its state could not be read)"
    return (f"job {job_id} is being written by {other.describe()}, which owns its application attempt {app} "
            f"(set up {started or 'at an unknown time'}) and {state}: {_RULE}, so this setup is refused and "
            f"nothing was changed. To go on, {_WAYS_OUT}. If that run will never end (its workers are gone), "
            "abort the job (abort_job() of a committer built without an owner: it removes what that run wrote) "
            "and set this run up again.")


__all__ = ["RunFinished", "not_owned", "still_running"]
