"""The commit stage in a real scheduler: wrapping cost (LocalExecutor and CeleryExecutor, side by side in one run)
and a 1,000-task stage on Celery.

    .venv/bin/python -m benchmarks.distributed                    # both parts, figures to results_distributed.json
    .venv/bin/python -m benchmarks.distributed --only wrap --reps 3 --sizes 0,1,10,30
    .venv/bin/python -m benchmarks.distributed --only wrap --reps 2 --sizes 0,10 --extra-sizes 30 \
        --executors LocalExecutor,CeleryExecutor --deadline 2026-12-01T00:19:00Z
    .venv/bin/python -m benchmarks.distributed --only scale --scale-tasks 1000

Each deployment is started from nothing by ``tests/deployment/distributed.py`` (PostgreSQL metadata DB, moto's S3
server, api-server, scheduler, dag-processor, triggerer; Celery adds Redis and two workers that share only S3).

Wrapping cost: ``wc_plain_<s>`` (mapped PythonOperator: wait *s* seconds, write one Parquet file to S3) against
``wc_stage_<s>`` (``commit_stage``: setup, the same mapped write, commit, abort teardown), 4 tasks, 4 task slots
on either executor, with a control between them: ``wc_noop_<s>``, the plain DAG's mapped write with three no-op
PythonOperators in the stage's places (setup before it, commit after it, abort as a teardown after that). The
control is the floor of any wrapping that keeps four task instances, so the stage's added time splits into
Airflow's floor for three extra task instances (noop - plain) and the commit protocol's own work (stage - noop).
Wall time is the DAG run's ``end_date - queued_at`` as the scheduler records it (trigger to success, independent
of how often this script polls); the table gives medians. The critical path of each run is taken apart from the
task instances' timestamps (REST API: ``scheduled_when``, ``queued_when``, ``start_date``, ``end_date``): for each
task, the gap from its upstream's end (the run's start for the first) to its first instance's start (split at
``queued_when``: scheduling, then executor pick-up and process start), its span (first start to last end), and
the tail from the last task's end to the run's ``end_date``; these add up to the wall time. Sizes in
``--extra-sizes`` run after the others, and only while the projected end stays before ``--deadline``.

Scale: ``scale_<alg>`` with 1,000 mapped tasks on 2 Celery workers of 5 processes each (10 task slots: "ten
workers' worth"); job commit time and S3 requests from the commit's manifest, the commit-status view's requests
(its summary and its first page of 50 tasks, medians of 3), and the memory (PSS, children included) of every
component, sampled every 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
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
    """Peak PSS per component over the sampler's life, and the machine's 1-minute load average."""

    def __init__(self, dep: CeleryDeployment) -> None:
        super().__init__(daemon=True)
        self.dep, self.peak, self.stop_flag, self.load = dep, {}, threading.Event(), []

    def run(self) -> None:
        while not self.stop_flag.is_set():
            self.load.append(os.getloadavg()[0])
            for name, mib in self.dep.memory().items():
                self.peak[name] = max(self.peak.get(name, 0.0), mib)
            self.stop_flag.wait(2)

    def load_summary(self) -> dict[str, float]:
        if not self.load:
            return {}
        q = statistics.quantiles(self.load, n=10) if len(self.load) > 1 else self.load * 9
        return {"min": round(min(self.load), 2), "p10": round(q[0], 2), "median": round(statistics.median(self.load), 2),
                "p90": round(q[-1], 2), "max": round(max(self.load), 2), "samples": len(self.load)}

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
    out: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id, "wall_s": ts(run["end_date"]) - queued,
                           "run_start": round(ts(run["start_date"]) - queued, 3) if run.get("start_date") else None,
                           "load1": round(os.getloadavg()[0], 2)}
    spans: dict[str, list[tuple[float, float]]] = {}
    marks: dict[str, dict[str, list[float]]] = {}
    for t in tis:
        if t["start_date"] and t["end_date"]:
            name = t["task_id"].split(".")[-1]
            spans.setdefault(name, []).append((ts(t["start_date"]) - queued, ts(t["end_date"]) - queued))
            for field in ("scheduled_when", "queued_when"):
                if t.get(field):
                    marks.setdefault(name, {}).setdefault(field, []).append(ts(t[field]) - queued)
    out["tasks"] = {k: {"first_start": round(min(s for s, _ in v), 3), "last_end": round(max(e for _, e in v), 3),
                        "median_duration": round(statistics.median(e - s for s, e in v), 3), "n": len(v),
                        **{f"first_{f.split('_')[0]}": round(min(m), 3) for f, m in marks.get(k, {}).items()}}
                    for k, v in spans.items()}
    out["path"] = critical_path(out)
    return out


PATH = ("setup", "write", "commit", "abort")  # the order on the critical path; the plain DAG has only "write"


def critical_path(r: dict[str, Any]) -> dict[str, float]:
    """The run's wall time taken apart, each part in seconds; they add up to ``wall_s``.

    ``run_start``: trigger to the run's start; for each task *T* on the path: ``<T>_sched`` (its upstream's end, or
    the run's start, to its first instance's ``queued_when``: the scheduler's round trip), ``<T>_pickup``
    (``queued_when`` to ``start_date``: the executor hands it over and a task process starts), ``<T>_span`` (first
    start to last end: the task's own time, for the mapped write all four instances); ``tail``: the last task's end
    to the run's ``end_date``."""
    tasks = [t for t in PATH if t in r["tasks"]]
    prev = r.get("run_start") or 0.0
    out: dict[str, float] = {"run_start": round(prev, 3)}
    for name in tasks:
        t = r["tasks"][name]
        q = t.get("first_queued", t["first_start"])
        out[f"{name}_sched"] = round(q - prev, 3)
        out[f"{name}_pickup"] = round(t["first_start"] - q, 3)
        out[f"{name}_span"] = round(t["last_end"] - t["first_start"], 3)
        prev = t["last_end"]
    out["tail"] = round(r["wall_s"] - prev, 3)
    return out


KINDS = ("plain", "noop", "stage")


def bench_wrap(executor: str, sizes: list[float], reps: int, base: Path, *, extra_sizes: list[float] = (),
               deadline: float | None = None, later_executors: int = 0, save=None) -> tuple[list[dict], dict]:
    """Every size in *sizes*, then each of *extra_sizes* whose projected time (and the same for the
    *later_executors*) still ends before *deadline*. Within a size the reps alternate the order of the three
    DAGs (plain, noop, stage; then stage, noop, plain) so that no kind always runs first. *save(rows)* after
    every run."""
    t_begin = time.time()
    all_sizes = list(sizes) + [s for s in extra_sizes if s not in sizes]
    env = {"COMMIT_BENCH_SIZES": json.dumps(all_sizes), "COMMIT_BENCH_TASKS": "4", "COMMIT_BENCH_SCALE_TASKS": "1"}
    name, _, variant = executor.partition(":")
    if variant == "preload":  # the workers import the heavy modules once, before forking (celery_preload.py)
        env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] = "benchmarks.celery_preload.CONFIG"
    dep = start_deployment(lambda n: CeleryDeployment(base / f"{executor.replace(':', '-')}-{n}", workers=2,
                                                      concurrency=2, parallelism=4, extra_env=env,
                                                      dag_files=(DAG_FILE,), executor=name))
    rows: list[dict] = []
    info: dict[str, Any] = {"started_s": round(time.time() - t_begin, 1), "skipped_sizes": []}
    try:
        sampler = MemorySampler(dep)
        sampler.start()
        for kind in KINDS:  # the first runs after a start wait for the DAGs' first parse: not timed
            run_once(dep, f"wc_{kind}_{all_sizes[0]}", "warmup")
        for s in all_sizes:
            if s not in sizes and deadline is not None:
                overhead = statistics.median(r["wall_s"] - r["size_s"] for r in rows)
                block = reps * len(KINDS) * (s + overhead + 2)  # + polling and API reads
                mandatory = time.time() - t_begin  # this executor's start, warm-up and the sizes above
                if time.time() + block + later_executors * (mandatory + block + 60) > deadline:
                    print(f"  {executor}: size {s} s skipped (projected past the deadline)", flush=True)
                    info["skipped_sizes"].append(s)
                    continue
            for rep in range(reps):
                for kind in (KINDS if rep % 2 == 0 else KINDS[::-1]):
                    r = run_once(dep, f"wc_{kind}_{s}", f"r{rep}")
                    rows.append({"executor": executor, "size_s": s, "kind": kind, "rep": rep, **r})
                    print(f"  {executor:23} {kind:6} {s:>5} s  rep {rep}: {r['wall_s']:6.2f} s  "
                          f"(load {r['load1']})", flush=True)
                    if save:
                        save(rows)
        info["memory_peak_mib"] = sampler.finish()
        info["load1"] = sampler.load_summary()
    finally:
        dep.stop()
    info["total_s"] = round(time.time() - t_begin, 1)
    return rows, info


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def summarize_wrap(rows: list[dict]) -> list[dict]:
    """Per executor and size: the medians of plain, noop (the control) and stage; the stage's added time split into
    Airflow's floor for three extra task instances (noop - plain) and the commit protocol's own work (stage -
    noop); each kind's task durations and critical path (medians of each part over the reps)."""
    out = []
    for ex in dict.fromkeys(r["executor"] for r in rows):
        for s in dict.fromkeys(r["size_s"] for r in rows):
            runs = {k: [r for r in rows if r["executor"] == ex and r["size_s"] == s and r["kind"] == k]
                    for k in KINDS}
            if not runs["plain"] or not runs["stage"]:
                continue
            walls = {k: [r["wall_s"] for r in v] for k, v in runs.items()}
            med = {k: statistics.median(v) if v else None for k, v in walls.items()}
            plain, noop, stage = med["plain"], med["noop"], med["stage"]
            row: dict[str, Any] = {"executor": ex, "task_seconds": s, "plain_s": round(plain, 2),
                                   "noop_s": round(noop, 2) if noop is not None else None,
                                   "stage_s": round(stage, 2), "added_s": round(stage - plain, 2),
                                   "added_pct": round(100 * (stage - plain) / plain, 1), "runs": len(walls["stage"])}
            if noop is not None:
                row.update({"floor_s": round(noop - plain, 2), "floor_pct": round(100 * (noop - plain) / plain, 1),
                            "protocol_s": round(stage - noop, 2),
                            "protocol_pct": round(100 * (stage - noop) / plain, 1)})
            for k in KINDS:
                if not runs[k]:
                    continue
                row[f"{k}_all"] = [round(w, 2) for w in walls[k]]
                row[f"{k}_task_durations"] = {
                    f"{t}_s": _median([r["tasks"][t]["median_duration"] for r in runs[k] if t in r["tasks"]])
                    for t in PATH if any(t in r["tasks"] for r in runs[k])}
                parts = dict.fromkeys(p for r in runs[k] for p in r["path"])
                row[f"{k}_path"] = {p: _median([r["path"][p] for r in runs[k] if p in r["path"]]) for p in parts}
                row[f"{k}_load1"] = _median([r["load1"] for r in runs[k]])
            if runs["noop"]:  # where the protocol's seconds go: the stage's path minus the control's, part by part
                row["protocol_by_part"] = {p: round(v - row["noop_path"].get(p, 0.0), 2)
                                           for p, v in row["stage_path"].items() if v is not None}
                row["floor_by_part"] = {p: round(v - row["plain_path"].get(p, 0.0), 2)
                                        for p, v in row["noop_path"].items() if v is not None}
            out.append(row)
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
                for url, sink in ((f"/commit-status/api/dags/{dag_id}/runs/scale/stages/stage.setup/tasks", page),
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
                "status_tasks_page_s": round(statistics.median(page), 3),
                "status_summary_s": round(statistics.median(api), 3),
                "task_breakdown": r["tasks"]})
        results["memory_peak_mib"] = sampler.finish()
        results["memory_idle_mib"] = idle
    finally:
        dep.stop()
    return results


