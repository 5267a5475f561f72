"""The commit stage in a real scheduler: wrapping cost (LocalExecutor and CeleryExecutor, side by side in one run)
and a 1,000-task stage on Celery.

    .venv/bin/python -m benchmarks.distributed                    # both parts, figures to results_distributed.json
    .venv/bin/python -m benchmarks.distributed --only wrap --reps 3 --sizes 0,1,10,30
    .venv/bin/python -m benchmarks.distributed --only scale --scale-tasks 1000

Each deployment is started from nothing by ``tests/deployment/distributed.py`` (PostgreSQL metadata DB, moto's S3
server, api-server, scheduler, dag-processor, triggerer; Celery adds Redis and two workers that share only S3).

Wrapping cost: ``wc_plain_<s>`` (mapped PythonOperator: wait *s* seconds, write one Parquet file to S3) against
``wc_stage_<s>`` (``commit_stage``: setup, the same mapped write, commit, abort teardown), 4 tasks, 4 task slots
on either executor. Wall time is the DAG run's ``end_date - queued_at`` as the scheduler records it (trigger to
success, independent of how often this script polls); the table gives medians and the stage's breakdown.

Scale: ``scale_<alg>`` with 1,000 mapped tasks on 2 Celery workers of 5 processes each (10 task slots: "ten
workers' worth"); job commit time and S3 requests from the commit's manifest, the commit-status page's load time
(HTML and JSON, medians of 3), and the memory (PSS, children included) of every component, sampled every 2 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.deployment.distributed import CeleryDeployment, start_deployment  # noqa: E402

DAG_FILE = Path(__file__).with_name("distributed_dags.py")
OUT = Path(__file__).with_name("results_distributed.json")


def ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


class MemorySampler(threading.Thread):
    """Peak PSS per component over the sampler's life."""

    def __init__(self, dep: CeleryDeployment) -> None:
        super().__init__(daemon=True)
        self.dep, self.peak, self.stop_flag = dep, {}, threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            for name, mib in self.dep.memory().items():
                self.peak[name] = max(self.peak.get(name, 0.0), mib)
            self.stop_flag.wait(2)

    def finish(self) -> dict[str, float]:
        self.stop_flag.set()
        self.join(timeout=30)
        return dict(self.peak)


def run_once(dep: CeleryDeployment, dag_id: str, run_id: str, timeout: float = 3600) -> dict[str, Any]:
    dep.trigger(dag_id, run_id)
    state = dep.wait_run(dag_id, run_id, timeout=timeout)
    run = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
    if state != "success":
        raise RuntimeError(f"{dag_id}/{run_id}: {state}: {dep.ti_states(dag_id, run_id)}")
    tis: list[dict] = []
    while True:  # every task instance, 100 a page (the API's limit)
        page = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                       params={"limit": 100, "offset": len(tis)})["task_instances"]
        tis += page
        if len(page) < 100:
            break
    queued = ts(run["queued_at"])
    out: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id, "wall_s": ts(run["end_date"]) - queued}
    spans: dict[str, list[tuple[float, float]]] = {}
    for t in tis:
        if t["start_date"] and t["end_date"]:
            spans.setdefault(t["task_id"].split(".")[-1], []).append((ts(t["start_date"]) - queued,
                                                                      ts(t["end_date"]) - queued))
    out["tasks"] = {k: {"first_start": round(min(s for s, _ in v), 2), "last_end": round(max(e for _, e in v), 2),
                        "median_duration": round(statistics.median(e - s for s, e in v), 2), "n": len(v)}
                    for k, v in spans.items()}
    return out


