"""A zombie write try under Airflow, for every authoring style: a try Airflow gave up on (its worker stopped
heartbeating) that wakes later and carries on where it stopped, at the worst moments: after its retry committed the
task, after the job commit, after the teardown, after the next generation of its ``job_key``, after a clear.

The zombie is real code in a real ``dag.test()``: try 1 of task 0 runs the write operator in a thread of its own,
which stops inside the user's callable (after the operator set up its committer and task attempt, as a paused
worker would); Airflow sees try 1 fail and retries it. The thread is released at the moment the case names and must
end without committing: its task commit is refused, and after it every committed row is still there exactly once,
the marker verifies, and the Commit status view shows task 0 committed by its retry, the zombie's try refused.
The protocol's own zombie tests (``tests/protocol``) pause real processes at every commit point; these prove the
operators hand each try its own attempt and application attempt so that the protocol can fence it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from airflow_commit_provider.operators import CommitJobOperator, CommitWriteOperator
from airflow_commit_provider.protocol import CommitProtocolError

from ..s3.test_composition_pairs import (DAY, ROWS, TASKS, Case, _assert_rows_once, _calls, _calls_log, _dag_of,
                                         _marker, _rows, _target, pair_dag)
from ..conftest import TEST_WORK

#: When the zombie wakes: inside the commit task before the job commit (its retry has committed task 0), inside it
#: after the job commit (before the teardown), after the run (teardown done), after the key's next run committed
#: a new generation, or before the commit of a clear that started a new application attempt.
WAKES = ("before_commit", "after_commit", "after_run", "after_next_generation", "after_clear")


@dataclass
class Zombie:
    """Try 1 of task 0 of one DAG, run in a thread that stops in the callable until :meth:`wake`."""

    wake_at: str
    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    outcome: BaseException | dict[str, Any] | None = None

    def wake(self) -> None:
        self.release.set()
        assert self.thread is not None
        self.thread.join(timeout=300)
        assert not self.thread.is_alive(), "the woken zombie finished"


#: The zombie of each DAG of this module, by DAG id.
ZOMBIES: dict[str, Zombie] = {}


def zombie_dag(case: Case, target: str):
    """The covering module's stage of *case*, its write callable the zombie's (see :func:`_zombie_rows`)."""
    return pair_dag(case, target, load=_zombie_load)


def _zombie_load(case: Case):
    def load(task: int, ti=None) -> pa.Table:
        zombie = ZOMBIES[case.dag_id]
        if threading.current_thread() is zombie.thread:
            zombie.started.set()
            assert zombie.release.wait(timeout=600), "the test wakes its zombie"
        return _rows(case.dag_id, task, ti)
    return load


@pytest.fixture
def zombie_operators(monkeypatch):
    """Plays Airflow's part around the operators: try 1 of task 0 goes on in a thread of its own while Airflow
    takes the try as lost; the commit task wakes the zombie before or after the job commit when the case says."""
    write, commit = CommitWriteOperator._write, CommitJobOperator._commit

    def lost_try(self, context):
        zombie = ZOMBIES.get(context["dag"].dag_id)
        ti = context["ti"]
        if zombie is None or zombie.thread is not None or max(ti.map_index, 0) != 0:
            return write(self, context)

        def carry_on() -> None:
            try:
                zombie.outcome = write(self, context)
            except BaseException as exc:   # what the zombie's worker would log when it finally ends
                zombie.outcome = exc

        zombie.thread = threading.Thread(target=carry_on, name=f"zombie-{context['dag'].dag_id}", daemon=True)
        zombie.thread.start()
        assert zombie.started.wait(timeout=300), "the zombie reached the user's code"
        raise RuntimeError("try 1 lost: its worker stopped heartbeating (the zombie goes on in its thread)")

    def commit_waking(self, context):
        zombie = ZOMBIES.get(context["dag"].dag_id)
        if zombie is not None and zombie.wake_at in ("before_commit", "after_clear") and zombie.started.is_set() \
                and not zombie.release.is_set() and not (TEST_WORK / f"fail-{context['dag'].dag_id}").exists():
            zombie.wake()
        summary = commit(self, context)
        if zombie is not None and zombie.wake_at == "after_commit" and not zombie.release.is_set():
            zombie.wake()
        return summary

    monkeypatch.setattr(CommitWriteOperator, "_write", lost_try)
    monkeypatch.setattr(CommitJobOperator, "_commit", commit_waking)
    yield
    for zombie in ZOMBIES.values():   # never leave a thread stopped in a callable
        zombie.release.set()
    ZOMBIES.clear()


CASES = [
    (Case("ops", "local", "v1", "append", tag="zombie"), "before_commit"),
    (Case("deco", "local", "v2", "overwrite", tag="zombie"), "before_commit"),
    (Case("stage", "local", "v1", "overwrite", tag="zombie"), "after_commit"),
    (Case("deco", "local", "v1", "dynamic", tag="zombie"), "after_run"),
    (Case("key", "local", "v1", "append", runs=2, tag="zombie"), "after_next_generation"),
    (Case("key", "local", "v1", "overwrite", runs=2, tag="zombie"), "before_commit"),
    (Case("ops", "local", "v2", "append", tag="zombie"), "after_clear"),
    (Case("stage", "local", "v1", "dynamic", tag="zombie"), "after_clear"),
]


def _assert_refused(outcome: BaseException | dict[str, Any] | None) -> None:
    """The zombie committed nothing: its commit was refused, or it was told the task (or the job) had been
    committed by another attempt (its own files deleted), never ``committed``."""
    if isinstance(outcome, BaseException):
        assert isinstance(outcome, CommitProtocolError), f"refused by the protocol, not {outcome!r}"
        return
    assert outcome is not None and outcome["status"] in ("denied", "already_committed"), outcome
    assert (outcome["app_attempt"], outcome["committed_attempt"]) != (0, 1), \
        f"the record returned is the winner's, not the zombie's (attempt 1 of application attempt 0): {outcome}"


def _wake_leaving_nothing(zombie: Zombie, target: str) -> None:
    """Wake *zombie* after its run ended (teardown done): it adds, changes and leaves no file in the target."""
    def files() -> dict[str, int]:
        return {str(p.relative_to(target)): p.stat().st_mtime_ns for p in Path(target).rglob("*") if p.is_file()}

    before = files()
    zombie.wake()
    assert files() == before, "the zombie woken after the teardown left the target as it was"


def _view_of_task_0(dag_id: str, run_id: str):
    from airflow_commit_provider.plugins import app as plugin_app

    model = plugin_app.build_model(dag_id, run_id, "v")
    [stage] = model.summary.stages
    [setup] = model.stages
    return stage.state, next(r for r in model.stages[setup].rows if r.task == 0)


@pytest.mark.parametrize(("case", "wake"), CASES, ids=lambda v: v.dag_id.removeprefix("zombie_")
                         if isinstance(v, Case) else v)
def test_a_zombie_write_try_woken_at_the_worst_moment_commits_nothing(case, wake, airflow_db, zombie_operators):
    target = _target(case, None)
    _calls_log(case.dag_id).unlink(missing_ok=True)
    flag = TEST_WORK / f"fail-{case.dag_id}"
    zombie = ZOMBIES[case.dag_id] = Zombie(wake)
    dag = _dag_of(case, target, factory="tests.airflow.test_zombie_under_airflow.zombie_dag")
    try:
        if wake == "after_clear":   # run 1 fails (task 2 fails both tries) with the zombie stopped; a clear then
            flag.touch()            # starts application attempt 1, whose commit task wakes it
            assert dag.test(logical_date=DAY, run_after=DAY).state == "failed"
            flag.unlink()
        # a clear is the same run again; a key's runs are runs of one interval
        run_after = [DAY] if wake == "after_clear" else [DAY + timedelta(hours=run + 1) for run in range(case.runs)]
        first = dag.test(logical_date=DAY, run_after=run_after[0])
        assert first.state == "success"
        before = _marker(target, verify_files=True)
        if wake in ("before_commit", "after_clear"):   # the view of the run the zombie woke in (read now:
            state, row = _view_of_task_0(case.dag_id, first.run_id)   # dag.test() replaces a run of its date)
            assert (state, row.status) in (("committed", "committed"), ("committed", "recovered")), row
            assert "0.1" in row.failed_attempts and row.committed_attempt != "0.1", \
                f"the zombie's try is shown recorded failed, its retry (or the clear) committed: {row}"
        if wake == "after_run":
            _wake_leaving_nothing(zombie, target)
        for later in run_after[1:]:   # the key's next run of the interval: a new generation of the job
            assert dag.test(logical_date=DAY, run_after=later).state == "success"
        if wake == "after_next_generation":
            _wake_leaving_nothing(zombie, target)
        assert zombie.release.is_set(), f"the zombie was woken ({wake})"

        _assert_refused(zombie.outcome)
        _assert_rows_once(target)
        after = _marker(target, verify_files=True)
        assert after["totals"]["rows"] == TASKS * ROWS
        if case.runs == 1:
            assert after["job_uuid"] == before["job_uuid"], "the zombie changed no commit"
        else:
            assert after["generation"] == before["generation"] + 1, "the next generation stands, untouched"
        calls = _calls(case)
        assert calls[(0, 1)] >= 1 and calls[(0, 2)] >= 1, "the zombie's callable ran, once released, beside its retry's"

    finally:
        zombie.release.set()
        flag.unlink(missing_ok=True)
