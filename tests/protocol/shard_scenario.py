"""Write task instances of several shards each (``operators/shards.py``), run by real worker processes.

Run as ``python -m tests.protocol.shard_scenario JSON``: one try of one task instance (``cfg["map_index"]``,
``cfg["attempt"]``; with ``cfg["shard_commit"] == "together"`` its shards commit as one protocol task) in its own
process, so a fault armed through ``COMMIT_PROVIDER_FAULTS`` kills or pauses a real
process between one shard's commit and the next. The same functions run in-process for the retries.

The job is :mod:`.scenario`'s (same committer, same rows): shard ``s`` of task instance ``i`` is protocol task
``i * shards + s`` and writes ``scenario.task_table(task, attempt)``; every call of a shard's user code is
appended to ``calls.log`` as ``<task> <attempt>`` (:func:`scenario.calls` counts them per task).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from airflow_commit_provider.operators.shards import run_shards, run_shards_together
from airflow_commit_provider.protocol import faults

from . import scenario as sc

REPO = Path(__file__).resolve().parent.parent.parent


def run_instance(cfg: dict[str, Any], map_index: int, attempt: int) -> dict[str, Any]:
    """One try of task instance *map_index*: every shard not committed yet runs its user code and commits."""
    def produce(shard: int, task: int, writer: Any) -> None:
        sc._record_call(cfg, task, attempt)
        writer.write(sc.task_table(task, attempt))
        if task in cfg.get("fail_tasks", ()) and attempt in cfg.get("fail_attempts", (attempt,)):
            raise RuntimeError(f"user code of task {task} attempt {attempt} failed")

    if cfg.get("shard_commit") == "together":   # the task instance is one protocol task
        return run_shards_together(sc.committer(cfg), map_index, cfg["shards"], attempt, produce,
                                   threads=cfg.get("shard_threads", 1)).to_dict()
    return run_shards(lambda: sc.committer(cfg), map_index, cfg["shards"], attempt, produce,
                      threads=cfg.get("shard_threads", 1)).to_dict()


def committed_tasks(cfg: dict[str, Any]) -> set[int]:
    """Tasks with a commit record in the current application attempt, read through the committer's public API."""
    committer = sc.committer(cfg)
    tasks = range(cfg["instances"] * cfg["shards"])
    return {t for t in tasks if committer.recover_task(t) is not None}


def spawn(cfg: dict[str, Any], map_index: int, attempt: int, fault: str | None = None,
          wait: bool = True) -> subprocess.CompletedProcess | subprocess.Popen:
    """Run one try in a worker process; *wait* False returns the running process (for a paused zombie)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(faults.ENV_VAR, None)
    if fault:
        env[faults.ENV_VAR] = fault
    args = [sys.executable, "-m", "tests.protocol.shard_scenario",
            json.dumps({**cfg, "map_index": map_index, "attempt": attempt})]
    if wait:
        return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


#: The fault points a task instance's shards reach (the task side of :data:`faults.POINTS`).
SHARD_POINTS = tuple(p for p in faults.POINTS if p.split(".")[0] in ("setup_task", "writer", "commit_task",
                                                                    "recover_task"))


def crash_cell(cfg: dict[str, Any], point: str, kill: str) -> str:
    """One cell of the shard fault matrix: ``pass``, ``n/a`` (the point is not on this algorithm's path) or
    ``FAIL: ...``.

    Application attempt 0 commits shards 0 and 1 of task instance 0 (of 2 instances x 4 shards), then its driver
    is lost; the run is cleared (application attempt 1) and try 2 of instance 0 runs in a worker process that is
    killed (``exit``: ``os._exit``; ``kill``: SIGKILL) the second time it reaches *point*: after shards 0 and 1
    were recovered, and, for the points of a task commit, after shard 2 committed. Its retry (try 3) must call the
    user code of exactly the shards that are not committed, never of 0 and 1; instance 1 runs; the job commit
    must then hold every row once and leave nothing under ``_temporary``.
    """
    cfg = {**cfg, "shards": 4, "instances": 2, "shard_threads": 1}
    os.makedirs(cfg["work"], exist_ok=True)
    committer = sc.committer(cfg)
    committer.setup_job()
    sc.run_task(cfg, 0, 1)
    sc.run_task(cfg, 1, 1)
    committer.setup_job()
    proc = spawn(cfg, 0, 2, f"{point}={kill}@2")
    if proc.returncode == 0:
        return "n/a"
    if proc.returncode != (faults.FAULT_EXIT_CODE if kill == "exit" else -9):
        return f"FAIL: worker rc={proc.returncode}: {proc.stderr[-300:]}"
    committed = committed_tasks(cfg)
    if not {0, 1} <= committed:
        return f"FAIL: the tasks of application attempt 0 were not recovered: {sorted(committed)}"
    before = sc.calls(cfg)
    run_instance(cfg, 0, 3)
    ran = set(sc.calls(cfg) - before)
    if ran != set(range(4)) - committed:
        return f"FAIL: the retry ran {sorted(ran)}, committed before it: {sorted(committed)}"
    run_instance(cfg, 1, 1)
    sc.committer(cfg).commit_job(8)
    sc.assert_exactly_once(sc.read_rows(cfg["root"]), tasks=8, old=set())
    leftovers = [f for f in sc.all_files(cfg["root"]) if f.startswith("_temporary")]
    return f"FAIL: left {leftovers[:3]}" if leftovers else "pass"


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    Path(config["work"]).mkdir(parents=True, exist_ok=True)
    try:
        result = run_instance(config, config["map_index"], config["attempt"])
    except Exception as exc:   # reported, as Airflow would log a failed try
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(1)
    print(json.dumps({"ok": True, "result": result}))
