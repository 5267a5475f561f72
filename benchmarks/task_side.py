"""The task side (issue 22): ``python -m benchmarks.task_side [--quick] [--only ...] [--json benchmarks/results.json]``.

Every table sets ours beside a baseline measured in the same run, interleaved run by run so that the machine's
load hits both alike; figures are medians (``--quick``: one run, smaller sizes). Parts (``--only``, comma-separated):

- ``one_file``: 1,000 tasks, each writing one Parquet file of 1,000 rows, as an Airflow write task does
  (``run_task_attempt``: recover, set up, write, commit the task), one committer per task, against plain pyarrow
  (``pq.write_table`` of the same table to the same number of files), on the local disk (a directory under the
  system's temporary directory) and on tmpfs (``/dev/shm``). Ours is measured durable (the default: files and
  directories fsynced) and with ``durable=False``; the durable one is also set against plain pyarrow that fsyncs
  each file and its directory, the durable floor. ``tasks_s`` is the task side only; ``job_commit_s`` follows it.
- ``partitioned``: 8 tasks, each writing 100,000 rows over 100 partitions (``p=0`` .. ``p=99``), against
  ``pq.write_to_dataset`` of the same tables (one file per partition per task, Hive directories); the durable
  one also against ``write_to_dataset`` that then fsyncs each task's files, its partition directories and the
  root, the durable floor.
- ``syscalls``: one task attempt of the one-file shape under ``strace -f`` (a child process; the system calls
  between two marker calls, over 100 tasks, divided by 100): all system calls, file creations (``open*`` with
  ``O_CREAT``), directories made and removed, links, renames, unlinks, fsyncs; plain pyarrow beside it. Skipped,
  saying so, when ``strace`` is missing.
- ``s3``: moto's server on 127.0.0.1, 100 tasks x 10 files, v1, v2 and magic: every S3 request of the whole job
  (setup, the tasks, job commit) counted by a botocore hook on the client, per file, and the task side's requests
  per task by operation (each one's HTTP method beside it; a ``PutObject`` with ``If-None-Match`` is counted as
  ``PutObject(create)``).
- ``memory``: the magic committer writing one 1 GiB file (part sizes 8 and 32 MiB) in a fresh process: the peak
  resident memory above the process's baseline, from the kernel's high-water mark (``VmHWM``, reset through
  ``/proc/self/clear_refs`` just before the file is opened, so it is this write's peak), and its ratio to the part
  size.
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
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_commit_provider.protocol import make_committer, run_task_attempt  # noqa: E402
from benchmarks.shapes import merge_json, print_table  # noqa: E402
from benchmarks.syscalls import bench_syscalls  # noqa: E402

HERE = Path(__file__).resolve().parent
TMPFS = "/dev/shm"


def table_of(rows: int, partitions: int = 0, seed: int = 0) -> pa.Table:
    """*rows* rows (an id, a float and a short string); with *partitions*, a column ``p`` cycling through them."""
    cols: dict[str, Any] = {"id": pa.array(range(seed, seed + rows), pa.int64()),
                            "v": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
                            "s": pa.array([f"s{i % 97}" for i in range(rows)], pa.string())}
    if partitions:
        cols["p"] = pa.array([i % partitions for i in range(rows)], pa.int64())
    return pa.table(cols)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------- writers
def plain_one_file(root: str, tasks: int, table: pa.Table, durable: bool = False) -> None:
    """What a task writes without the protocol: one file per task straight into the output."""
    os.makedirs(root, exist_ok=True)
    for t in range(tasks):
        path = f"{root}/part-{t:05d}.parquet"
        pq.write_table(table, path, compression="snappy")
        if durable:
            fsync_path(path)
            fsync_path(root)


def ours_tasks(root: str, tasks: int, table: pa.Table, algorithm: Any = 1, partition_by: tuple[str, ...] = (),
               **kw: Any) -> tuple[float, float]:
    """Set up a job, run *tasks* task attempts writing *table* each (a fresh committer per task, as each Airflow
    task instance builds its own), commit the job: (task side seconds, job commit seconds)."""
    make_committer(root, "bench", algorithm=algorithm, mode="append", partition_by=partition_by, **kw).setup_job()
    t0 = time.perf_counter()
    for t in range(tasks):
        c = make_committer(root, "bench", algorithm=algorithm, mode="append", partition_by=partition_by, **kw)
        out = run_task_attempt(c, t, 1, lambda w: w.write(table))
        assert out.status == "committed", out
    t1 = time.perf_counter()
    make_committer(root, "bench", algorithm=algorithm, mode="append", partition_by=partition_by,
                   **kw).commit_job(tasks)
    return t1 - t0, time.perf_counter() - t1


def plain_partitioned(root: str, tables: list[pa.Table], durable: bool = False) -> None:
    """``write_to_dataset`` per task; *durable*: then every file, partition directory and the root fsynced after
    each task, the floor of a durable partitioned write."""
    for t, table in enumerate(tables):
        pq.write_to_dataset(table, root, partition_cols=["p"], basename_template=f"part-{t:05d}-{{i}}.parquet",
                            existing_data_behavior="overwrite_or_ignore")
        if durable:
            for d in os.scandir(root):
                for f in os.scandir(d.path):
                    if f.name.startswith(f"part-{t:05d}-"):
                        fsync_path(f.path)
                fsync_path(d.path)
            fsync_path(root)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def row(bench: str, fs: str, name: str, values: list[float], baseline: float | None = None,
        **extra: Any) -> dict[str, Any]:
    med = statistics.median(values)
    out = {"bench": bench, "fs": fs, "committer": name, "runs": len(values), "median_s": med, "min_s": min(values),
           "max_s": max(values), **extra}
    if baseline:
        out["x_baseline"] = med / baseline
    return out


def file_systems() -> list[tuple[str, str]]:
    out = [("disk", tempfile.gettempdir())]
    if os.path.isdir(TMPFS) and os.access(TMPFS, os.W_OK):
        out.append(("tmpfs", TMPFS))
    return out


# ---------------------------------------------------------------------------------------------------- (a) and (b)
def bench_one_file(tasks: int, runs: int) -> list[dict[str, Any]]:
    table = table_of(1000)
    rows = []
    for fs, where in file_systems():
        got: dict[str, list[float]] = {k: [] for k in ("plain", "plain+fsync", "ours", "ours_durable")}
        commits: dict[str, list[float]] = {"ours": [], "ours_durable": []}
        for _ in range(runs):
            base = tempfile.mkdtemp(prefix="bench-task-", dir=where)
            try:
                got["plain"].append(timed(lambda: plain_one_file(f"{base}/plain", tasks, table)))
                got["plain+fsync"].append(timed(lambda: plain_one_file(f"{base}/plainsync", tasks, table, True)))
                for name, durable in (("ours", False), ("ours_durable", True)):
                    t, j = ours_tasks(f"{base}/{name}", tasks, table, durable=durable)
                    got[name].append(t)
                    commits[name].append(j)
            finally:
                shutil.rmtree(base, ignore_errors=True)
        plain, floor = statistics.median(got["plain"]), statistics.median(got["plain+fsync"])
        bench = f"{tasks:,} one-file tasks x 1,000 rows (task side)"
        rows += [row(bench, fs, "plain pyarrow", got["plain"], plain, ms_per_task=1000 * plain / tasks),
                 row(bench, fs, "plain pyarrow + fsync", got["plain+fsync"], plain, x_durable_floor=1.0,
                     ms_per_task=1000 * floor / tasks),
                 row(bench, fs, "ours v1 durable=False", got["ours"], plain,
                     ms_per_task=1000 * statistics.median(got["ours"]) / tasks,
                     job_commit_s=statistics.median(commits["ours"])),
                 row(bench, fs, "ours v1 (durable)", got["ours_durable"], plain,
                     x_durable_floor=statistics.median(got["ours_durable"]) / floor,
                     ms_per_task=1000 * statistics.median(got["ours_durable"]) / tasks,
                     job_commit_s=statistics.median(commits["ours_durable"]))]
    return rows


def bench_partitioned(tasks: int, partitions: int, rows_per_task: int, runs: int) -> list[dict[str, Any]]:
    tables = [table_of(rows_per_task, partitions, seed=t * rows_per_task) for t in range(tasks)]
    out = []
    for fs, where in file_systems():
        got: dict[str, list[float]] = {"plain": [], "plain+fsync": [], "ours": [], "ours_durable": []}
        commits: dict[str, list[float]] = {"ours": [], "ours_durable": []}
        for _ in range(runs):
            base = tempfile.mkdtemp(prefix="bench-part-", dir=where)
            try:
                got["plain"].append(timed(lambda: plain_partitioned(f"{base}/plain", tables)))
                got["plain+fsync"].append(timed(lambda: plain_partitioned(f"{base}/plainsync", tables, True)))
                for name, durable in (("ours", False), ("ours_durable", True)):
                    root = f"{base}/{name}"
                    make_committer(root, "bench", mode="append", partition_by=("p",),
                                   durable=durable).setup_job()
                    t0 = time.perf_counter()
                    for t, table in enumerate(tables):
                        c = make_committer(root, "bench", mode="append", partition_by=("p",), durable=durable)
                        assert run_task_attempt(c, t, 1, lambda w, tb=table: w.write(tb)).status == "committed"
                    got[name].append(time.perf_counter() - t0)
                    commits[name].append(timed(lambda: make_committer(
                        root, "bench", mode="append", partition_by=("p",), durable=durable).commit_job(tasks)))
            finally:
                shutil.rmtree(base, ignore_errors=True)
        plain, floor = statistics.median(got["plain"]), statistics.median(got["plain+fsync"])
        bench = f"{tasks} tasks x {partitions} partitions x {rows_per_task:,} rows (task side)"
        out += [row(bench, fs, "plain pyarrow write_to_dataset", got["plain"], plain),
                row(bench, fs, "plain write_to_dataset + fsync", got["plain+fsync"], plain, x_durable_floor=1.0),
                row(bench, fs, "ours v1 durable=False", got["ours"], plain,
                    job_commit_s=statistics.median(commits["ours"])),
                row(bench, fs, "ours v1 (durable)", got["ours_durable"], plain,
                    x_durable_floor=statistics.median(got["ours_durable"]) / floor,
                    job_commit_s=statistics.median(commits["ours_durable"]))]
    return out


# ---------------------------------------------------------------------------------------------------- (d)
class RequestCounter:
    """Every request the process's S3 client makes, by operation (the botocore hook the store uses, too)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.methods: dict[str, str] = {}

    def __call__(self, model: Any = None, params: Any = None, **_: Any) -> None:
        name = getattr(model, "name", "unknown")
        headers = (params or {}).get("headers", {}) if isinstance(params, dict) else {}
        if name == "PutObject" and any(k.lower() == "if-none-match" for k in headers):
            name = "PutObject(create)"
        self.counts[name] += 1
        self.methods[name] = getattr(model, "http", {}).get("method", "?")

    def take(self) -> Counter[str]:
        out, self.counts = self.counts, Counter()
        return out


