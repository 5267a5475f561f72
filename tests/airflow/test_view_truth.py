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

import pyarrow as pa
import pytest
from fastapi import HTTPException

from airflow_commit_provider.plugins import app as plugin_app
from airflow_commit_provider.plugins.airflow_state import RunSnapshot, TaskInstanceRow
from airflow_commit_provider.plugins.read_model import DONE, StageModel
from airflow_commit_provider.protocol import FileOutputCommitter, faults, jobcommit, run_task_attempt
from airflow_commit_provider.protocol import stage as stage_base
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
    for module in (attempts, jobcommit, stage_base):
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


# ------------------------------------------------------------------------------------------------ advice, followed
def _model(c: FileOutputCommitter, states: list[str | None], run_state: str = "running",
           commit_state: str | None = None, conn_id: str | None = None) -> StageModel:
    tis = tuple(TaskInstanceRow("stage.write", n, s, 1, "CommitWriteOperator") for n, s in enumerate(states))
    if commit_state is not None:
        tis += (TaskInstanceRow("stage.commit", -1, commit_state, 1, "CommitJobOperator"),)
    return StageModel("stage.setup", "stage", c.status(), RunSnapshot(run_state, tis), None, conn_id)


def _fails(w):
    raise RuntimeError("user code failed")


def _committer(tmp_path, **kw) -> FileOutputCommitter:
    return FileOutputCommitter(str(tmp_path / "out"), "job", **{"mode": "append", "partition_by": ["day"], **kw})


def test_clear_failed_tasks_then_clear_run_each_followed_commits(tmp_path):
    """A task that failed with no try left in a live run: "clear only failed tasks" (a new try in the same
    application attempt) and the job commits. After the teardown: "clear the run" (a new application attempt, the
    committed task recovered) and the job commits."""
    c = _committer(tmp_path)
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(sc.task_table(0, 1)))
    with pytest.raises(RuntimeError):
        run_task_attempt(c, 1, 1, _fails)
    s = _model(c, ["success", "failed"]).summary
    assert s.action == "clear_failed_tasks" and "\"Clear only failed tasks\"" in s.next_steps[0]
    run_task_attempt(c, 1, 2, lambda w: w.write(sc.task_table(1, 2)))   # followed: the cleared task's next try
    c.commit_job(2)
    assert _model(c, ["success", "success"], "success").summary.action == "none"

    c = _committer(tmp_path / "second")
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(sc.task_table(0, 1)))
    with pytest.raises(RuntimeError):
        run_task_attempt(c, 1, 1, _fails)
    c.abort_job(keep_committed=True)   # the failed run's teardown
    s = _model(c, ["success", "failed"], "failed").summary
    assert s.action == "clear_run" and "task 0 will be recovered" in s.next_steps[0]
    assert c.setup_job().app_attempt == 1   # followed: the cleared run's setup, then its writes
    assert run_task_attempt(c, 0, 2, lambda w: w.write(sc.task_table(0, 2))).status == "recovered"
    run_task_attempt(c, 1, 2, lambda w: w.write(sc.task_table(1, 2)))
    c.commit_job(2)
    assert _model(c, ["success", "success"], "success").summary.state == "committed"


def test_clear_commit_task_followed_resumes_the_commit(tmp_path):
    """A job commit that failed after its plan was fixed: the advice is to retry or clear the commit task (not
    the run); followed, the commit resumes from its plan."""
    c = _committer(tmp_path)
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(sc.task_table(0, 1)))
    faults.arm("commit_job.after_plan")
    with pytest.raises(faults.InjectedFault):
        c.commit_job(1)
    faults.disarm()
    s = _model(c, ["success"], commit_state="failed").summary
    assert (s.state, s.action) == ("committing", "clear_commit_task"), s.next_steps
    assert _model(c, ["success"], commit_state="running").summary.action == "wait"
    c.commit_job(1)   # followed: the commit task's next try
    assert _model(c, ["success"], "success").summary.state == "committed"


