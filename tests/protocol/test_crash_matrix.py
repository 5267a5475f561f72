"""Invariants I1-I8 under crashes: a real worker process dies at every injection point, another one recovers.

For each point of :data:`faults.POINTS` the worker runs a whole application attempt (setup, four tasks of which
the last fails once, job commit) after an earlier application attempt committed two tasks; it is killed at the
point (``os._exit`` or SIGKILL). The test then checks what must hold at any moment (no duplicates, target present,
nothing visible before job commit with v1, old data intact until the new data is complete), recovers the way
Airflow would (a DAG-run clear: a new application attempt; or "clear only failed": tasks and commit retried without
setup) and reads the output back row by row.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from airflow_commit_provider.protocol import faults, read_success_marker
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE

from ..conftest import REPO
from . import scenario as sc

MATRIX_POINTS = [p for p in faults.POINTS if not p.startswith("abort_job.")]
#: Points reached once per file (commit_job.mid_move also once per partition directory renamed whole): fire at the
#: 2nd (mid-way), or the 1st for deletions (the old data has 2 files).
MIDWAY = {"commit_task.mid_move": 2, "commit_job.mid_move": 2, "commit_job.mid_delete": 1, "writer.after_file": 2}


def spawn(phase: str, cfg: dict, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(faults.ENV_VAR, None)
    if fault:
        env[faults.ENV_VAR] = fault
    return subprocess.run([sys.executable, "-m", "tests.protocol.scenario", phase, json.dumps(cfg)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)


def expect_killed(proc: subprocess.CompletedProcess, kill: str) -> None:
    code = FAULT_EXIT_CODE if kill == "exit" else -9
    assert proc.returncode == code, f"fault did not fire (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"


def committed_tasks_on_disk(root: str) -> set[int]:
    """Tasks with a commit record, found by globbing the layout (independently of the committer's code)."""
    paths = glob.glob(os.path.join(root, "_temporary", sc.JOB, "*", "_commits", "task_*.json"))
    return {int(os.path.basename(p)[5:10]) for p in paths}


def check_mid_crash(cfg: dict) -> None:
    root, mode = cfg["root"], cfg["mode"]
    assert os.path.isdir(root), "I8: the target must exist at every moment"
    rows = sc.read_rows(root)
    sc.check_no_duplicates(rows)  # I1 at any moment
    old_missing = [rel for rel in sc.OLD_FILES if not os.path.exists(os.path.join(root, rel))]
    if old_missing and mode in ("overwrite", "dynamic"):
        # I8: old data goes only after the new data is complete
        sc.assert_exactly_once(rows, old={(r["row"], str(r["day"])) for r in rows if r["task"] == sc.OLD_TASK})
    planned = glob.glob(os.path.join(root, "_temporary", sc.JOB, "_commit_plan_*.json")) or \
        os.path.exists(os.path.join(root, "_commits", f"{sc.JOB}.json"))
    job_tasks = {r["task"] for r in rows if r["task"] != sc.OLD_TASK}
    if cfg["algorithm"] == 1 and not planned:
        assert not job_tasks, f"I2: tasks {job_tasks} visible before job commit (v1)"
    if not planned:
        # v2 exposes committed tasks only, never an uncommitted or denied attempt
        assert job_tasks <= committed_tasks_on_disk(root), "uncommitted attempt visible"


def recover_and_check(cfg: dict, style: str) -> None:
    root = cfg["root"]
    committed = committed_tasks_on_disk(root)
    job_committed = os.path.exists(os.path.join(root, "_commits", f"{sc.JOB}.json"))
    before = sc.calls(cfg)
    if style == "clear":
        sc.phase_main(cfg, 21)
    else:
        sc.phase_retry(cfg, 31)
    rows = sc.read_rows(root)
    sc.assert_exactly_once(rows, old=sc.old_rows_expected(cfg["mode"]))  # I1, and old data per mode (I8)
    rerun = sc.calls(cfg) - before
    if not (job_committed and style == "clear"):  # a clear after a commit recomputes, by design
        assert not (committed & set(rerun)), f"I5: committed tasks {committed & set(rerun)} ran their code again"
    manifest = read_success_marker(root, verify_files=True)  # I4
    assert {f["path"] for f in manifest["files"]} == {p for p in sc.visible_files(root) if "part-" in p}
    assert manifest["totals"]["rows"] == sc.TASKS * sc.ROWS
    assert not os.path.exists(os.path.join(root, "_temporary")), "job directory left behind"


def make_cfg(tmp_path, algorithm: int, mode: str = "overwrite") -> dict:
    cfg = {"root": str(tmp_path / "out"), "work": str(tmp_path / "work"), "algorithm": algorithm, "mode": mode}
    os.makedirs(cfg["work"])
    if mode != "error":
        sc.write_old_data(cfg["root"])
    return cfg


#: v2 moves files at task commit, so its job commit has no moves to crash in.
NOT_REACHED = {("commit_job.mid_move", 2)}
CASES = [(p, a, k, s) for p in MATRIX_POINTS for a in (1, 2) for k, s in (("exit", "clear"), ("kill", "retry"))
         if (p, a) not in NOT_REACHED]


@pytest.mark.parametrize("point,algorithm,kill,style", CASES, ids=[f"{p}-v{a}-{k}-{s}" for p, a, k, s in CASES])
def test_crash_and_recover(tmp_path, point, algorithm, kill, style):
    cfg = make_cfg(tmp_path, algorithm)
    sc.phase_prior(cfg)
    nth = MIDWAY.get(point, 1)
    expect_killed(spawn("main", cfg, f"{point}={kill}@{nth}"), kill)
    check_mid_crash(cfg)
    recover_and_check(cfg, style)


COMMIT_POINTS = [p for p in MATRIX_POINTS if p.startswith("commit_job.")]


MODE_CASES = [(p, m) for p in COMMIT_POINTS for m in ("append", "dynamic")
              if (p, m) != ("commit_job.mid_delete", "append")]  # append deletes nothing in a first generation


@pytest.mark.parametrize("point,mode", MODE_CASES, ids=[f"{p}-{m}" for p, m in MODE_CASES])
def test_job_commit_crash_other_modes(tmp_path, point, mode):
    cfg = make_cfg(tmp_path, 1, mode)
    sc.phase_prior(cfg)
    expect_killed(spawn("main", cfg, f"{point}=exit@{MIDWAY.get(point, 1)}"), "exit")
    check_mid_crash(cfg)
    recover_and_check(cfg, "retry")


@pytest.mark.parametrize("kill,style", [("exit", "clear"), ("kill", "retry")])
def test_crash_between_partition_directory_renames(tmp_path, kill, style):
    """A fresh target: every partition is new, so the v1 job commit renames each partition directory whole. Killed
    after the first rename, the output shows that partition complete and nothing of the other; the resumed commit
    renames the other one and every row is there once."""
    cfg = make_cfg(tmp_path, 1, "error")
    sc.phase_prior(cfg)
    expect_killed(spawn("main", cfg, f"commit_job.mid_move={kill}@1"), kill)
    check_mid_crash(cfg)
    assert {p.split("/")[0] for p in sc.visible_files(cfg["root"])} == {"day=d0"}
    recover_and_check(cfg, style)
    assert read_success_marker(cfg["root"])["diagnostics"]["directories_renamed"] >= 1


ABORT_POINTS = [p for p in faults.POINTS if p.startswith("abort_job.")]
#: (point, algorithm): v1 keeps no visible commit, so its abort never reaches the point between a v2 record and its
#: visible files
ABORT_CASES = [(p, a) for p in ABORT_POINTS for a in (1, 2) if a == 2 or p != "abort_job.after_task_record"]


@pytest.mark.parametrize("kill", ["exit", "kill"])
@pytest.mark.parametrize(("point", "algorithm"), ABORT_CASES)
def test_abort_crash_leaves_target_as_before(tmp_path, point, kill, algorithm):
    cfg = make_cfg(tmp_path, algorithm, "append")
    before = {rel: open(os.path.join(cfg["root"], rel), "rb").read() for rel in sc.OLD_FILES}
    sc.phase_prior(cfg)  # two tasks committed (with v2 their files are already visible)
    if algorithm == 2:
        assert len(sc.visible_files(cfg["root"])) > len(before)
    expect_killed(spawn("abort", cfg, f"{point}={kill}"), kill)
    result = sc.phase_abort(cfg)  # the teardown's retry
    assert result["state"] in ("aborted", "absent")
    assert sc.all_files(cfg["root"]) == sorted(before), "I7: target must be as it was before the job"
    assert {rel: open(os.path.join(cfg["root"], rel), "rb").read() for rel in before} == before
