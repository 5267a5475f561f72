"""The Commit status view's truth, as an invariant tested like the protocol's: every status it shows is one the
protocol's records and Airflow's task instances justify at that moment (issue 32).

A run under ``dag.test()`` (SQLite) is watched from inside: at every task-commit and job-commit point of the
protocol (the fault points of :mod:`~airflow_commit_provider.protocol.faults`, reached in the worker's own
process) and before every shard writes, the test reads the run through the plugin's own code (``version_of``,
``build_model``: Airflow's task instances and the stage's storage) exactly as the api-server would, and keeps what
it saw. Then it checks, against the end of the run: nothing shown failed or denied later committed in the same
application attempt; the count of decided tasks never went back; each shard commit moved the view's version and
its progress by one; a task between its claim to commit and its record was shown ``committing``; a shard whose
first try failed was never shown ``failed`` while its retry was in hand. The statuses of the moments inside
Airflow's retry (up for retry, scheduled, queued) are read from real records with each task-instance state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import HTTPException

from airflow_commit_provider.plugins import app as plugin_app
from airflow_commit_provider.plugins.airflow_state import RunSnapshot, TaskInstanceRow
from airflow_commit_provider.plugins.read_model import DONE, StageModel
from airflow_commit_provider.protocol import FileOutputCommitter, faults, run_task_attempt
from airflow_commit_provider.protocol import jobcommit
from airflow_commit_provider.protocol.jobcommit import stage as jobcommit_stage
from airflow_commit_provider.protocol.tasks import attempts

from ..conftest import TEST_WORK, fresh_test_dags
from ..protocol import scenario as sc

pytestmark = pytest.mark.airflow

DAG_ID, SETUP = "view_truth", "write.setup"
#: where the view is read: every point of a task commit and a job commit a worker reaches
WATCHED = frozenset(p for p in faults.POINTS if p.startswith(("setup_task.", "commit_task.", "commit_job.")))


@dataclass(frozen=True)
class Seen:
    """What the view showed at one point."""

    point: str
    version: str
    state: str | None
    app_attempt: int | None
    tasks_done: int
    rows: dict[int, Any]


class Watcher:
    """Reads the run through the plugin's code at each point it is called (serialized: shard threads, the commit
    task)."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    def __call__(self, point: str) -> None:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with self._lock:
            with create_session() as session:
                run_id = session.query(DagRun.run_id).filter(DagRun.dag_id == DAG_ID).order_by(
                    DagRun.id.desc()).limit(1).scalar()
            if run_id is None:
                return
            version = plugin_app.version_of(DAG_ID, run_id).version
            stage = plugin_app.build_model(DAG_ID, run_id, version).stages.get(SETUP)
            if stage is None:   # the setup has not published its context yet
                return
            s = stage.summary
            self.seen.append(Seen(point, version, s.state, s.app_attempt, s.tasks_done,
                                  {r.task: r for r in stage.rows}))


@pytest.fixture
def watched(airflow_db, monkeypatch):
    dags = fresh_test_dags("view_truth_test_dags")
    watcher = Watcher()
    for module in (attempts, jobcommit, jobcommit_stage):
        original = module.inject

        def hook(point: str, original=original) -> None:
            if point in WATCHED:
                watcher(point)
            original(point)

        monkeypatch.setattr(module, "inject", hook)
    monkeypatch.setattr(dags, "OBSERVE", watcher)
    return dags, watcher


def assert_truthful(seen: list[Seen], final: dict[int, Any]) -> None:
    """The invariant: nothing shown failed, or as a denied attempt, committed later in the same application
    attempt; the decided tasks never went back (no clear in this run)."""
    for s in seen:
        for n, row in s.rows.items():
            won = final[n].committed_attempt
            if row.status == "failed":
                assert not (won or "").startswith(f"{s.app_attempt}."), (s.point, n, row.why, won)
            assert won not in row.denied_attempts, (s.point, n, row.denied_attempts, won)
    done = [s.tasks_done for s in seen]
    assert done == sorted(done), f"the count of decided tasks went back: {done}"


