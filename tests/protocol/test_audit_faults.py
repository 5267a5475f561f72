"""The audit step under crashes and zombies: a real worker process dies at each of the audit's fault points
(:data:`faults.AUDIT_POINTS`), or pauses there (SIGSTOP) and wakes after the rest of the lifecycle moved on.

A kill around the audit (after its recovery, before its record, after its record) and after the commit fixed its
plan is recovered as Airflow would (a clear of the run, or "clear only failed"): the output then holds every row
once, the marker tells the truth, and ``_SUCCESS`` carries the verdict of the audit the commit took. A zombie audit
try woken after a newer try wrote its verdict writes a record nobody takes (the newest wins); one woken after the
job committed takes its record back and changes nothing (no ``_temporary`` re-created in the committed output).
The full cross product (local disk and S3, v1, v2, magic) is ``python -m tests.fault_matrix --only audit``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from airflow_commit_provider.protocol import faults, read_success_marker

from ..conftest import REPO
from . import scenario as sc
from .dedup_tables import resume, wait_stopped
from .test_crash_matrix import check_mid_crash, expect_killed, make_cfg, recover_and_check, spawn

CASES = [(p, a, k, s) for p in (*faults.AUDIT_POINTS, "commit_job.after_plan") for a in (1, 2)
         for k, s in (("exit", "clear"), ("kill", "retry"))]


@pytest.mark.parametrize("point,algorithm,kill,style", CASES, ids=[f"{p}-v{a}-{k}-{s}" for p, a, k, s in CASES])
def test_a_kill_around_the_audit_is_recovered_to_one_commit_with_its_verdict(tmp_path, point, algorithm, kill, style):
    cfg = {**make_cfg(tmp_path, algorithm), "audit": True}
    sc.phase_prior(cfg)
    expect_killed(spawn("main", cfg, f"{point}={kill}"), kill)
    check_mid_crash(cfg)   # with v1 nothing of the job is visible before its commit, audited or not
    recover_and_check(cfg, style)
    verdict = read_success_marker(cfg["root"])["audit"]
    assert verdict["passed"] and verdict["spec"] == sc.scenario_audit(algorithm).digest()
    assert any(c["check"].startswith("data: ") for c in verdict["checks"]) == (algorithm == 1)
    assert set(verdict["tasks"]) == {str(t) for t in range(sc.TASKS)}


def _paused_audit(cfg: dict, attempt: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), faults.ENV_VAR: "audit.before_record=stop"}
    proc = subprocess.Popen([sys.executable, "-m", "tests.protocol.scenario", "audit",
                             __import__("json").dumps({**cfg, "attempt": attempt})], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_stopped(proc)
    return proc


def test_zombie_audits_woken_late_change_nothing(tmp_path):
    from airflow_commit_provider.protocol.audit.record import latest_audit

    cfg = {**make_cfg(tmp_path, 1, mode="append"), "audit": True}
    c = sc.committer(cfg)
    c.setup_job()
    for task in range(sc.TASKS):
        sc.run_task(cfg, task, 1)
    early = _paused_audit(cfg, 1)   # judged, then paused before its record: a zombie
    late = _paused_audit(cfg, 2)
    from airflow_commit_provider.protocol.audit.run import run_audit

    assert run_audit(c.job, sc.scenario_audit(1), sc.TASKS, 3).passed   # the retry that Airflow sees
    resume(early)   # wakes before the commit: writes try 1's record, which the newest (try 3) outranks
    assert latest_audit(c.job, c.job.require_job().job_uuid).attempt == 3
    manifest = sc.audit_and_commit(cfg, 4)
    assert manifest["audit"]["ref"] == "0.4"
    os.kill(late.pid, __import__("signal").SIGCONT)   # wakes after the commit: takes its record back
    out, err = late.communicate(timeout=120)
    assert late.returncode != 0 and "JobAlreadyCommitted" in err, err[-2000:]
    assert not os.path.exists(os.path.join(cfg["root"], "_temporary")), "a zombie audit re-created _temporary"
    sc.assert_exactly_once(sc.read_rows(cfg["root"]), old=sc.old_rows_expected("append"))
    assert sc.assert_markers_tell_truth(cfg["root"]) == 1
