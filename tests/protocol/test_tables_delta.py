"""Job commits into a Delta table: one transaction per job generation, exactly once across resumes, clears and
zombies, read back with deltalake's own reader (row by row)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")

from airflow_commit_provider.protocol import faults, read_success_marker  # noqa: E402
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE  # noqa: E402
from airflow_commit_provider.protocol.tables import GenerationSuperseded, SchemaMismatch  # noqa: E402
from airflow_commit_provider.protocol import InvalidOutputSpec, run_task_attempt  # noqa: E402

from ..conftest import REPO  # noqa: E402
from .tables_worker import committer_for, run_job, task_rows  # noqa: E402


def cfg_for(tmp_path, **kw) -> dict:
    return {"format": "delta", "location": str(tmp_path / "events"), "job_id": "events-1", "mode": "append",
            "partition_by": ["day"], "tasks": 3, "rows": 4, "gen": 0, **kw}


def rows(location: str) -> list[tuple[int, int, int]]:
    """Every row of the table's current version, as deltalake reads it: (id, day, gen), sorted."""
    t = pa.table(deltalake.DeltaTable(location).to_pyarrow_table())
    return sorted(zip(t["id"].to_pylist(), t["day"].to_pylist(), t["gen"].to_pylist()))


def expected(tasks: int = 3, n: int = 4, gen: int = 0, base: int = 0) -> list[tuple[int, int, int]]:
    return sorted((base + t * 1000 + i, i % 2, gen) for t in range(tasks) for i in range(n))


