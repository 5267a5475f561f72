"""What the audit's column statistics cost the job commit (issue 35).

``python -m benchmarks.audit_stats [--n 5000] [--columns 10] [--runs 3] [--json FILE]`` writes N one-row tasks
through the writer (``run_task_attempt``: every task commit records its statistics, one partition, *columns*
columns), ``durable=False`` on a local disk, and times ``commit_job(defer_cleanup=True)``; it prints the medians
and the size of one task record. ``python -m benchmarks.versions --bench audit_stats --ref <a commit before the
audit>`` runs it over both packages alternately: the one whose records carry no statistics is the comparison.
One-row tasks are the worst case: the statistics grow with the columns, the data they describe does not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_commit_provider.protocol import make_committer, run_task_attempt  # noqa: E402
from benchmarks.shapes import merge_json  # noqa: E402


def one_commit(base: str, n: int, columns: int) -> tuple[float, int]:
    """Seconds of the job commit of *n* one-row tasks, and the bytes of one task record."""
    table = pa.table({**{f"c{i}": pa.array([i], pa.int64()) for i in range(columns - 1)}, "day": ["d0"]})
    root = os.path.join(base, f"job-{time.time_ns()}")
    c = make_committer(root, "bench", mode="append", partition_by=["day"], durable=False)
    c.setup_job()
    for t in range(n):
        run_task_attempt(c, t, 1, lambda w: w.write(table))
    size = os.path.getsize(os.path.join(root, "_temporary", "bench", "0", "_commits", "task_00000.json"))
    os.sync()
    t0 = time.perf_counter()
    c.commit_job(n, defer_cleanup=True)
    seconds = time.perf_counter() - t0
    shutil.rmtree(root, ignore_errors=True)
    return seconds, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--columns", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="bench-audit-stats-")
    try:
        runs = [one_commit(base, args.n, args.columns) for _ in range(args.runs)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    median = statistics.median(s for s, _ in runs)
    print(f"job commit of {args.n} one-row tasks of {args.columns} columns: {median * 1000:.0f} ms (median of "
          f"{args.runs}); one task record {runs[0][1]} bytes")
    if args.json:
        merge_json(args.json, "audit_stats", {"rows": [{"bench": "audit_stats", "n": args.n, "shape": args.columns,
                                                        "median": median, "record_bytes": runs[0][1]}]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
