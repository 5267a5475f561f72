"""Whether the DAG run a job belongs to is still live, asked of Airflow: what ``airflow-commit abort`` checks first.

Nothing in the storage tells a live run from a dead one (a killed try and a running one leave the same unfinished
attempt). Aborting a live run's job fails its running tasks (their commits are refused: no job record) and leaves
what they write after the purge behind, so the command asks Airflow's metadata database, as the ``airflow`` command
line does, and refuses while the run is queued or running. Where the database cannot be reached (a worker of a
deployment without database access, a machine without Airflow's configuration) it cannot tell, and says so:
``--force`` is then the person's word that the run has ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Airflow's run states in which its tasks may still run
LIVE_RUN_STATES = frozenset({"queued", "running"})


class RunStateUnknown(Exception):
    """Airflow's metadata database could not be asked."""


def owning_run(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(dag_id, run_id)`` of the run whose setup opened the job's current application attempt (its owner), else
    the run its labels name; ``None`` for a job no DAG run made (the protocol used directly)."""
    owner = job.get("owner") or {}
    labels = job.get("labels") or {}
    dag_id, run_id = owner.get("dag_id") or labels.get("dag_id"), owner.get("run_id") or labels.get("run_id")
    return (str(dag_id), str(run_id)) if dag_id and run_id else None


def run_state(dag_id: str, run_id: str) -> str | None:
    """The run's state in Airflow's metadata database (``None``: it holds no such run);
    :class:`RunStateUnknown` naming why when the database cannot be asked."""
    try:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as session:
            state = session.query(DagRun.state).filter(DagRun.dag_id == dag_id, DagRun.run_id == run_id).scalar()
    except Exception as exc:   # no Airflow, no configuration, no database access: all mean "cannot tell"
        raise RunStateUnknown(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    return None if state is None else str(getattr(state, "value", state))


def live_run_refusal(job: Mapping[str, Any], retry: str) -> str | None:
    """Why aborting *job* (``describe_job``) now is refused, with the way on (*retry*: the same command with
    ``--force``); ``None`` when its run has ended, or no run made it, or it is not running."""
    if job.get("state") != "running":
        return None
    run = owning_run(job)
    if run is None:
        return None
    dag_id, run_id = run
    try:
        state = run_state(dag_id, run_id)
    except RunStateUnknown as exc:
        return (f"job {job['job_id']} is running and belongs to dag {dag_id} run {run_id}, and Airflow's metadata "
                f"database cannot be asked whether that run has ended ({exc}). Check the run in Airflow's UI: while "
                "it is queued or running, aborting its job fails its live tasks. Once it has ended, run: "
                f"{retry}")
    if state is None:   # this machine's Airflow may not be the deployment's: no answer either way
        return (f"job {job['job_id']} is running and belongs to dag {dag_id} run {run_id}, which this machine's "
                "Airflow metadata database does not hold (is it the deployment's?). Check the run in Airflow's UI: "
                "while it is queued or running, aborting its job fails its live tasks. Once it has ended, run: "
                f"{retry}")
    if state not in LIVE_RUN_STATES:
        return None
    return (f"job {job['job_id']} belongs to dag {dag_id} run {run_id}, which Airflow says is {state}: aborting its "
            "job now would fail its live tasks (their commits are refused) and leave what they write after it "
            "behind. Let the run end: if it fails, its teardown aborts the job and keeps the committed tasks for a "
            "clear of the run (then this command purges them, if the run will not be cleared). To stop it now, "
            f"mark the run failed in Airflow first (its teardown runs), then abort. Only if Airflow is wrong: {retry}")