def bench_wrap(executor: str, sizes: list[float], reps: int, base: Path) -> tuple[list[dict], dict[str, float]]:
    env = {"COMMIT_BENCH_SIZES": json.dumps(sizes), "COMMIT_BENCH_TASKS": "4", "COMMIT_BENCH_SCALE_TASKS": "1"}
    name, _, variant = executor.partition(":")
    if variant == "preload":  # the workers import the heavy modules once, before forking (celery_preload.py)
        env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] = "benchmarks.celery_preload.CONFIG"
    dep = start_deployment(lambda n: CeleryDeployment(base / f"{executor.replace(':', '-')}-{n}", workers=2,
                                                      concurrency=2, parallelism=4, extra_env=env,
                                                      dag_files=(DAG_FILE,), executor=name))
    rows = []
    try:
        sampler = MemorySampler(dep)
        sampler.start()
        for kind in ("plain", "stage"):  # the first runs after a start wait for the DAGs' first parse: not timed
            run_once(dep, f"wc_{kind}_{sizes[0]}", "warmup")
        for rep in range(reps):
            for s in sizes:
                for kind in ("plain", "stage"):
                    r = run_once(dep, f"wc_{kind}_{s}", f"r{rep}")
                    rows.append({"executor": executor, "size_s": s, "kind": kind, "rep": rep, **r})
                    print(f"  {executor:23} {kind:6} {s:>5} s  rep {rep}: {r['wall_s']:.2f} s", flush=True)
        memory = sampler.finish()
    finally:
        dep.stop()
    return rows, memory


def summarize_wrap(rows: list[dict]) -> list[dict]:
    out = []
    for ex in dict.fromkeys(r["executor"] for r in rows):
        for s in dict.fromkeys(r["size_s"] for r in rows):
            walls = {k: [r["wall_s"] for r in rows if r["executor"] == ex and r["size_s"] == s and r["kind"] == k]
                     for k in ("plain", "stage")}
            if not walls["plain"] or not walls["stage"]:
                continue
            plain, stage = statistics.median(walls["plain"]), statistics.median(walls["stage"])
            stage_runs = [r for r in rows if r["executor"] == ex and r["size_s"] == s and r["kind"] == "stage"]
            breakdown = {}
            for task in ("setup", "write", "commit", "abort"):
                durations = [r["tasks"][task]["median_duration"] for r in stage_runs if task in r["tasks"]]
                if durations:
                    breakdown[f"{task}_s"] = round(statistics.median(durations), 2)
            out.append({"executor": ex, "task_seconds": s, "plain_s": round(plain, 2), "stage_s": round(stage, 2),
                        "added_s": round(stage - plain, 2), "added_pct": round(100 * (stage - plain) / plain, 1),
                        "runs": len(walls["stage"]), "plain_all": [round(w, 2) for w in walls["plain"]],
                        "stage_all": [round(w, 2) for w in walls["stage"]], "stage_task_durations": breakdown})
    return out


def bench_scale(tasks: int, algorithms: list[str], base: Path, workers: int = 2, concurrency: int = 5,
                preload: bool = True) -> dict:
    env = {"COMMIT_BENCH_SIZES": "[0]", "COMMIT_BENCH_TASKS": "1", "COMMIT_BENCH_SCALE_TASKS": str(tasks)}
    if preload:
        env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] = "benchmarks.celery_preload.CONFIG"
    dep = start_deployment(lambda n: CeleryDeployment(base / f"scale-{n}", workers=workers, concurrency=concurrency,
                                                      parallelism=workers * concurrency, extra_env=env,
                                                      dag_files=(DAG_FILE,)))
    results: dict[str, Any] = {"tasks": tasks, "workers": workers, "concurrency_per_worker": concurrency,
                               "preload": preload, "runs": []}
    try:
        idle = dep.memory()
        sampler = MemorySampler(dep)
        sampler.start()
        for alg in algorithms:
            dag_id = f"scale_{alg}"
            t0 = time.time()
            r = run_once(dep, dag_id, "scale", timeout=7200)
            print(f"  scale {alg}: {r['wall_s']:.1f} s trigger to success ({time.time() - t0:.1f} s seen)", flush=True)
            value = dep.api("GET", f"/dags/{dag_id}/dagRuns/scale/taskInstances/stage.commit/xcomEntries/"
                                   "return_value")["value"]
            summary = value if isinstance(value, dict) else json.loads(value)
            reqs = summary["diagnostics"].get("requests", {})
            page, api = [], []
            for _ in range(3):
                for url, sink in ((f"/commit-status/dags/{dag_id}/runs/scale", page),
                                  (f"/commit-status/api/dags/{dag_id}/runs/scale", api)):
                    t = time.perf_counter()
                    resp = dep.session.get(dep.base + url, timeout=300)
                    sink.append(time.perf_counter() - t)
                    assert resp.status_code == 200, resp.text[:500]
            commit = r["tasks"]["commit"]
            results["runs"].append({
                "algorithm": alg, "wall_s": round(r["wall_s"], 1), "write_tasks": r["tasks"]["write"]["n"],
                "write_phase_s": round(r["tasks"]["write"]["last_end"] - r["tasks"]["write"]["first_start"], 1),
                "commit_task_s": round(commit["last_end"] - commit["first_start"], 2),
                "job_commit_durations_s": summary.get("durations"),
                "requests": reqs, "requests_total": sum(sum(v.values()) for v in reqs.values()),
                "bytes_copied": summary["diagnostics"].get("bytes_copied"),
                "totals": summary["totals"],
                "status_page_s": round(statistics.median(page), 3), "status_json_s": round(statistics.median(api), 3),
                "task_breakdown": r["tasks"]})
        results["memory_peak_mib"] = sampler.finish()
        results["memory_idle_mib"] = idle
    finally:
        dep.stop()
    return results


