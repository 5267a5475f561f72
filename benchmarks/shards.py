"""Many shards per task instance against one task instance per write, in a real scheduler (LocalExecutor or
CeleryExecutor)::

    .venv/bin/python -m benchmarks.shards                        # 1,000 writes; 100 task instances x 10 shards
    .venv/bin/python -m benchmarks.shards --writes 200 --shards 10 --parallelism 4
    .venv/bin/python -m benchmarks.shards --executor CeleryExecutor --without-instances

LocalExecutor (the default): one deployment (``tests/deployment/conftest.py``: api-server, scheduler, dag-processor,
triggerer, SQLite, LocalExecutor with ``--parallelism`` task slots), targets on the local disk. CeleryExecutor: the
deployment of the Celery suite (``tests/deployment/distributed.py``: PostgreSQL, Redis, moto's S3 server, two Celery
workers of ``--parallelism / 2`` processes each that share only S3), targets on S3 through its connection
``commit_s3``, the plain operator's writes included (pyarrow through the same s3fs file system). Either runs, one
after another, the same *writes* one-file writes (``benchmarks/shard_dags/shard_bench_dags.py``): a plain mapped
``PythonOperator`` writing *shards* files per task instance straight into the target (the baseline), the commit
stage with ``shards_per_task=shards``, the stage with one write per task instance, and the plain operator with one
write per task instance (``--without-instances`` leaves the last two out). Wall time is the DAG
run's ``end_date - queued_at`` as the scheduler records it. Prints the table, with each figure's ratio to the
baseline, and checks every output: the stage's ``_SUCCESS`` lists *writes* tasks and files, the plain target holds
*writes* files. The figures go to ``--json`` (``benchmarks/results.json``), key ``shards``, per executor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DAG_FILE = Path(__file__).with_name("shard_dags") / "shard_bench_dags.py"
S3_PREFIX = "shards"  # under the Celery deployment's bucket


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def run(dep, dag_id: str, run_id: str, writes: int, timeout: float, fs: Any = None, root: str | None = None) -> dict:
    """One DAG run, its output checked: on the local disk under ``dep.root``, or with *fs* (s3fs) under
    ``s3://<root>``."""
    from airflow_commit_provider.protocol import read_success_marker

    dep.trigger(dag_id, run_id)
    state = dep.wait_run(dag_id, run_id, timeout=timeout)
    if state != "success":
        raise RuntimeError(f"{dag_id}/{run_id}: {state}")
    info = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
    if fs is None:
        target = dep.root / dag_id / run_id
        marker_root: Any = str(target)
        files = len(list(target.glob("part-*.parquet")))
    else:
        marker_root = f"s3://{root}/{dag_id}/{run_id}"
        files = len(fs.glob(f"{root}/{dag_id}/{run_id}/part-*.parquet"))
    if dag_id.startswith("sb_stage"):
        totals = read_success_marker(marker_root, fs=fs, verify_files=True)["totals"]
        assert (totals["tasks"], totals["files"], totals["rows"]) == (writes, writes, writes * 100), totals
    else:
        assert files == writes, (marker_root, files)
    return {"dag_id": dag_id, "wall_s": _ts(info["end_date"]) - _ts(info["queued_at"]),
            "load1": os.getloadavg()[0]}


def start_celery(parallelism: int, env: dict[str, str]):
    """The Celery suite's deployment, started, with two workers sharing *parallelism* task slots and the targets
    under ``s3://<its bucket>/shards`` through its connection."""
    from tests.conftest import SESSION_DIR
    from tests.deployment.distributed import CONN_ID, CeleryDeployment, start_deployment

    def make(n: int) -> CeleryDeployment:
        dep = CeleryDeployment(SESSION_DIR / f"shard-bench-celery-{n}", workers=2, concurrency=parallelism // 2,
                               parallelism=parallelism, extra_env=dict(env), dag_files=(DAG_FILE,))
        dep.extra_env.update({"SHARD_BENCH_ROOT": f"s3://{dep.bucket}/{S3_PREFIX}", "SHARD_BENCH_CONN_ID": CONN_ID})
        return dep

    return start_deployment(make)


