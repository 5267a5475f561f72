"""Benchmarks: ``python -m benchmarks.run [--quick] [--only local,s3,memory] [--json out.json]``.

Prints a table (median, min, max of several runs; ratios from the same run) and writes JSON.

- local: job commit time for N small Parquet files, ours v1 and v2, against the floor (a plain loop of
  ``os.rename`` over the same number of files between two directories), and the total time (setup, every task,
  job commit); and N=10,000 files spread over 10 partitions the output does not have yet (a daily partitioned
  write), where v1 renames whole directories;
- spark: the peer, Hadoop's FileOutputCommitter v1 and v2 through pyspark local[2] (``pip install pyspark``,
  Java 17), its job commit time taken from the driver's "Write Job ... committed. Elapsed time" line; the same
  shape as ours (N/10 tasks of 10 one-row files, ``maxRecordsPerFile=1``);
- s3: moto's server on 127.0.0.1, N files: job commit time, requests per file and bytes copied at job commit,
  v1 / v2 / magic;
- airflow: dag.test() wall time of 8 mapped Parquet writes, plain PythonOperator versus the commit stage, at
  50,000, 2,000,000 and 5,000,000 rows per task (the wrapping is a fixed cost: its share falls as tasks grow);
- ui: building the commit-status view's model (storage reads, every task row) of a job with 1,000 tasks and the
  JSON a page fetches first (summary, one page of tasks), running and committed;
- memory: job commit of 100,000 files in a fresh process: time and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_commit_provider.protocol import TaskAttemptWriter, make_committer  # noqa: E402

ONE_ROW = pa.table({"x": pa.array([1], pa.int64())})
#: Both sides of the local comparison write N files as N/10 tasks of 10 one-row files each.
FILES_PER_TASK = 10
#: The partitioned variant: every task writes one file into each of this many partitions the output lacks.
PARTITIONS = 10


def prepare_job(root: str, n_files: int, algorithm: Any, files_per_task: int = FILES_PER_TASK, partitions: int = 0,
                job_id: str = "bench", mode: str = "append", **kw: Any) -> Any:
    """Set up a job whose tasks committed *n_files* one-row Parquet files in all; with *partitions*, file i of a
    task goes to partition ``p=<i % partitions>`` (none of which the output has yet)."""
    c = make_committer(root, job_id, algorithm=algorithm, mode=mode, **kw)
    c.setup_job()
    tasks = max(1, n_files // files_per_task)
    for t in range(tasks):
        ta = c.setup_task(t, 1)
        with TaskAttemptWriter(c, ta, compression="none") as w:
            for i in range(n_files // tasks):
                with w.open_file(extension="parquet", partition={"p": i % partitions} if partitions else None) as fh:
                    fh.write(_PARQUET_BYTES)
        c.commit_task(ta, w.rows, sizes=w.sizes)
    return c, tasks


def _parquet_bytes() -> bytes:
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(ONE_ROW, buf, compression="none")
    return buf.getvalue()


_PARQUET_BYTES = _parquet_bytes()


def floor_files(base: str, n: int) -> tuple[str, str]:
    """Two directories under *base*: ``src`` holding *n* one-row Parquet files, and an empty ``dst``."""
    src, dst = os.path.join(base, "src"), os.path.join(base, "dst")
    os.makedirs(src)
    os.makedirs(dst)
    for i in range(n):
        with open(os.path.join(src, f"f{i}.parquet"), "wb") as fh:
            fh.write(_PARQUET_BYTES)
    return src, dst


def rename_floor(base: str, n: int) -> float:
    src, dst = floor_files(base, n)
    t0 = time.perf_counter()
    for i in range(n):
        os.rename(os.path.join(src, f"f{i}.parquet"), os.path.join(dst, f"f{i}.parquet"))
    return time.perf_counter() - t0


def stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def bench_local(sizes: list[int], runs: int, partitions: int = 0) -> list[dict[str, Any]]:
    out = []
    bench = f"local job commit, {partitions} new partitions" if partitions else "local job commit"
    for n in sizes:
        results: dict[str, list[float]] = {"floor os.rename": [], "ours v1": [], "ours v2": []}
        totals: dict[str, list[float]] = {"ours v1": [], "ours v2": []}
        for _ in range(runs):
            base = tempfile.mkdtemp(prefix="bench-")
            try:
                results["floor os.rename"].append(rename_floor(os.path.join(base, "floor"), n))
                for alg in (1, 2):
                    started = time.perf_counter()
                    c, _ = prepare_job(os.path.join(base, f"v{alg}"), n, alg, partitions=partitions)
                    t0 = time.perf_counter()
                    c.commit_job(None)
                    results[f"ours v{alg}"].append(time.perf_counter() - t0)
                    totals[f"ours v{alg}"].append(time.perf_counter() - started)
            finally:
                shutil.rmtree(base, ignore_errors=True)
        floor = statistics.median(results["floor os.rename"])
        for name, values in results.items():
            s = stats(values)
            # total: setup, every task (one after another, in this one process) and the job commit
            total = {"total_s": statistics.median(totals[name])} if name in totals else {}
            out.append({"bench": bench, "n": n, "committer": name, **s,
                        "ms_per_file": 1000 * s["median"] / n, "x_floor": s["median"] / floor, **total})
    return out


def spark_peer(n: int, algorithm: int, runs: int, files_per_task: int = FILES_PER_TASK,
               partitions: int = 0) -> list[tuple[float, float]]:
    """Run :mod:`benchmarks.spark_peer` in a subprocess: (Spark's job commit ms, whole write s) per run."""
    from benchmarks.spark_peer import parse

    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-java-options -Dlog4j2.configurationFile=file:"
           f"{here / 'log4j2-peer.properties'} --conf spark.ui.showConsoleProgress=false pyspark-shell"}
    base = tempfile.mkdtemp(prefix="bench-spark-")
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.spark_peer", str(n), str(algorithm), str(runs),
                               os.path.join(base, "out"), str(files_per_task), str(partitions)],
                              env=env, capture_output=True, text=True, cwd=here.parent)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results = parse(proc.stdout, proc.stderr)
    if not results:
        raise RuntimeError(f"Spark peer produced no timing (rc={proc.returncode}): {proc.stderr[-500:]}")
    return results