def spawn(cfg: dict, fault: str | None = None, **popen: object) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(faults.ENV_VAR, None)
    if fault:
        env[faults.ENV_VAR] = fault
    return subprocess.Popen([sys.executable, "-m", "tests.protocol.tables_worker", json.dumps(cfg)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def run(cfg: dict, fault: str | None = None) -> subprocess.CompletedProcess:
    proc = spawn(cfg, fault)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_job_commit_is_one_delta_transaction(tmp_path):
    cfg = cfg_for(tmp_path)
    manifest = run_job(cfg)
    dt = deltalake.DeltaTable(cfg["location"])
    assert rows(cfg["location"]) == expected()
    assert dt.version() == 0 and dt.metadata().partition_columns == ["day"]
    assert manifest["table"]["version"] == 0 and manifest["table"]["files_added"] == len(manifest["files"])
    assert dt.transaction_version("commit-provider:events-1") == 0
    success = read_success_marker(cfg["location"])
    assert success["table"] == manifest["table"]
    # the table lists exactly the files the manifest lists
    listed = {a["path"] for a in pa.table(dt.get_add_actions(flatten=False)).to_pylist()}
    assert listed == {f["path"] for f in manifest["files"]}
    assert not os.path.exists(os.path.join(cfg["location"], "_temporary"))


def test_nothing_is_visible_before_the_transaction(tmp_path):
    cfg = cfg_for(tmp_path)
    run_job(cfg)
    proc = run(cfg_for(tmp_path, job_id="events-2", gen=1), "table_commit.before=exit")
    assert proc.returncode == FAULT_EXIT_CODE, proc.stderr
    # the second job's files are in the table's directory already, but no version lists them
    assert rows(cfg["location"]) == expected()
    assert deltalake.DeltaTable(cfg["location"]).version() == 0


@pytest.mark.parametrize("point", [
    "commit_job.after_recovery", "commit_job.after_plan", "commit_job.after_withdraw", "commit_job.mid_move",
    "commit_job.after_moves", "commit_job.after_deletes", "table_commit.before", "table_commit.after",
    "commit_job.after_commit_log", "commit_job.after_success", "commit_job.after_cleanup"])
@pytest.mark.parametrize("kill", ["exit", "kill"])
def test_job_commit_killed_at_every_point_then_resumed_commits_once(tmp_path, point, kill):
    cfg = cfg_for(tmp_path, job_id="events-2", gen=1)
    run_job(cfg_for(tmp_path))                           # an earlier job's rows, which must stay
    proc = run(cfg, f"{point}={kill}@2" if point == "commit_job.mid_move" else f"{point}={kill}")
    assert proc.returncode == (FAULT_EXIT_CODE if kill == "exit" else -9), proc.stderr
    visible = rows(cfg["location"])
    assert visible in (expected(), sorted(expected() + expected(gen=1))), "a partial job is visible"
    again = run({**cfg, "phase": "commit"})              # the retry: a new process resumes the commit
    assert again.returncode == 0, again.stderr
    assert rows(cfg["location"]) == sorted(expected() + expected(gen=1))
    dt = deltalake.DeltaTable(cfg["location"])
    assert dt.version() == 1, "the resumed commit made a second transaction"
    assert json.loads(again.stdout)["table"]["version"] == 1
    assert read_success_marker(cfg["location"])["table"]["version"] == 1
    # and once more: committed and cleaned up, nothing changes
    assert run({**cfg, "phase": "commit"}).returncode == 0
    assert deltalake.DeltaTable(cfg["location"]).version() == 1


@pytest.mark.parametrize("mode", ["append", "overwrite", "dynamic"])
def test_clear_after_success_replaces_the_earlier_generation(tmp_path, mode):
    other = cfg_for(tmp_path, job_id="other", gen=9, tasks=1)
    run_job({**other, "mode": "append"})                 # another job's rows (ids 0..3, days 0 and 1)
    cfg = cfg_for(tmp_path, mode=mode)
    first = run_job({**cfg, "gen": 0})
    second = run_job({**cfg, "gen": 1})                  # a clear after success: the next generation
    assert second["generation"] == 1 and second["table"]["version"] == first["table"]["version"] + 1
    kept_other = [] if mode in ("overwrite", "dynamic") else expected(tasks=1, gen=9)
    assert rows(cfg["location"]) == sorted(kept_other + expected(gen=1))
    # the first generation replaced the other job's two files (overwrite, dynamic: both days), the second exactly
    # the first generation's files
    assert first["table"]["files_removed"] == (0 if mode == "append" else 2)
    assert second["table"]["files_removed"] == len(first["files"])


def test_zombie_of_an_older_generation_adds_nothing(tmp_path):
    cfg = cfg_for(tmp_path)
    zombie = spawn(cfg, "table_commit.before=stop")      # stops on the snapshot it checked, before sending
    os.waitpid(zombie.pid, os.WUNTRACED)
    run_job({**cfg, "phase": "commit"})                  # a retry finishes generation 0
    run_job({**cfg, "gen": 1})                           # a clear after success: generation 1
    assert rows(cfg["location"]) == expected(gen=1)
    os.kill(zombie.pid, signal.SIGCONT)
    _out, err = zombie.communicate(timeout=120)
    assert zombie.returncode != 0 and "GenerationSuperseded" in err
    assert rows(cfg["location"]) == expected(gen=1)
    assert deltalake.DeltaTable(cfg["location"]).version() == 1


def test_two_processes_committing_one_generation_add_it_once(tmp_path):
    cfg = cfg_for(tmp_path)
    first = spawn(cfg, "table_commit.before=stop")
    os.waitpid(first.pid, os.WUNTRACED)
    second = run({**cfg, "phase": "commit"})             # passes the same check, commits first
    assert second.returncode == 0, second.stderr
    os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err                    # refused by delta-rs, then finds its generation landed
    assert json.loads(out)["table"]["already_committed"] is True
    assert rows(cfg["location"]) == expected()
    assert deltalake.DeltaTable(cfg["location"]).version() == 0


def test_a_later_job_with_another_schema_fails_before_anything_is_visible(tmp_path):
    cfg = cfg_for(tmp_path)
    run_job(cfg)
    c = committer_for({**cfg, "job_id": "events-2"})
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(task_rows(0, 4, 1, {"gen": pa.array(["x"] * 4)})))
    with pytest.raises(SchemaMismatch, match=r"changed type\(s\) \['gen: int64 -> string'\]"):
        c.commit_job(1)
    assert c.commit_plan(c.job_record()) is None, "the plan was fixed although the schema differs"
    assert rows(cfg["location"]) == expected()
    c.abort_job()
    assert not os.path.exists(os.path.join(cfg["location"], "_temporary"))


def test_mode_error_refuses_a_table_holding_data(tmp_path):
    run_job(cfg_for(tmp_path))
    with pytest.raises(InvalidOutputSpec, match="already holds data"):
        committer_for(cfg_for(tmp_path, job_id="events-2", mode="error")).setup_job()
