"""Two DAG runs of one job at once (one ``job_key`` for both): refused, never interleaved, never stuck (issue 31).

Run A is a real ``dag.test()`` in its own process, paused (SIGSTOP, at the ``setup_job.after_app_attempt`` fault
point) right after its setup claimed an application attempt; run B of the same job then runs from start to end
in this process while A is paused in the middle; then A resumes and ends; then a third run C runs alone. Before
the fix B's setup opened the next application attempt and both runs' writes used it (the newest) with the same
try numbers, so their files collided and every later run of the job failed until a hand cleanup.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import DAGS_FOLDER, REPO, TEST_ROOT
from ..protocol import scenario as sc
from ..support import resume, wait_stopped
from .test_dag_test import ROWS, dags, states, target  # noqa: F401  (dags: the fixture)

pytestmark = pytest.mark.airflow

DAY = datetime(2024, 5, 1, tzinfo=timezone.utc)


def start_run(dag_id: str, logical_date: datetime, faults: str) -> subprocess.Popen:
    """``dag.test()`` of *dag_id* in a process of its own, with *faults* armed there only."""
    code = f"""
        import sys
        from datetime import datetime
        sys.path.insert(0, {str(DAGS_FOLDER)!r})
        import commit_test_dags
        when = datetime.fromisoformat({logical_date.isoformat()!r})
        dr = commit_test_dags.{dag_id}.test(logical_date=when, run_after=when)
        print("RUN", dr.run_id, dr.state)
    """
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO), "COMMIT_PROVIDER_FAULTS": faults})


def run(dag, day: int):
    """``dag.test()`` of the run of logical date (and run after) *day* of May 2024: the same *day* again re-runs
    (clears) that very DAG run."""
    when = DAY + timedelta(days=day - 1)
    return dag.test(logical_date=when, run_after=when)


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_run_overlapping_another_of_its_job_is_refused_and_the_next_run_commits(dags, capfd, mode):
    dag_id = f"ct_overlap_{mode}"
    dag = getattr(dags, dag_id)
    a = start_run(dag_id, DAY, "setup_job.after_app_attempt=stop")
    wait_stopped(a)   # A's setup has claimed its application attempt; A's run is running
    try:
        b = run(dag, 2)
    finally:
        code, out, err = resume(a)
    assert code == 0 and " success" in out, f"run A:\n{out}\n{err}"
    a_run = out.split()[-2]
    b_states = states(b)
    assert b.state == "failed" and b_states["stage.setup[-1]"] == "failed", b_states
    assert {s for k, s in b_states.items() if k.startswith("stage.write")} == {"upstream_failed"}, b_states
    log = capfd.readouterr()
    refusal = next(line for line in (log.out + log.err).splitlines()
                   if "AirflowFailException: OverlappingRun:" in line)
    purge = f"airflow-commit abort file://{target(dag_id)} --job"   # the command line's, for a dead run
    assert a_run in refusal and "max_active_runs=1" in refusal and purge in refusal, refusal
    # A is live in Airflow's eyes, which the command refuses without --force (it would fail A's live tasks)
    assert "--purge --force" in refusal, refusal
    sc.assert_exactly_once(sc.read_rows(target(dag_id)), tasks=2, per_task=ROWS)   # A's rows, once

    cleared = run(dag, 2)   # the refusal's advice: once A has ended, clear B; its setup takes the job over
    assert cleared.run_id == b.run_id and cleared.state == "success", states(cleared)
    c = run(dag, 3)         # and a third run, alone
    assert c.state == "success", states(c)
    sc.assert_exactly_once(sc.read_rows(target(dag_id)), tasks=2, per_task=ROWS)   # each run replaced the last
    manifest = read_success_marker(target(dag_id), verify_files=True)
    assert manifest["labels"]["run_id"] == c.run_id and manifest["generation"] == 2
    assert not os.path.exists(os.path.join(TEST_ROOT, dag_id, "_temporary"))
