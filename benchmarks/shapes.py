"""Job commit at every task shape (issue 15): ours against the rename floor and Hadoop's committer.

Shapes
------
``python -m benchmarks.shapes [--quick] [--n 1000,10000] [--json benchmarks/results.json]`` commits N one-row
Parquet files written as tasks x files-per-task = N x 1, N/10 x 10, N/100 x 100 and N/1000 x 1000 (shapes with
fewer than one task are left out), appending into an empty directory; ``commit_job`` is given the task count, as
the Airflow commit stage does. Figures are medians of 3 runs (``--quick``: 1 run, N = 1,000 unless ``--n`` says
otherwise, no Spark); they are printed and stored under the key "shapes" of the JSON file (its other keys are
kept). The tables:

- local: ``to_success_s`` is the time to ``_SUCCESS`` (the manifest's ``durations.total``: every stage up to and
  including the markers), ``commit_job_s`` the wall time of ``commit_job(defer_cleanup=True)``, what the Airflow
  commit task waits for (also the cleanup after ``_SUCCESS``: on a local disk one rename into ``_temporary/_trash``;
  the deletion of the records is the teardown's, ``teardown_trash`` in the stages table); the ``x_floor`` columns divide each by the floor, a plain ``os.rename`` loop over
  the same number of files in the same run. The Hadoop rows are FileOutputCommitter v1/v2 through pyspark
  local[2] (:mod:`benchmarks.spark_peer`) on the same shapes: Spark's own job-commit time, in which Hadoop writes
  ``_SUCCESS`` last, so it fills both columns.
- stages: the manifest's durations (seconds) at one file per task, one column per key the manifest has.
- s3: moto's server, N = 1,000, shapes 1000x1 and 100x10, v1, v2 and magic: job commit wall time, time to
  ``_SUCCESS``, requests at job commit (the manifest's ``diagnostics.requests`` summed over stages and
  operations), per task and per file, and ``x_100x10``, the 1000x1 time over the 100x10 time (goal: at most 2);
  then the requests per stage.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import prepare_job, rename_floor, spark_peer

FILES_PER_TASK = (1, 10, 100, 1000)
S3_N = 1000
S3_SHAPES = ((1000, 1), (100, 10))


def shapes(n: int) -> list[tuple[int, int]]:
    """(tasks, files per task) for *n* files, one to 1,000 files per task, with at least one task."""
    return [(n // f, f) for f in FILES_PER_TASK if n // f >= 1]


def to_success(durations: Mapping[str, float]) -> float:
    """Time to ``_SUCCESS``: ``total``, or (should it go) every stage but the cleanups and the client start."""
    if "total" in durations:
        return durations["total"]
    return sum(v for k, v in durations.items() if not k.startswith("cleanup") and k != "client_start")


def commit(root: str, n: int, tasks: int, algorithm: int | str, **kw: Any) -> tuple[float, dict[str, Any]]:
    """Prepare a job of *tasks* tasks writing *n* files in all, commit it as the Airflow commit task does
    (``defer_cleanup=True``): (wall seconds, manifest). The deletion the commit task leaves to the stage's
    teardown (``remove_trash``, local disks only) is timed after it, as ``durations.teardown_trash``."""
    c, tasks = prepare_job(root, n, algorithm, files_per_task=n // tasks, **kw)
    t0 = time.perf_counter()
    manifest = c.commit_job(tasks, defer_cleanup=True)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    c.remove_trash()
    manifest["durations"]["teardown_trash"] = time.perf_counter() - t1
    return wall, manifest


def median_durations(samples: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Per key, the median over the runs that have it (keys in order of first appearance)."""
    samples = list(samples)
    keys = dict.fromkeys(k for d in samples for k in d)
    return {k: statistics.median(d[k] for d in samples if k in d) for k in keys}