def bench_s3(tasks: int, files_per_task: int) -> list[dict[str, Any]]:
    import boto3
    import fsspec

    from tests.support import forget_s3_clients, start_moto

    proc, _url = start_moto(os.environ)
    forget_s3_clients()
    out = []
    table = table_of(100 * files_per_task)  # max_rows_per_file=100: files_per_task files a task
    try:
        s3 = boto3.client("s3")
        for alg in (1, 2, "magic"):
            bucket = f"task-side-{alg}"
            s3.create_bucket(Bucket=bucket)
            root = f"s3://{bucket}/out"
            fs, _ = fsspec.core.url_to_fs(root)
            fs.connect()
            counter = RequestCounter()
            fs.s3.meta.events.register("before-call.s3", counter)
            kw = {"part_size": 5 * 2**20} if alg == "magic" else {}
            make_committer(root, "bench", algorithm=alg, mode="append", **kw).setup_job()
            setup = counter.take()
            for t in range(tasks):
                c = make_committer(root, "bench", algorithm=alg, mode="append", **kw)
                assert run_task_attempt(c, t, 1, lambda w: w.write(table), max_rows_per_file=100).status \
                    == "committed"
            task_side = counter.take()
            manifest = make_committer(root, "bench", algorithm=alg, mode="append", **kw).commit_job(tasks)
            commit = counter.take()
            fs.s3.meta.events.unregister("before-call.s3", counter)
            n = tasks * files_per_task
            total = sum(setup.values()) + sum(task_side.values()) + sum(commit.values())
            in_success = sum(sum(v.values()) for v in manifest["diagnostics"]["requests"].values())
            name = f"ours {alg}" if alg == "magic" else f"ours v{alg}"
            per_type = {op: v / tasks for op, v in sorted(task_side.items())}
            out.append({"bench": f"s3 (moto) {tasks} tasks x {files_per_task} files", "committer": name,
                        "requests": total, "requests_per_file": total / n,
                        "setup": sum(setup.values()), "task_side_per_task": sum(task_side.values()) / tasks,
                        "job_commit": sum(commit.values()), "job_commit_in_success": in_success,
                        "task_requests_by_op": per_type,
                        "http_methods": {op: counter.methods.get(op, "?") for op in per_type}})
    finally:
        proc.terminate()
        proc.wait()
        forget_s3_clients()
    return out