def record(path: Path, executor: str, doc: dict[str, Any]) -> None:
    """Set ``shards.<executor>`` of the JSON object in *path*, keeping every other key (the other executor's)."""
    whole = json.loads(path.read_text()) if path.exists() else {}
    whole.setdefault("shards", {})[executor] = doc
    path.write_text(json.dumps(whole, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--executor", choices=("LocalExecutor", "CeleryExecutor"), default="LocalExecutor")
    ap.add_argument("--writes", type=int, default=1000, help="one-file writes per DAG run")
    ap.add_argument("--shards", type=int, default=10, help="shards per task instance (writes per plain task)")
    ap.add_argument("--parallelism", type=int, default=4,
                    help="task slots (LocalExecutor's; on Celery two workers of half as many processes each)")
    ap.add_argument("--timeout", type=float, default=7200, help="seconds a run may take")
    ap.add_argument("--without-instances", action="store_true",
                    help="only the sharded shape and its baseline (one task instance per write takes Airflow's "
                         "floor per write: ~1 s of a slot each)")
    ap.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results.json")
    args = ap.parse_args()
    if args.writes % args.shards:
        ap.error("--writes must be a multiple of --shards")
    env = {"SHARD_BENCH_WRITES": str(args.writes), "SHARD_BENCH_SHARDS": str(args.shards)}
    n, k = args.writes // args.shards, args.shards
    shapes = [("sb_plain_shards", f"plain PythonOperator, {n} x {k} files"),
              ("sb_stage_shards", f"commit_stage, {n} task instances x {k} shards"),
              ("sb_stage_instances", f"commit_stage, {args.writes} task instances"),
              ("sb_plain_instances", f"plain PythonOperator, {args.writes} task instances")]
    if args.without_instances:
        shapes = shapes[:2]
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    started = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    results = {}
    if args.executor == "LocalExecutor":
        from tests.conftest import SESSION_DIR
        from tests.deployment.conftest import make_deployment

        dags = SESSION_DIR / "shard-bench-dags"
        dags.mkdir()
        shutil.copy(DAG_FILE, dags / DAG_FILE.name)
        dep = make_deployment(dags, AIRFLOW__CORE__PARALLELISM=str(args.parallelism), **env)
        setting = (f"LocalExecutor, {args.parallelism} slots, SQLite", "local disk")
        try:
            dep.start()
            for dag_id, _ in shapes:
                results[dag_id] = run(dep, dag_id, "bench", args.writes, args.timeout)
                print(f"{dag_id}: {results[dag_id]['wall_s']:.1f} s", flush=True)
        finally:
            dep.stop()
    else:
        if args.parallelism < 2 or args.parallelism % 2:
            ap.error("--parallelism must be even on CeleryExecutor (two workers share it)")
        dep = start_celery(args.parallelism, env)
        setting = (f"CeleryExecutor, 2 workers x {args.parallelism // 2}, PostgreSQL, Redis",
                   "S3 (moto's server)")
        try:
            fs = dep.s3()
            for dag_id, _ in shapes:
                results[dag_id] = run(dep, dag_id, "bench", args.writes, args.timeout, fs=fs,
                                      root=f"{dep.bucket}/{S3_PREFIX}")
                print(f"{dag_id}: {results[dag_id]['wall_s']:.1f} s", flush=True)
        finally:
            dep.stop()
    base = results["sb_plain_shards"]["wall_s"]
    print(f"\n{args.writes:,} one-file writes (100 rows each, {setting[1]}), {setting[0]}; {os.cpu_count()} CPUs")
    print(f"{'shape':52}{'wall s':>9}{'x plain ' + str(n) + 'x' + str(k):>16}{'load':>7}")
    for dag_id, label in shapes:
        r = results[dag_id]
        print(f"{label:52}{r['wall_s']:>9.1f}{r['wall_s'] / base:>16.2f}{r['load1']:>7.1f}")
    ratio = results["sb_stage_shards"]["wall_s"] / base
    print(f"\ntarget: commit_stage at {n} x {k} within 1.5x of the plain operator: {ratio:.2f}x "
          f"({'met' if ratio <= 1.5 else 'NOT met'})")
    head = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False,
                          cwd=REPO).stdout.strip()
    record(args.json, args.executor, {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_at_start": load_at_start}, "commit": head, "started": started,
        "deployment": setting[0], "storage": setting[1], "writes": args.writes, "shards": k,
        "parallelism": args.parallelism,
        "rows": [{"dag_id": dag_id, "shape": label, "wall_s": round(results[dag_id]["wall_s"], 3),
                  "x_plain": round(results[dag_id]["wall_s"] / base, 3), "load1": round(results[dag_id]["load1"], 2)}
                 for dag_id, label in shapes],
        "stage_x_plain": round(ratio, 3)})
    print(f"written to {args.json} (shards.{args.executor})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