def bench_spark(sizes: list[int], runs: int, partitions: int = 0) -> list[dict[str, Any]]:
    """Hadoop's FileOutputCommitter v1/v2 through Spark 4 local[2]: Spark's own job-commit figure per run."""
    out = []
    for n in sizes:
        for alg in (1, 2):
            results = spark_peer(n, alg, runs, FILES_PER_TASK, partitions)
            s = stats([ms / 1000 for ms, _ in results])
            out.append({"bench": f"local job commit, {partitions} new partitions" if partitions else
                        "local job commit", "n": n, "committer": f"Hadoop v{alg} (Spark 4.3)", **s,
                        "ms_per_file": 1000 * s["median"] / n,
                        "total_s": statistics.median(t for _, t in results)})
    return out


def relate(rows: list[dict[str, Any]]) -> None:
    """Ours against Hadoop and the floor at the same N, from the same run."""
    for row in rows:
        if not row["bench"].startswith("local job commit"):
            continue
        same = {r["committer"]: r["median"] for r in rows if r["bench"] == row["bench"] and r["n"] == row["n"]}
        if "floor os.rename" in same:
            row["x_floor"] = row["median"] / same["floor os.rename"]
        alg = row["committer"][-2:]
        hadoop = same.get(f"Hadoop {alg} (Spark 4.3)")
        if row["committer"].startswith("ours") and hadoop:
            row["x_hadoop"] = row["median"] / hadoop


def bench_s3(n: int, runs: int) -> list[dict[str, Any]]:
    import boto3

    from tests.support import start_moto

    proc, _url = start_moto(os.environ)
    out = []
    try:
        for alg in (1, 2, "magic"):
            times, per_file, copied = [], [], []
            for r in range(runs):
                bucket = f"bench-{alg}-{r}".replace("magic", "m")
                boto3.client("s3").create_bucket(Bucket=bucket)
                kw = {"part_size": 5 * 2**20} if alg == "magic" else {}
                c, tasks = prepare_job(f"s3://{bucket}/out", n, alg, files_per_task=20, **kw)
                t0 = time.perf_counter()
                manifest = c.commit_job(tasks)
                times.append(time.perf_counter() - t0)
                reqs = manifest["diagnostics"]["requests"]
                publish = sum(reqs.get("moves", {}).values())
                total = sum(sum(v.values()) for v in reqs.values())
                per_file.append((publish, total))
                copied.append(manifest["diagnostics"]["bytes_copied"])
            s = stats(times)
            out.append({"bench": "s3 (moto) job commit", "n": n, "committer": f"ours {alg}" if alg == "magic"
                        else f"ours v{alg}", **s, "ms_per_file": 1000 * s["median"] / n,
                        "publish_requests_per_file": per_file[0][0] / n, "requests_total": per_file[0][1],
                        "bytes_copied": copied[0], "bytes_written": n * len(_PARQUET_BYTES)})
    finally:
        proc.terminate()
    return out


def bench_memory(n: int) -> list[dict[str, Any]]:
    """Job commit of *n* files in a fresh process: time and peak RSS of that process.

    The peak is the kernel's high-water mark of the process's own memory (``VmHWM``), not ``ru_maxrss``: Linux
    carries ``ru_maxrss`` over ``exec`` from the forked copy of the parent, so a child of this (large) benchmark
    process would report the parent's size.
    """
    code = f"""
import time, tempfile, json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from benchmarks.run import prepare_job
def hwm_mb():
    return next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM')) / 1024
base = tempfile.mkdtemp(prefix='bench-mem-')
c, tasks = prepare_job(base + '/out', {n}, 1, files_per_task=100)
before = hwm_mb()
t0 = time.perf_counter()
c.commit_job(tasks)
took = time.perf_counter() - t0
print(json.dumps({{"seconds": took, "rss_before_mb": before, "peak_rss_mb": hwm_mb()}}))
import shutil; shutil.rmtree(base)
"""
    res = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1])
    return [{"bench": "job commit memory", "n": n, "committer": "ours v1", "median": res["seconds"],
             "min": res["seconds"], "max": res["seconds"], "runs": 1, "ms_per_file": 1000 * res["seconds"] / n,
             "peak_rss_mb": res["peak_rss_mb"], "rss_before_commit_mb": res["rss_before_mb"]}]


