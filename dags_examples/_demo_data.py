"""Shared by the example DAGs: where they write, and the synthetic data they write.

``COMMIT_DEMO_ROOT`` (default ``/tmp/airflow-commit-demo``) is the local directory the examples write under;
``COMMIT_DEMO_CALLS``, when set, is a file to which every call of a user callable is appended (tests use it to
prove that recovered tasks did not run again). The leading ``_`` keeps the DAG processor from parsing this file.
"""

from __future__ import annotations

import os

import pyarrow as pa

ROOT = os.environ.get("COMMIT_DEMO_ROOT", "/tmp/airflow-commit-demo")
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
SHARDS = 4
ROWS_PER_SHARD = 3000


def record_call(name: str, ti) -> None:
    path = os.environ.get("COMMIT_DEMO_CALLS")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{ti.dag_id} {name} {ti.map_index} {ti.try_number}\n")


def events(shard: int, rows: int = ROWS_PER_SHARD) -> pa.Table:
    """Synthetic events of one shard; event ids are unique across shards."""
    return pa.table({
        "event_id": pa.array([shard * rows + i for i in range(rows)], pa.int64()),
        "shard": pa.array([shard] * rows, pa.int32()),
        "day": [DAYS[i % len(DAYS)] for i in range(rows)],
        "amount": pa.array([((shard * rows + i) * 7919) % 10000 / 100 for i in range(rows)], pa.float64()),
    })
