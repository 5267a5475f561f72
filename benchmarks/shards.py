"""Many shards per task instance against one task instance per write, in a real scheduler (LocalExecutor)::

    .venv/bin/python -m benchmarks.shards                        # 1,000 writes; 100 task instances x 10 shards
    .venv/bin/python -m benchmarks.shards --writes 200 --shards 10 --parallelism 4

One deployment (``tests/deployment/conftest.py``: api-server, scheduler, dag-processor, triggerer, SQLite,
LocalExecutor with ``--parallelism`` task slots) runs, one after another, the same *writes* one-file writes
(``benchmarks/shard_dags/shard_bench_dags.py``): a plain mapped ``PythonOperator`` writing *shards* files per task
instance straight into the target (the baseline), the commit stage with ``shards_per_task=shards``, the stage
with one write per task instance, and the plain operator with one write per task instance (``--without-instances``
leaves the last two out). Wall time is the DAG
run's ``end_date - queued_at`` as the scheduler records it. Prints the table, with each figure's ratio to the
baseline, and checks every output: the stage's ``_SUCCESS`` lists *writes* tasks and files, the plain target holds
*writes* files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DAG_FILE = Path(__file__).with_name("shard_dags") / "shard_bench_dags.py"


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def run(dep, dag_id: str, run_id: str, writes: int, timeout: float) -> dict:
    from airflow_commit_provider.protocol import read_success_marker

    dep.trigger(dag_id, run_id)
    state = dep.wait_run(dag_id, run_id, timeout=timeout)
    if state != "success":
        raise RuntimeError(f"{dag_id}/{run_id}: {state}")
    info = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
    target = dep.root / dag_id / run_id
    if dag_id.startswith("sb_stage"):
        totals = read_success_marker(str(target), verify_files=True)["totals"]
        assert (totals["tasks"], totals["files"], totals["rows"]) == (writes, writes, writes * 100), totals
    else:
        assert len(list(target.glob("part-*.parquet"))) == writes
    return {"dag_id": dag_id, "wall_s": _ts(info["end_date"]) - _ts(info["queued_at"]),
            "load1": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=1000, help="one-file writes per DAG run")
    ap.add_argument("--shards", type=int, default=10, help="shards per task instance (writes per plain task)")
    ap.add_argument("--parallelism", type=int, default=4, help="LocalExecutor task slots")
    ap.add_argument("--timeout", type=float, default=7200, help="seconds a run may take")
    ap.add_argument("--without-instances", action="store_true",
                    help="only the sharded shape and its baseline (one task instance per write takes Airflow's "
                         "floor per write: ~1 s of a slot each)")
    args = ap.parse_args()
    if args.writes % args.shards:
        ap.error("--writes must be a multiple of --shards")
    from tests.conftest import SESSION_DIR
    from tests.deployment.conftest import make_deployment

    dags = SESSION_DIR / "shard-bench-dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    dep = make_deployment(dags, AIRFLOW__CORE__PARALLELISM=str(args.parallelism),
                          SHARD_BENCH_WRITES=str(args.writes), SHARD_BENCH_SHARDS=str(args.shards))
    n, k = args.writes // args.shards, args.shards
    shapes = [("sb_plain_shards", f"plain PythonOperator, {n} x {k} files"),
              ("sb_stage_shards", f"commit_stage, {n} task instances x {k} shards"),
              ("sb_stage_instances", f"commit_stage, {args.writes} task instances"),
              ("sb_plain_instances", f"plain PythonOperator, {args.writes} task instances")]
    if args.without_instances:
        shapes = shapes[:2]
    results = {}
    try:
        dep.start()
        for dag_id, _ in shapes:
            results[dag_id] = run(dep, dag_id, "bench", args.writes, args.timeout)
            print(f"{dag_id}: {results[dag_id]['wall_s']:.1f} s", flush=True)
    finally:
        dep.stop()
    base = results["sb_plain_shards"]["wall_s"]
    print(f"\n{args.writes:,} one-file writes (100 rows each, local disk), LocalExecutor, {args.parallelism} slots, "
          f"SQLite; {os.cpu_count()} CPUs")
    print(f"{'shape':52}{'wall s':>9}{'x plain ' + str(n) + 'x' + str(k):>16}{'load':>7}")
    for dag_id, label in shapes:
        r = results[dag_id]
        print(f"{label:52}{r['wall_s']:>9.1f}{r['wall_s'] / base:>16.2f}{r['load1']:>7.1f}")
    ratio = results["sb_stage_shards"]["wall_s"] / base
    print(f"\ntarget: commit_stage at {n} x {k} within 1.5x of the plain operator: {ratio:.2f}x "
          f"({'met' if ratio <= 1.5 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
