"""What durability costs (issue 19): the local store with and without fsync, at every task shape, against two floors.

``python -m benchmarks.durability [--n 1000,10000] [--runs 3] [--dir DIR] [--json benchmarks/results.json]``
prepares a job of N one-row Parquet files at each shape (tasks x files per task, as :mod:`benchmarks.shapes`),
v1 and v2, once with ``durable=True`` (the default) and once with ``durable=False``, on the file system of
``--dir`` (default: the system's temporary directory), and prints medians:

- ``task_side_s``: the write stage, every task's set-up, writes and task commit, one after the other (in Airflow
  they run in parallel workers; this is their sum), where the durable store fsyncs each attempt's files;
- ``commit_job_s``: ``commit_job(defer_cleanup=True)``, what the Airflow commit task waits for;
- ``floor_s``: a plain ``os.rename`` loop over N files between two directories (no fsync: what a commit that
  does not survive a power cut could cost at best);
- ``durable_floor_s``: the same loop plus what any correct publisher needs on top: the two directories fsynced
  after the renames and a ``_SUCCESS`` written durably (file fsync, rename, directory fsync);
- ``x_floor`` and ``x_durable_floor``: ``commit_job_s`` over each floor.

Stored under the key "durability" of the JSON file (other keys kept).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import floor_files, prepare_job, rename_floor
from benchmarks.shapes import merge_json, print_table, shapes


def fsync_dir(path: str) -> None:
    """A directory's entries made durable, with the system's calls: the floor is measured without the package under
    test (:mod:`benchmarks.jobcommit` measures releases that had no durability module)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_floor(base: str, n: int) -> float:
    """:func:`rename_floor` plus the fsyncs no correct publisher can skip: both directories after the renames,
    and a small ``_SUCCESS`` made durable before its name (the files' own data was made durable by the writers)."""
    src, dst = floor_files(base, n)
    os.sync()
    t0 = time.perf_counter()
    for i in range(n):
        os.rename(os.path.join(src, f"f{i}.parquet"), os.path.join(dst, f"f{i}.parquet"))
    fsync_dir(dst)
    fsync_dir(src)
    tmp = os.path.join(dst, "._SUCCESS.tmp")
    with open(tmp, "wb") as fh:
        fh.write(b"{}" * 100)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, os.path.join(dst, "_SUCCESS"))
    fsync_dir(dst)
    return time.perf_counter() - t0


def one_run(base: str, n: int, tasks: int, fpt: int, alg: int, durable: bool) -> tuple[float, float]:
    """(task side seconds, commit_job seconds) of one job."""
    root = os.path.join(base, f"{tasks}x{fpt}-v{alg}-{'durable' if durable else 'fast'}")
    t0 = time.perf_counter()
    c, tasks = prepare_job(root, n, alg, files_per_task=fpt, durable=durable)
    task_side = time.perf_counter() - t0
    os.sync()  # each job starts from a clean page cache state: no other job's writeback in its fsyncs
    t1 = time.perf_counter()
    c.commit_job(tasks, defer_cleanup=True)
    commit = time.perf_counter() - t1
    c.remove_trash()
    return task_side, commit


def bench(sizes: list[int], runs: int, where: str | None) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        floors: list[float] = []
        dfloors: list[float] = []
        got: dict[tuple[int, int, int, bool], list[tuple[float, float]]] = defaultdict(list)
        for _ in range(runs):
            base = tempfile.mkdtemp(prefix="bench-durability-", dir=where)
            try:
                floors.append(rename_floor(os.path.join(base, "floor"), n))
                dfloors.append(durable_floor(os.path.join(base, "dfloor"), n))
                for tasks, fpt in shapes(n):
                    for alg in (1, 2):
                        for durable in (False, True):  # alternating, so that drift hits both alike
                            got[(tasks, fpt, alg, durable)].append(one_run(base, n, tasks, fpt, alg, durable))
            finally:
                shutil.rmtree(base, ignore_errors=True)
        floor, dfloor = statistics.median(floors), statistics.median(dfloors)
        for (tasks, fpt, alg, durable), samples in sorted(got.items(), key=lambda kv: (-kv[0][0], kv[0][2],
                                                                                         kv[0][3])):
            commit = statistics.median(c for _, c in samples)
            rows.append({"n": n, "shape": f"{tasks}x{fpt}", "alg": f"v{alg}", "durable": durable,
                         "runs": len(samples), "task_side_s": statistics.median(t for t, _ in samples),
                         "task_side_per_task_ms": 1000 * statistics.median(t for t, _ in samples) / tasks,
                         "commit_job_s": commit, "floor_s": floor, "durable_floor_s": dfloor,
                         "x_floor": commit / floor, "x_durable_floor": commit / dfloor})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="1000", help="comma-separated file counts (default 1000)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the jobs run (its file system is what is measured)")
    parser.add_argument("--json", default="benchmarks/results.json")
    args = parser.parse_args()
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
               "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    print(f"machine: {machine}")
    rows = bench([int(x) for x in args.n.split(",")], args.runs, args.dir)
    print_table("durability: local store with and without fsync (seconds; medians; commit_job over both floors)",
                rows, ["n", "shape", "alg", "durable", "task_side_s", "task_side_per_task_ms", "commit_job_s",
                       "floor_s", "durable_floor_s", "x_floor", "x_durable_floor"])
    merge_json(args.json, "durability", {"machine": machine, "runs": args.runs, "rows": rows,
                                         "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


if __name__ == "__main__":
    main()