def bench_local(sizes: list[int], runs: int) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """Ours v1/v2 at every shape of each size: rows, and the floor (seconds) per size."""
    rows, floors = [], {}
    for n in sizes:
        floor: list[float] = []
        got: dict[tuple[int, int, int], list[tuple[float, dict[str, float]]]] = defaultdict(list)
        for _ in range(runs):
            base = tempfile.mkdtemp(prefix="bench-shapes-")
            try:
                floor.append(rename_floor(os.path.join(base, "floor"), n))
                for tasks, fpt in shapes(n):
                    for alg in (1, 2):
                        wall, manifest = commit(os.path.join(base, f"{tasks}x{fpt}-v{alg}"), n, tasks, alg)
                        got[(tasks, fpt, alg)].append((wall, manifest["durations"]))
            finally:
                shutil.rmtree(base, ignore_errors=True)
        floors[n] = statistics.median(floor)
        for (tasks, fpt, alg), samples in got.items():
            durations = median_durations(d for _, d in samples)
            rows.append(local_row(n, tasks, fpt, f"ours v{alg}", len(samples), floors[n],
                                  statistics.median(to_success(d) for _, d in samples),
                                  statistics.median(w for w, _ in samples), durations=durations))
    return rows, floors


def local_row(n: int, tasks: int, fpt: int, committer: str, runs: int, floor: float, success: float,
              wall: float, **extra: Any) -> dict[str, Any]:
    return {"n": n, "shape": f"{tasks}x{fpt}", "tasks": tasks, "files_per_task": fpt, "committer": committer,
            "runs": runs, "floor_s": floor, "to_success_s": success, "success_x_floor": success / floor,
            "commit_job_s": wall, "commit_x_floor": wall / floor, **extra}


def spark_unavailable() -> str | None:
    """Why the Spark peer cannot run here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[bench]')"
    if shutil.which("java") is None:
        return "no java on PATH"
    return None


def bench_spark(floors: Mapping[int, float], runs: int) -> list[dict[str, Any]]:
    """Hadoop's FileOutputCommitter v1/v2 (Spark local[2]) at every shape of each size in *floors*."""
    rows = []
    for n, floor in floors.items():
        for tasks, fpt in shapes(n):
            for alg in (1, 2):
                results = spark_peer(n, alg, runs, fpt)
                commit_s = statistics.median(ms / 1000 for ms, _ in results)
                rows.append(local_row(n, tasks, fpt, f"Hadoop v{alg} (Spark 4.3)", len(results), floor, commit_s,
                                      commit_s, write_s=statistics.median(t for _, t in results)))
    return rows


def bench_s3(runs: int) -> list[dict[str, Any]]:
    """v1, v2 and magic on moto's server at N = 1,000 in shapes 1000x1 and 100x10 (interleaved in each run)."""
    import boto3

    from tests.support import start_moto

    proc, _url = start_moto(os.environ)
    rows = []
    try:
        s3 = boto3.client("s3")
        for alg in (1, 2, "magic"):
            kw = {"part_size": 5 * 2**20} if alg == "magic" else {}
            got: dict[tuple[int, int], list[tuple[float, dict[str, Any]]]] = defaultdict(list)
            for r in range(runs):
                for tasks, fpt in S3_SHAPES:
                    bucket = f"shapes-{alg}-{tasks}x{fpt}-{r}"
                    s3.create_bucket(Bucket=bucket)
                    got[(tasks, fpt)].append(commit(f"s3://{bucket}/out", S3_N, tasks, alg, **kw))
            name = f"ours {alg}" if alg == "magic" else f"ours v{alg}"
            shape_rows = []
            for (tasks, fpt), samples in got.items():
                requests = [m["diagnostics"]["requests"] for _, m in samples]
                total = statistics.median(sum(sum(ops.values()) for ops in r.values()) for r in requests)
                shape_rows.append({
                    "n": S3_N, "shape": f"{tasks}x{fpt}", "tasks": tasks, "files_per_task": fpt, "committer": name,
                    "runs": len(samples), "commit_job_s": statistics.median(w for w, _ in samples),
                    "to_success_s": statistics.median(to_success(m["durations"]) for _, m in samples),
                    "requests": total, "requests_per_task": total / tasks, "requests_per_file": total / S3_N,
                    "requests_by_stage": requests[-1]})
            one, ten = (next(r for r in shape_rows if r["files_per_task"] == f) for f in (1, 10))
            one["x_100x10"] = one["commit_job_s"] / ten["commit_job_s"]
            rows += shape_rows
    finally:
        proc.terminate()
        proc.wait()
    return rows