def test_a_retried_shard_and_every_shard_commit_under_airflow(watched):
    dags, watcher = watched
    (TEST_WORK / "fail-3-1").touch()   # shard 3's first try fails; Airflow retries the task instance
    dr = dags.view_truth.test()
    assert dr.state == "success"
    final = {n: r for n, r in watcher.seen[-1].rows.items()}
    assert all(r.status == "committed" for r in final.values()), {n: r.status for n, r in final.items()}
    assert final[3].committed_attempt == "0.2" and final[0].committed_attempt == "0.1"
    seen = watcher.seen
    assert len(seen) > 40, [s.point for s in seen]
    assert_truthful(seen, final)

    # between its claim to commit and its record, the one shard committing is shown so, never denied or failed
    claims = [s for s in seen if s.point == "commit_task.after_claim"]
    assert len(claims) == 10   # shard 3's first try failed in its code, before any claim
    for s in claims:
        assert [r.status for r in s.rows.values()].count("committing") == 1, s.point
        assert not any(r.status == "failed" for r in s.rows.values())

    # each shard commit moves the version and the progress by one: the bar never freezes
    records = [s for s in seen if s.point == "commit_task.after_record"]
    assert [s.tasks_done for s in records] == list(range(1, 11))
    assert len({s.version for s in records}) == 10

    # shard 3 from its failure on: never "failed" while Airflow had its next try in hand
    after = seen[next(i for i, s in enumerate(seen) if s.rows[3].failed_attempts):]
    assert {s.rows[3].status for s in after} <= {"retrying", "running", "committing", "committed"}, \
        [(s.point, s.rows[3].status, s.rows[3].why) for s in after if s.rows[3].status not in DONE]
    # the job commit: every task shown committed from its plan on
    plan = [s for s in seen if s.state == "committing"]
    assert plan and all(r.status == "committed" for s in plan for r in s.rows.values())


def test_a_run_or_dag_that_does_not_exist_is_a_404(watched):
    dags, _ = watched
    dr = dags.view_truth.test()
    assert plugin_app.version_of(DAG_ID, dr.run_id).live is False
    for dag_id, run_id, says in ((DAG_ID, "no-such-run", f"DAG {DAG_ID!r} has no run 'no-such-run'"),
                                 ("no_such_dag", dr.run_id, "no DAG 'no_such_dag'")):
        for read in (lambda: plugin_app.run_status(dag_id, run_id), lambda: plugin_app.run_version(dag_id, run_id),
                     lambda: plugin_app.stage_tasks(dag_id, run_id, SETUP, None, None, None, 0, 50, None),
                     lambda: plugin_app.stage_files(dag_id, run_id, SETUP, 0, 50, None)):
            with pytest.raises(HTTPException) as err:
                read()
            assert (err.value.status_code, err.value.detail) == (404, says)
    assert plugin_app.run_status(DAG_ID, dr.run_id).stages[0].state == "committed"


# ------------------------------------------------------------------------------------------------ inside a retry
def _rows(c: FileOutputCommitter, ti_state: str | None, run_state: str = "running", try_number: int = 1):
    tis = (TaskInstanceRow("stage.write", 0, ti_state, try_number, "CommitWriteOperator"),)
    return {r.task: r for r in StageModel("stage.setup", "stage", c.status(), RunSnapshot(run_state, tis),
                                          None).rows}


@pytest.mark.parametrize("ti_state", ["up_for_retry", "scheduled", "queued", "running", None])
def test_a_failed_try_whose_next_try_airflow_holds_is_retrying_not_failed(tmp_path, ti_state):
    """Try 1 of task 0 failed (recorded failed by its abort); Airflow's task instance is at each step of its retry
    (or cleared, in a live run): the view says ``retrying``; once Airflow's task failed for good, ``failed``."""
    c = FileOutputCommitter(str(tmp_path / "out"), "job", mode="append", partition_by=["day"])
    c.setup_job()
    with pytest.raises(RuntimeError):
        run_task_attempt(c, 0, 1, lambda w: (_ for _ in ()).throw(RuntimeError("user code failed")))
    row = _rows(c, ti_state)[0]
    assert (row.status, row.failed_attempts) == ("retrying", ["0.1"]), row.why
    assert _rows(c, "failed")[0].status == "failed"
    assert _rows(c, None, run_state="failed")[0].status == "failed"   # a finished run: no try can follow
    run_task_attempt(c, 0, 2, lambda w: w.write(sc.task_table(0, 2)))
    assert _rows(c, "success", try_number=2)[0].status == "committed"


def test_a_claimed_commit_without_its_record_is_committing(tmp_path, monkeypatch):
    """Paused between its claim and its record (a threading.Event at ``commit_task.after_claim``), a try is shown
    ``committing``, not a denied attempt counted failed."""
    c = FileOutputCommitter(str(tmp_path / "out"), "job", mode="append", partition_by=["day"])
    c.setup_job()
    paused, release = threading.Event(), threading.Event()
    original = attempts.inject

    def pause(point: str) -> None:
        if point == "commit_task.after_claim" and threading.current_thread().name == "paused":
            paused.set()
            assert release.wait(60)
        original(point)

    monkeypatch.setattr(attempts, "inject", pause)
    worker = threading.Thread(target=run_task_attempt, args=(c, 0, 1, lambda w: w.write(sc.task_table(0, 1))),
                              name="paused")
    worker.start()
    try:
        assert paused.wait(60)
        row = _rows(c, "running")[0]
        assert (row.status, row.committing_attempts, row.denied_attempts) == ("committing", ["0.1"], []), row.why
    finally:
        release.set()
        worker.join(60)
    assert _rows(c, "success")[0].status == "committed"
