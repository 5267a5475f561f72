"""What a reader can miss during a compaction's job commit, and for how long.

``python -m benchmarks.compaction_window [--files 100,1000,5000] [--runs 5]`` prints a table and writes
``benchmarks/compaction_window.json``.

A table of N one-file-per-write small Parquet files (10 rows each) in 10 partitions is compacted on the local disk
into one file per partition (``compact()``, v1). The compaction's job commit deletes every input, then renames the
merged files in (``replace_first``: the merged files hold the same rows, so a reader never sees a row twice).
Measured from the commit's own stage clock (``_SUCCESS.durations``):

- *missing window*: the ``moves`` stage, from the first input deleted to the last merged file published. A reader
  that lists the directory directly in that window misses rows: every compacted row once the deletions are done
  (they all come before the first merged file), then fewer as each merged file lands;
- *no-marker window*: from the withdrawal of ``_SUCCESS`` to the new one; a ``_SUCCESS``-gated reader waits
  through it and never sees the table with rows missing.

A crash inside the missing window extends it until the compaction is run again (its commit is then resumed from its
plan); the rows are committed under ``_temporary`` meanwhile, never lost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from airflow_commit_provider.protocol import FileOutputCommitter  # noqa: E402
from airflow_commit_provider.protocol.maintenance.compaction import compact  # noqa: E402

PARTITIONS = 10
ROWS = 10


def small_files(root: str, n: int) -> None:
    for i in range(n):
        part = f"{root}/p={i % PARTITIONS}"
        os.makedirs(part, exist_ok=True)
        pq.write_table(pa.table({"id": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())}),
                       f"{part}/small-{i:06d}.parquet")


def one_run(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = f"{tmp}/table"
        small_files(root, n)
        result = compact(FileOutputCommitter(root, "compact", algorithm=1, mode="append"), 1, 2**30)
        assert result["totals"]["rows"] == n * ROWS and result["inputs"] == n
        d = result["durations"]
        no_marker = d["withdraw"] + d["moves"] + d["deletes"] + d["commit_log"] + d["markers"]
        return {"missing_ms": d["moves"] * 1000, "no_marker_ms": no_marker * 1000, "job_commit_ms": d["total"] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="100,1000,5000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    print(f"{'inputs':>7} {'missing window (ms)':>20} {'no marker (ms)':>15} {'job commit (ms)':>16}")
    for n in (int(x) for x in args.files.split(",")):
        runs = [one_run(n) for _ in range(args.runs)]
        row = {"inputs": n, "partitions": PARTITIONS, "runs": args.runs,
               **{k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}}
        results.append(row)
        print(f"{n:>7} {row['missing_ms']:>20} {row['no_marker_ms']:>15} {row['job_commit_ms']:>16}")
    out = Path(__file__).with_name("compaction_window.json")
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