@pytest.mark.parametrize("fmt", [None, "delta"])
@pytest.mark.parametrize("follow", ["fix_and_clear_run", "abort_and_new_run"])
def test_a_deterministic_commit_failure_advises_a_fix_not_a_clear_and_each_way_out_commits(tmp_path, follow, fmt):
    """A job (a directory, a Delta table) whose two tasks wrote different schemas: its commit fails on
    SchemaMismatch, which every try repeats. The view does not advise a clear of the run or of the commit task; it
    says a clear cannot help as it is, and gives the fix and the ``airflow-commit abort`` command. After the
    teardown the tasks the commit refused are ``refused`` (they run again on a clear), not ``kept`` for recovery
    (the view said "kept tasks 0 and 1 ... for recovery" of tasks the clear then ran again: seen in a deployment),
    and while the clear's tries run they are not counted done. Both ways, followed with the code fixed, commit."""
    import shlex

    from airflow_commit_provider.cli import main as cli

    def c_of():
        if fmt is None:
            return _committer(tmp_path)
        pytest.importorskip("deltalake")
        from airflow_commit_provider.protocol.tables import table_target

        table = table_target("delta", str(tmp_path / "events"))
        return FileOutputCommitter(table.data_root, "job", mode="append", partition_by=["day"], table=table)

    c = c_of()
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(sc.task_table(0, 1)))
    wrong = sc.task_table(1, 1).append_column("extra", pa.array(["x"] * sc.ROWS))
    run_task_attempt(c, 1, 1, lambda w: w.write(wrong))
    with pytest.raises(Exception) as err:
        c.commit_job(2)
    assert type(err.value).__name__ == "SchemaMismatch"
    s = _model(c, ["success", "success"], commit_state="failed", conn_id="fs_default").summary
    assert s.action == "new_job" and "cannot help" in s.next_steps[0], s.next_steps
    command = next(w.split("`")[1] for w in s.next_steps if "`" in w)
    words = shlex.split(command)
    assert words[:2] == ["airflow-commit", "abort"] and words[-2:] == ["--conn-id", "fs_default"]
    c.abort_job(keep_committed=True)   # the failed run's teardown
    stage = _model(c, ["success", "success"], "failed", commit_state="failed")
    assert [(r.status, r.committed_attempt) for r in stage.rows] == [("refused", "0.1")] * 2, \
        [(r.status, r.why) for r in stage.rows]
    assert "job commit refused its files" in stage.rows[0].why
    assert stage.summary.aborted is not None and stage.summary.aborted.kept_tasks == []
    assert (stage.summary.action, stage.summary.tasks_done) == ("new_job", 0)
    if follow == "fix_and_clear_run":
        c = c_of()
        c.setup_job()   # the cleared run: the refused task runs again, with the fixed code
        live = _model(c, ["running", "queued"]).rows
        assert [(r.status, r.committed_attempt) for r in live] == [("running", None), ("waiting", None)], \
            [(r.status, r.why) for r in live]
        for t in (0, 1):
            run_task_attempt(c, t, 2, lambda w, t=t: w.write(sc.task_table(t, 2)))
    else:
        assert cli(words[1:-2]) == 0   # the command as the view gives it (the local disk needs no connection)
        c = c_of()
        c.setup_job()   # a new run: a new generation, every task written with the fixed code
        for t in (0, 1):
            run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    c.commit_job(2)
    assert _model(c, ["success", "success"], "success").summary.state == "committed"