def print_wrap(summary: list[dict]) -> None:
    print("\nwrapping cost: 4 mapped write tasks, 4 slots, wall time trigger -> success (medians)")
    print(f"{'executor':23} {'task s':>6} {'plain s':>8} {'stage s':>8} {'added s':>8} {'added %':>8}   "
          "stage task durations (setup/write/commit/abort)")
    for r in summary:
        b = r["stage_task_durations"]
        print(f"{r['executor']:23} {r['task_seconds']:>6} {r['plain_s']:>8.2f} {r['stage_s']:>8.2f} "
              f"{r['added_s']:>8.2f} {r['added_pct']:>7.1f}%   "
              f"{b.get('setup_s')}/{b.get('write_s')}/{b.get('commit_s')}/{b.get('abort_s')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("wrap", "scale"), default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="0,1,10,30")
    ap.add_argument("--executors", default="LocalExecutor,CeleryExecutor,CeleryExecutor:preload")
    ap.add_argument("--scale-tasks", type=int, default=1000)
    ap.add_argument("--scale-algorithms", default="v1,magic")
    ap.add_argument("--scale-concurrency", type=int, default=5, help="per worker (2 workers)")
    ap.add_argument("--no-preload", action="store_true", help="scale run without celery_preload")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    results["machine"] = {"cores": __import__("os").cpu_count(), "python": sys.version.split()[0],
                          "when": datetime.utcnow().isoformat(timespec="seconds") + "Z"}
    if args.only in (None, "wrap"):
        sizes = [float(s) if "." in s else int(s) for s in args.sizes.split(",")]
        rows, memory = [], {}
        for ex in args.executors.split(","):
            r, m = bench_wrap(ex, sizes, args.reps, base)
            rows += r
            memory[ex] = m
            results["wrap"] = {"summary": summarize_wrap(rows), "runs": rows, "memory_peak_mib": memory}
            args.out.write_text(json.dumps(results, indent=1) + "\n")  # each executor's figures as they come
        print_wrap(results["wrap"]["summary"])
    if args.only in (None, "scale"):
        results["scale"] = bench_scale(args.scale_tasks, args.scale_algorithms.split(","), base,
                                       concurrency=args.scale_concurrency, preload=not args.no_preload)
        for r in results["scale"]["runs"]:
            print(f"\nscale: {r['write_tasks']} tasks ({r['algorithm']}), {results['scale']['workers']} workers x "
                  f"{results['scale']['concurrency_per_worker']}: trigger->success {r['wall_s']} s, write phase "
                  f"{r['write_phase_s']} s, commit task {r['commit_task_s']} s, job commit stages "
                  f"{r['job_commit_durations_s']}, requests {r['requests_total']}, status page {r['status_page_s']} s"
                  f" (JSON {r['status_json_s']} s)")
        print("memory peak (MiB PSS):", results["scale"]["memory_peak_mib"])
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
