"""What a table commit costs (issue 24): a write stage into a Delta or Iceberg table, against the format's own
writer given the same data, in the same run.

``python -m benchmarks.tables [--tasks 4,16] [--rows 50000] [--runs 3] [--dir DIR] [--json FILE]`` writes, for
each format and task count, the same rows (``--rows`` per task, partitioned by ``day`` into 4 partitions) two
ways into fresh tables, and prints medians:

- ``ours_write_s``: the write stage, every task's set-up, Parquet writes and task commit, one after the other (in
  Airflow they run in parallel workers; this is their sum);
- ``ours_commit_s``: ``commit_job`` (recovery, plan with the schema check, moves, the one table transaction,
  commit log, ``_SUCCESS``); ``table_commit_s`` the transaction alone, from the manifest's stage times;
- ``ours_total_s``: the two together;
- ``plain_s``: ``write_deltalake(uri, data, mode="append", partition_by=["day"])`` (Delta) or ``table.append(data)``
  on a table created with the same partition spec (Iceberg, the same SQL catalog on SQLite): one process, one call,
  the data already in memory as one Arrow table, and no exactly-once across processes;
- ``x_plain``: ``ours_total_s`` over ``plain_s``.

Ours runs with ``durable=False`` unless ``--durable``: neither ``write_deltalake`` nor pyiceberg fsyncs what it
writes, so that is the like-for-like comparison; ``--durable`` adds the committer's default fsyncs.

With ``--json``, stored under the key "tables" of that JSON file (other keys kept).
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
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt  # noqa: E402
from airflow_commit_provider.protocol.tables import table_target  # noqa: E402
from benchmarks.shapes import merge_json, print_table  # noqa: E402


def task_data(task: int, rows: int) -> pa.Table:
    ids = pa.array(range(task * rows, (task + 1) * rows), pa.int64())
    return pa.table({"id": ids, "day": pa.array([i % 4 for i in range(rows)], pa.int64()),
                     "amount": pa.array([(i * 7919) % 10000 / 100 for i in range(rows)], pa.float64()),
                     "name": pa.array([f"user-{i % 1000}" for i in range(rows)])})


def where(fmt: str, base: str) -> dict[str, Any]:
    return {"location": os.path.join(base, "t")} if fmt == "delta" else \
        {"location": os.path.join(base, "wh"), "table_name": "bench.events"}


def ours(fmt: str, base: str, tasks: int, data: list[pa.Table], durable: bool) -> tuple[float, float, float]:
    """(write stage seconds, commit_job seconds, table transaction seconds) of one job into a new table."""
    w = where(fmt, base)
    table = table_target(fmt, w["location"], table_name=w.get("table_name"))
    c = FileOutputCommitter(table.data_root, "bench", mode="append", partition_by=["day"], table=table,
                            durable=durable)
    t0 = time.perf_counter()
    c.setup_job()
    for t in range(tasks):
        run_task_attempt(c, t, 1, lambda wr, t=t: wr.write(data[t]))
    t1 = time.perf_counter()
    manifest = c.commit_job(tasks)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, manifest["durations"]["table_commit"]


def plain(fmt: str, base: str, data: pa.Table) -> float:
    """Seconds of the format's own writer appending *data* to a new table (created outside the timing)."""
    w = where(fmt, base)
    if fmt == "delta":
        from deltalake import write_deltalake
        t0 = time.perf_counter()
        write_deltalake(w["location"], data, mode="append", partition_by=["day"])
        return time.perf_counter() - t0
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    from airflow_commit_provider.protocol.tables.iceberg import IcebergTarget
    target = IcebergTarget.open(w["table_name"], None, w["location"])
    schema = target.catalog._convert_schema_if_needed(data.schema)
    from pyiceberg.schema import assign_fresh_schema_ids
    schema = assign_fresh_schema_ids(schema)
    spec = PartitionSpec(PartitionField(source_id=schema.find_field("day").field_id, field_id=1000,
                                        transform=IdentityTransform(), name="day"))
    table = target.catalog.create_table(w["table_name"], schema=schema, partition_spec=spec)
    t0 = time.perf_counter()
    table.append(data)
    return time.perf_counter() - t0


def bench(formats: list[str], task_counts: list[int], rows: int, runs: int, root: str | None,
          durable: bool) -> list[dict]:
    out = []
    for fmt in formats:
        for tasks in task_counts:
            data = [task_data(t, rows) for t in range(tasks)]
            whole = pa.concat_tables(data)
            got: dict[str, list[float]] = {"w": [], "c": [], "tx": [], "p": []}
            for run in range(runs + 1):   # the first run warms imports and caches up: not counted
                base = tempfile.mkdtemp(dir=root, prefix="bench-tables-")
                try:
                    w, c, tx = ours(fmt, os.path.join(base, "ours"), tasks, data, durable)
                    p = plain(fmt, os.path.join(base, "plain"), whole)
                    if run:
                        for key, value in (("w", w), ("c", c), ("tx", tx), ("p", p)):
                            got[key].append(value)
                finally:
                    shutil.rmtree(base, ignore_errors=True)
            med = {k: statistics.median(v) for k, v in got.items()}
            out.append({"format": fmt, "tasks": tasks, "rows": tasks * rows, "ours_write_s": med["w"],
                        "ours_commit_s": med["c"], "table_commit_s": med["tx"], "ours_total_s": med["w"] + med["c"],
                        "plain_s": med["p"], "x_plain": (med["w"] + med["c"]) / med["p"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--formats", default="delta,iceberg")
    parser.add_argument("--tasks", default="4,16", help="comma-separated task counts")
    parser.add_argument("--rows", type=int, default=50_000, help="rows per task")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the tables are written (default: the temp directory)")
    parser.add_argument("--durable", action="store_true",
                        help="fsync as the default committer does (the format's own writers do not)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = bench(args.formats.split(","), [int(x) for x in args.tasks.split(",")], args.rows, args.runs, args.dir,
                 args.durable)
    print_table(f"table commits vs the format's own writer (medians of {args.runs}, durable={args.durable}; "
                f"{platform.platform()}, {os.cpu_count()} cpus)", rows,
                ["format", "tasks", "rows", "ours_write_s", "ours_commit_s", "table_commit_s", "ours_total_s",
                 "plain_s", "x_plain"])
    if args.json:
        merge_json(args.json, "tables", {"rows": rows, "platform": platform.platform()})


if __name__ == "__main__":
    main()
