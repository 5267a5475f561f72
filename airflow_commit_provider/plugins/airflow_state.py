"""What the Commit status view reads from Airflow, in one place: the run's task instances, the setup contexts and
commit summaries its stages published as XCom, and a cheap fingerprint of all of it.

Everything else the view shows comes from the storage (the protocol's records). These reads go through Airflow's
models (the api-server's own metadata database session), each one query per request, whatever the run's size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..operators.setup_context import setup_xcom

log = logging.getLogger(__name__)

#: The operator class names whose task instances make a run one with a write stage (``TaskInstance.operator``).
SETUP_OPERATORS = frozenset({"CommitSetupOperator"})
#: Run states in which the run can still change by itself.
ACTIVE_RUN_STATES = frozenset({"queued", "running"})


@dataclass(frozen=True, slots=True)
class TaskInstanceRow:
    """One task instance of the run as the view needs it."""

    task_id: str
    map_index: int
    state: str | None
    try_number: int
    operator: str | None
    #: seconds of the latest try (``None`` before it ran, and while it runs)
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """The run as Airflow knows it: its state and every task instance (one query each)."""

    run_state: str | None
    task_instances: tuple[TaskInstanceRow, ...]

    @property
    def setup_task_ids(self) -> list[str]:
        """The run's stage setup tasks (they exist, with no state, from the run's creation on)."""
        return sorted({ti.task_id for ti in self.task_instances if is_setup_task(ti.task_id, ti.operator)})

    @property
    def active(self) -> bool:
        return self.run_state in ACTIVE_RUN_STATES


def is_setup_task(task_id: str, operator: str | None) -> bool:
    """Whether a task may be a stage's setup: a ``CommitSetupOperator``, or named as ``commit_stage`` names it
    (a subclass of the operator defined in a DAG file has another class name); its XCom decides."""
    return operator in SETUP_OPERATORS or task_id == "setup" or task_id.endswith(".setup")


def _state(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def run_snapshot(dag_id: str, run_id: str) -> RunSnapshot:
    """The run's state and task instances."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    with create_session() as session:
        run_state = session.query(DagRun.state).filter(DagRun.dag_id == dag_id, DagRun.run_id == run_id).scalar()
        rows = session.query(TI.task_id, TI.map_index, TI.state, TI.try_number, TI.operator,
                             TI.duration).filter(TI.dag_id == dag_id, TI.run_id == run_id).all()
    return RunSnapshot(_state(run_state), tuple(TaskInstanceRow(r[0], r[1], _state(r[2]), r[3] or 0, r[4], r[5])
                                                for r in rows))


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What changes whenever the run, one of its task instances or one of its unmapped XComs changes state; not
    what changes all the time (a running task's heartbeat, the scheduler's loop over the run: both bump the rows'
    ``updated_at``)."""

    run: tuple[str | None, ...] | None
    task_instances: tuple[tuple[str, ...], ...]
    xcoms: tuple[str, ...]

    @property
    def active(self) -> bool:
        """Whether the run is queued or running: it can change by itself."""
        return self.run is not None and self.run[0] in ACTIVE_RUN_STATES


def run_fingerprint(dag_id: str, run_id: str) -> Fingerprint:
    """The run's :class:`Fingerprint`: per task state, how many, their tries and latest start and end, by
    aggregate queries (no row is loaded, however many tasks the run has)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import func

    with create_session() as session:
        run = session.query(DagRun.state, DagRun.start_date, DagRun.end_date, DagRun.clear_number).filter(
            DagRun.dag_id == dag_id, DagRun.run_id == run_id).first()
        tis = session.query(TI.state, func.count(), func.sum(TI.try_number), func.max(TI.start_date),
                            func.max(TI.end_date)).filter(TI.dag_id == dag_id, TI.run_id == run_id).group_by(
            TI.state).all()
        xcoms = session.query(func.count(), func.max(XComModel.timestamp)).filter(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == "return_value",
            XComModel.map_index == -1).one()
    return Fingerprint((_state(run[0]), *map(str, run[1:])) if run else None,
                       tuple(sorted(tuple(map(str, r)) for r in tis)), tuple(map(str, xcoms)))


def missing_run(dag_id: str, run_id: str) -> str:
    """Why the view has nothing for a run the metadata database does not hold: no such DAG, or no such run."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        dag = session.query(DagModel.dag_id).filter(DagModel.dag_id == dag_id).scalar()
    if dag is None:
        return f"no DAG {dag_id!r}"
    return f"DAG {dag_id!r} has no run {run_id!r}"


def setup_task_ids(dag_id: str, run_id: str) -> list[str]:
    """The run's possible setup tasks (:func:`is_setup_task`), without loading its other task instances."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import or_

    with create_session() as session:
        rows = session.query(TI.task_id, TI.operator).filter(
            TI.dag_id == dag_id, TI.run_id == run_id, TI.map_index == -1,
            or_(TI.operator.in_(SETUP_OPERATORS), TI.task_id == "setup", TI.task_id.like("%.setup"))).all()
    return sorted({r[0] for r in rows if is_setup_task(r[0], r[1])})


def return_values(dag_id: str, run_id: str, task_ids: Iterable[str], key: str = "return_value") -> dict[str, Any]:
    """The ``return_value`` XCom (or the *key* one) of each of *task_ids* that has one (unmapped tasks: the setup
    and commit tasks)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    task_ids = list(task_ids)
    if not task_ids:
        return {}
    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                               XComModel.key == key, XComModel.map_index == -1,
                                               XComModel.task_id.in_(task_ids)).all()
        out = {}
        for row in rows:
            try:
                out[row.task_id] = XComModel.deserialize_value(row)
            except Exception as exc:  # one unreadable value must not hide the other stages
                log.warning("commit status: XCom of %s/%s/%s unreadable: %s", dag_id, run_id, row.task_id, exc)
        return out


def setup_contexts(dag_id: str, run_id: str, task_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The setup contexts the run's setup tasks *task_ids* published, by setup task id (a task whose XCom is not
    one is left out)."""
    out = {}
    for task_id, value in return_values(dag_id, run_id, task_ids).items():
        setup = setup_xcom(value)
        if setup is not None:
            out[task_id] = setup
    return out