def print_wrap(summary: list[dict]) -> None:
    def f(v: float | None, w: int = 7) -> str:
        return f"{v:>{w}.2f}" if v is not None else f"{'-':>{w}}"

    print("\nwrapping cost: 4 mapped write tasks, 4 slots, wall time trigger -> success (medians)")
    print(f"{'executor':15} {'task s':>6} {'plain':>7} {'noop':>7} {'stage':>7} {'added':>7} {'%':>6} "
          f"{'floor':>7} {'%':>6} {'protocol':>8} {'%':>6}")
    for r in summary:
        print(f"{r['executor']:15} {r['task_seconds']:>6} {f(r['plain_s'])} {f(r.get('noop_s'))} {f(r['stage_s'])} "
              f"{f(r['added_s'])} {r['added_pct']:>5.1f}% {f(r.get('floor_s'))} {r.get('floor_pct', 0):>5.1f}% "
              f"{f(r.get('protocol_s'), 8)} {r.get('protocol_pct', 0):>5.1f}%")
    print("\ntask durations (setup/write/commit/abort, medians) and critical path (run_start, then per task: "
          "upstream end -> queued | queued -> start | span; tail)")
    for r in summary:
        for k in KINDS:
            if f"{k}_path" not in r:
                continue
            d, p = r[f"{k}_task_durations"], r[f"{k}_path"]
            tasks = "  ".join(f"{t} {p.get(f'{t}_sched')}|{p.get(f'{t}_pickup')}|{p.get(f'{t}_span')}"
                              for t in PATH if f"{t}_span" in p)
            print(f"{r['executor']:15} {r['task_seconds']:>4} {k:5} durations "
                  f"{'/'.join(str(d.get(f'{t}_s', '-')) for t in PATH)}  path: start {p.get('run_start')}  {tasks}"
                  f"  tail {p.get('tail')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("wrap", "scale"), default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="0,1,10,30")
    ap.add_argument("--extra-sizes", default="", help="run after --sizes, each only if it fits before --deadline")
    ap.add_argument("--deadline", default=None, help="ISO time (UTC, e.g. 2026-12-01T00:19:00Z) for --extra-sizes")
    ap.add_argument("--executors", default="LocalExecutor,CeleryExecutor,CeleryExecutor:preload")
    ap.add_argument("--scale-tasks", type=int, default=1000)
    ap.add_argument("--scale-algorithms", default="v1,magic")
    ap.add_argument("--scale-concurrency", type=int, default=5, help="per worker (2 workers)")
    ap.add_argument("--no-preload", action="store_true", help="scale run without celery_preload")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    machine = {"cores": os.cpu_count(), "python": sys.version.split()[0],
               "when": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")}
    if args.only in (None, "scale"):  # a wrap-only run keeps the scale run's machine record
        results["machine"] = machine
    if args.only in (None, "wrap"):
        sizes = [float(s) if "." in s else int(s) for s in args.sizes.split(",")]
        extra = [float(s) if "." in s else int(s) for s in args.extra_sizes.split(",") if s]
        deadline = ts(args.deadline) if args.deadline else None
        old = results.get("wrap") or {}
        previous = old.get("previous_run") or (
            {"note": old.get("note"), "summary": old.get("summary")} if old.get("summary") else None)
        executors = args.executors.split(",")
        rows: list[dict] = []
        infos: dict[str, Any] = {}
        wrap: dict[str, Any] = {}

        def save(current: list[dict], done: bool = False) -> None:
            every = rows + ([] if done else current)
            wrap.update({"machine": {**machine, "load1_at_start": round(os.getloadavg()[0], 2),
                                     "load1_during_run": {ex: i.get("load1") for ex, i in infos.items()}},
                         "summary": summarize_wrap(every), "runs": every,
                         "memory_peak_mib": {ex: i.get("memory_peak_mib") for ex, i in infos.items()},
                         "executors": infos, **({"previous_run": previous} if previous else {})})
            results["wrap"] = wrap
            args.out.write_text(json.dumps(results, indent=1) + "\n")  # figures as they come

        load_at_start = round(os.getloadavg()[0], 2)
        for i, ex in enumerate(executors):
            r, info = bench_wrap(ex, sizes, args.reps, base, extra_sizes=extra, deadline=deadline,
                                 later_executors=len(executors) - i - 1, save=save)
            rows += r
            infos[ex] = info
            save([], done=True)
        wrap["machine"]["load1_at_start"] = load_at_start
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print_wrap(results["wrap"]["summary"])
        print("load average (1 min) during the runs:", {ex: i.get("load1") for ex, i in infos.items()})
    if args.only in (None, "scale"):
        results["scale"] = bench_scale(args.scale_tasks, args.scale_algorithms.split(","), base,
                                       concurrency=args.scale_concurrency, preload=not args.no_preload)
        for r in results["scale"]["runs"]:
            print(f"\nscale: {r['write_tasks']} tasks ({r['algorithm']}), {results['scale']['workers']} workers x "
                  f"{results['scale']['concurrency_per_worker']}: trigger->success {r['wall_s']} s, write phase "
                  f"{r['write_phase_s']} s, commit task {r['commit_task_s']} s, job commit stages "
                  f"{r['job_commit_durations_s']}, requests {r['requests_total']}, status view: summary "
                  f"{r['status_summary_s']} s, first task page {r['status_tasks_page_s']} s")
        print("memory peak (MiB PSS):", results["scale"]["memory_peak_mib"])
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