def bench_ui(tasks: int, runs: int) -> list[dict[str, Any]]:
    """Time to build the commit-status view's model of a job with *tasks* tasks (reading storage, every task row)
    and serialize what a page fetches first: the summary and one page of the task table."""
    from airflow_commit_provider.plugins.airflow_state import RunSnapshot
    from airflow_commit_provider.plugins.read_model import StageModel

    out = []
    base = tempfile.mkdtemp(prefix="bench-ui-")
    try:
        c, _ = prepare_job(os.path.join(base, "out"), tasks, 1, files_per_task=1)
        for state in ("running", "committed"):
            if state == "committed":
                c.commit_job(tasks)
            values = []
            for _ in range(runs):
                t0 = time.perf_counter()
                stage = StageModel("stage.setup", "stage", c.status(), RunSnapshot("running", ()), None)
                body = stage.summary.model_dump_json() + stage.page("v", None, 0, 50, None).model_dump_json()
                values.append(time.perf_counter() - t0)
            assert stage.summary.state == state and stage.summary.tasks_total == tasks and len(body) > 50 * 50
            out.append({"bench": f"status view model ({state} job)", "n": tasks, "committer": "ours v1",
                        **stats(values)})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


def bench_airflow(runs: int, sizes: list[int]) -> list[dict[str, Any]]:
    """dag.test() wall time of the same writes, plain versus through the commit stage (fresh processes), for shards
    of each size in *sizes* (rows): the wrapping costs a fixed number of task instances, so its share shrinks as
    the tasks do more work."""
    base = Path(tempfile.mkdtemp(prefix="bench-af-"))
    home = base / "home"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).parent / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "BENCH_ROOT": str(base / "out"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db"}
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], env=env, check=True,
                   capture_output=True)
    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); import bench_overhead as m; d = getattr(m, sys.argv[1]);"
            "d.test(); t0 = time.perf_counter(); dr = d.test(); print('WALL', time.perf_counter() - t0, dr.state)")
    out = []
    try:
        for rows in sizes:
            times: dict[str, list[float]] = {"bench_plain": [], "bench_commit": []}
            for _ in range(runs):
                for dag in times:  # interleaved, so drift hits both alike
                    proc = subprocess.run([sys.executable, "-c", code, dag, env["AIRFLOW__CORE__DAGS_FOLDER"]],
                                          env={**env, "BENCH_ROWS": str(rows)}, capture_output=True, text=True,
                                          check=True)
                    line = next(x for x in proc.stdout.splitlines() if x.startswith("WALL"))
                    assert line.endswith("success"), line
                    times[dag].append(float(line.split()[1]))
            plain = statistics.median(times["bench_plain"])
            out += [{"bench": f"airflow dag.test wall, 8 tasks x {rows:,} rows", "n": 8, "committer": name,
                     **stats(v), "x_plain": statistics.median(v) / plain} for name, v in times.items()]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = ["bench", "n", "committer", "median", "min", "max", "ms_per_file", "x_floor", "x_hadoop", "total_s",
            "x_plain", "publish_requests_per_file", "requests_total", "bytes_copied", "peak_rss_mb"]
    cols = [c for c in cols if any(c in r for r in rows)]
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))  # noqa: E731
    table = [cols] + [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for i, row in enumerate(table):
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each")
    parser.add_argument("--only", default="local,spark,s3,airflow,ui,memory")
    parser.add_argument("--json", default="benchmarks/results.json")
    args = parser.parse_args()
    only = set(args.only.split(","))
    runs = 1 if args.quick else 5
    rows: list[dict[str, Any]] = []
    if "local" in only:
        rows += bench_local([100, 1000] if args.quick else [100, 1000, 10000], runs)
        rows += bench_local([1000] if args.quick else [10000], runs, partitions=PARTITIONS)
    if "spark" in only:
        rows += bench_spark([100, 1000] if args.quick else [100, 1000, 10000], 1 if args.quick else 3)
        rows += bench_spark([1000] if args.quick else [10000], 1 if args.quick else 3, partitions=PARTITIONS)
    relate(rows)
    if "s3" in only:
        rows += bench_s3(100 if args.quick else 1000, 1 if args.quick else 3)
    if "airflow" in only:
        rows += bench_airflow(1 if args.quick else 5, [50_000] if args.quick else [50_000, 2_000_000, 5_000_000])
    if "ui" in only:
        rows += bench_ui(1000, 1 if args.quick else 5)
    if "memory" in only:
        rows += bench_memory(10000 if args.quick else 100000)
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    print(f"machine: {machine}")
    print_table(rows)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