# ---------------------------------------------------------------------------------------------------- (e)
_MEMORY_CHILD = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {repo!r})
    from airflow_commit_provider.protocol import make_committer, TaskAttemptWriter
    import boto3
    part, total = int(sys.argv[1]), int(sys.argv[2])
    bucket = "mem-" + sys.argv[1]
    boto3.client("s3").create_bucket(Bucket=bucket)
    def status(key):
        return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) * 1024
    c = make_committer(f"s3://{{bucket}}/out", "mem", algorithm="magic", mode="append", part_size=part)
    c.setup_job()
    ta = c.setup_task(0, 1)
    chunk = os.urandom(1 << 20)
    w = TaskAttemptWriter(c, ta)
    # warm the client (connection pool, credentials, signing): one small file, then measure a fresh peak
    with w.open_file(extension="dat") as fh:
        fh.write(chunk)
    baseline = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    with w.open_file(extension="dat") as fh:
        for _ in range(total // len(chunk)):
            fh.write(chunk)
    peak = status("VmHWM")
    w.close()
    c.commit_task(ta, w.rows, sizes=w.sizes)
    print(json.dumps({{"baseline": baseline, "peak": peak}}))
""")


def bench_memory(total: int, part_sizes: list[int]) -> list[dict[str, Any]]:
    from tests.support import start_moto

    env = dict(os.environ)
    proc, _url = start_moto(env)
    out = []
    try:
        for part in part_sizes:
            res = subprocess.run([sys.executable, "-c", _MEMORY_CHILD.format(repo=str(HERE.parent)), str(part),
                                  str(total)], env=env, capture_output=True, text=True, check=True)
            got = json.loads(res.stdout.strip().splitlines()[-1])
            above = got["peak"] - got["baseline"]
            out.append({"bench": f"magic peak memory, one {total / 2**30:.2f} GiB file", "committer": "ours magic",
                        "part_mib": part / 2**20, "baseline_mb": got["baseline"] / 1e6, "peak_mb": got["peak"] / 1e6,
                        "above_baseline_mb": above / 1e6, "x_part_size": above / part})
    finally:
        proc.terminate()
        proc.wait()
    return out


# ---------------------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one run, 200 one-file tasks, 256 MiB for memory")
    parser.add_argument("--only", default="one_file,partitioned,syscalls,s3,memory")
    parser.add_argument("--json", default="benchmarks/results.json")
    args = parser.parse_args()
    only = set(args.only.split(","))
    runs = 1 if args.quick else 3
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
               "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    head = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False,
                          cwd=HERE.parent).stdout.strip()
    print(f"machine: {machine} at {head}")
    doc: dict[str, Any] = {"machine": machine, "commit": head, "runs": runs}
    cols = ["fs", "committer", "runs", "median_s", "min_s", "max_s", "x_baseline", "x_durable_floor", "ms_per_task",
            "job_commit_s"]
    if "one_file" in only:
        doc["one_file"] = rows = bench_one_file(200 if args.quick else 1000, runs)
        print_table(rows[0]["bench"] + "; x_baseline: over plain pyarrow", rows, cols)
    if "partitioned" in only:
        doc["partitioned"] = rows = bench_partitioned(8, 100, 100_000, runs)
        print_table(rows[0]["bench"] + "; x_baseline: over plain pyarrow", rows, cols[:7] + ["job_commit_s"])
    if "syscalls" in only:
        doc["syscalls"] = rows = bench_syscalls(20 if args.quick else 100)
        keys = list(dict.fromkeys(k for r in rows for k in r if k not in ("bench", "fs", "committer")))
        print_table(rows[0]["bench"], rows, ["fs", "committer", *keys])
    if "s3" in only:
        doc["s3"] = rows = bench_s3(100, 10)
        print_table(rows[0]["bench"] + ": requests over the whole job", rows,
                    ["committer", "requests", "requests_per_file", "setup", "task_side_per_task", "job_commit",
                     "job_commit_in_success"])
        ops = list(dict.fromkeys(op for r in rows for op in r["task_requests_by_op"]))
        methods = {op: m for r in rows for op, m in r["http_methods"].items()}
        print_table("s3 task side: requests per task by operation (HTTP method)",
                    [{"committer": r["committer"], **{f"{op} {methods[op]}": r["task_requests_by_op"].get(op, 0.0)
                                                      for op in ops}} for r in rows],
                    ["committer", *[f"{op} {methods[op]}" for op in ops]])
    if "memory" in only:
        doc["memory"] = rows = bench_memory(2**28 if args.quick else 2**30, [8 * 2**20, 32 * 2**20])
        print_table(rows[0]["bench"] + " (VmHWM reset before the file, minus VmRSS before it)", rows,
                    ["committer", "part_mib", "baseline_mb", "peak_mb", "above_baseline_mb", "x_part_size"])
    merge_json(args.json, "task_side", doc)


if __name__ == "__main__":
    main()