def test_a_refused_setup_shows_its_error_and_fixed_the_next_run_commits(watched):
    """A setup refused for good (mode ``error``, a target that holds a file): the finished failed run shows the
    stage ``refused`` with the setup's error and the advice to fix it, not "no write stage has started yet";
    followed (the file removed), the next run commits."""
    from ..conftest import TEST_ROOT

    dags, _ = watched
    target = TEST_ROOT / "view_truth_refused"
    target.mkdir(parents=True)
    (target / "someone-else.csv").write_text("x\n")
    dr = dags.view_truth_refused.test()
    assert dr.state == "failed"
    (stage,) = plugin_app.run_status("view_truth_refused", dr.run_id).stages
    assert (stage.state, stage.action) == ("refused", "fix_setup"), stage
    assert (stage.error or "").startswith("InvalidOutputSpec: ") and "someone-else.csv" in stage.error, stage.error
    # its write tasks never ran: not "failed 2" in red (seen in a deployment); the error is shown below the advice
    assert (stage.tasks_total, stage.counts) == (0, {}) and "its error is below" in stage.next_steps[0]
    (target / "someone-else.csv").unlink()   # followed: the cause fixed
    dr = dags.view_truth_refused.test()
    assert dr.state == "success"
    (stage,) = plugin_app.run_status("view_truth_refused", dr.run_id).stages
    assert (stage.state, stage.action) == ("committed", "none")


def test_a_purged_job_says_so_and_the_next_run_commits(watched):
    """A failed run whose teardown purged its job (``purge_on_failure``; ``airflow-commit abort --purge`` and
    ``gc --apply`` leave the same): the view said "The stage's setup has not run yet in this run" with every task
    ``waiting`` (seen in a deployment). It says the job was purged, shows no task, and advises a clear or a new
    run; followed, the next run commits."""
    from ..conftest import TEST_WORK

    dags, _ = watched
    (TEST_WORK / "fail-1-1").touch()   # shard 1's only try fails: the run fails, the teardown purges
    dr = dags.view_truth_purged.test()
    assert dr.state == "failed"
    (stage,) = plugin_app.run_status("view_truth_purged", dr.run_id).stages
    assert (stage.state, stage.action, stage.tasks_total) == ("purged", "clear_run", 0), stage
    assert "was purged" in stage.next_steps[0] and "every task runs" in stage.next_steps[0]
    (TEST_WORK / "fail-1-1").unlink()   # followed: a new run
    again = dags.view_truth_purged.test()
    assert again.state == "success"
    (stage,) = plugin_app.run_status("view_truth_purged", again.run_id).stages
    assert (stage.state, stage.tasks_done) == ("committed", 2)


def test_abort_of_a_live_runs_job_is_refused_and_changes_nothing(watched):
    """``airflow-commit abort --purge`` of a job whose DAG run is live purged it: the running task's commit was
    then refused (no job record), the run failed, and its late try left a directory that ``inspect`` called
    unreadable (seen in a deployment). Run from inside the live run, the command is refused, naming the run, the
    way on and ``--force``; the run commits as if nothing happened."""
    import json
    import subprocess
    import sys

    from ..conftest import TEST_ROOT, TEST_WORK

    dags, _ = watched
    dr = dags.view_truth_live_abort.test()
    assert dr.state == "success"
    seen = json.loads((TEST_WORK / "live-abort.json").read_text())
    assert seen["code"] == 2, seen
    assert f"run {dr.run_id}, which Airflow says is running" in seen["stderr"] and "--force" in seen["stderr"], seen
    (stage,) = plugin_app.run_status("view_truth_live_abort", dr.run_id).stages
    assert (stage.state, stage.tasks_done) == ("committed", 1)
    # a running job of a run that has ended may be aborted; of a run this database does not hold, it may not
    from airflow_commit_provider.cli.live import live_run_refusal

    job = {"job_id": stage.job_id, "state": "running", "labels": {"dag_id": "view_truth_live_abort"}}
    assert live_run_refusal({**job, "labels": {**job["labels"], "run_id": dr.run_id}}, "retry") is None
    assert "does not hold" in live_run_refusal({**job, "labels": {**job["labels"], "run_id": "elsewhere"}}, "retry")
    # the run has ended: the command is no longer refused (a committed job is left alone)
    done = subprocess.run([sys.executable, "-m", "airflow_commit_provider.cli", "abort",
                           str(TEST_ROOT / "view_truth_live_abort"), "--job", stage.job_id, "--purge"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "left alone: the job is committed" in done.stdout, done