def print_table(title: str, rows: list[dict[str, Any]], cols: list[str]) -> None:
    def fmt(col: str, v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.2f}" if "x_" in col or "per_" in col else f"{v:.4f}"
        return "" if v is None else str(v)

    table = [cols] + [[fmt(c, r.get(c)) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    print(f"\n{title}")
    for i, row in enumerate(table):
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * w for w in widths))


def merge_json(path: str, key: str, value: Any) -> None:
    """Set *key* of the JSON object in *path* (created if missing), keeping its other keys."""
    p = Path(path)
    doc = json.loads(p.read_text()) if p.exists() else {}
    doc[key] = value
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one run, N = 1,000 by default, no Spark")
    parser.add_argument("--n", help="comma-separated file counts (default 1000,10000; 1000 with --quick)")
    parser.add_argument("--json", default="benchmarks/results.json")
    args = parser.parse_args()
    sizes = [int(x) for x in (args.n or ("1000" if args.quick else "1000,10000")).split(",")]
    runs = 1 if args.quick else 3
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
               "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    print(f"machine: {machine}")
    head = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parent.parent).stdout.strip()
    out: dict[str, Any] = {"machine": machine, "commit": head, "runs": runs,
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    local, floors = bench_local(sizes, runs)
    merge_json(args.json, "shapes", {**out, "local": local})  # each part is saved as soon as it is measured
    skipped = "--quick" if args.quick else spark_unavailable()
    spark: list[dict[str, Any]] = []
    if not skipped:
        try:
            spark = bench_spark(floors, runs)
        except RuntimeError as e:
            skipped = str(e).splitlines()[0]
    rows = sorted(local + spark, key=lambda r: (r["n"], -r["tasks"], r["committer"]))
    print_table("local job commit, append into an empty directory (seconds; ratios to the os.rename floor)", rows,
                ["n", "shape", "committer", "floor_s", "to_success_s", "success_x_floor", "commit_job_s",
                 "commit_x_floor"])
    if skipped:
        print(f"spark: skipped ({skipped})")
    stage_rows = [{"n": r["n"], "committer": r["committer"], **r["durations"]} for r in local
                  if r["files_per_task"] == 1]
    keys = list(dict.fromkeys(k for r in local if r["files_per_task"] == 1 for k in r["durations"]))
    print_table("stages at one file per task (the manifest's durations, seconds)", stage_rows,
                ["n", "committer", *keys])
    out.update(local=rows, spark_skipped=skipped)
    merge_json(args.json, "shapes", out)

    s3 = bench_s3(runs)
    print_table(f"s3 (moto's server) job commit, N = {S3_N:,}", s3,
                ["shape", "committer", "commit_job_s", "to_success_s", "x_100x10", "requests", "requests_per_task",
                 "requests_per_file"])
    by_stage = [{"shape": r["shape"], "committer": r["committer"],
                 **{k: sum(ops.values()) for k, ops in r["requests_by_stage"].items()}} for r in s3]
    print_table("s3 requests per stage at job commit", by_stage,
                ["shape", "committer", *dict.fromkeys(k for r in s3 for k in r["requests_by_stage"])])

    merge_json(args.json, "shapes", {**out, "s3": s3})


if __name__ == "__main__":
    main()
