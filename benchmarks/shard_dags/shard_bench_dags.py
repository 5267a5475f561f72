"""DAGs of ``benchmarks/shards.py``: the same ``SHARD_BENCH_WRITES`` one-file writes (100 rows each) as one commit
stage of that many task instances, as a stage of ``writes / SHARD_BENCH_SHARDS`` task instances of
``SHARD_BENCH_SHARDS`` shards each, and as plain mapped ``PythonOperator``s writing the files straight into the
target, unprotected, in both shapes. Targets are ``<root>/<dag_id>/<run_id>``: the root is ``SHARD_BENCH_ROOT``
(``s3://...`` on Celery, through the connection ``SHARD_BENCH_CONN_ID``, which the plain writes use too: the same
s3fs file system, credentials and endpoint as the stage's) or else the local ``COMMIT_TEST_ROOT``.
"""

from __future__ import annotations

import os
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, ObjectStoragePath

from airflow_commit_provider.operators.stage import commit_stage

ROOT = os.environ.get("SHARD_BENCH_ROOT") or os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
CONN_ID = os.environ.get("SHARD_BENCH_CONN_ID") or None
WRITES = int(os.environ.get("SHARD_BENCH_WRITES", "1000"))
SHARDS = int(os.environ.get("SHARD_BENCH_SHARDS", "10"))
ROWS = 100
TARGET = "%s/{{ dag.dag_id }}/{{ run_id }}" % ROOT


def table(n: int) -> pa.Table:
    return pa.table({"write": pa.array([n] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32())})


def stage_write(task_number: int) -> pa.Table:
    """One write of the stage (task number = the write's number, whatever the shape)."""
    return table(task_number)


def plain_write(first: int, count: int, dag, run_id) -> None:
    """Writes *first* .. *first + count - 1*, straight into the target: no attempt, no commit, no recovery."""
    if "://" in ROOT:  # object storage: one file system per task instance, as the stage's write task has
        target = ObjectStoragePath(f"{ROOT}/{dag.dag_id}/{run_id}", conn_id=CONN_ID)
        for n in range(first, first + count):
            pq.write_table(table(n), f"{target.path}/part-{n:05d}.parquet", filesystem=target.fs)
        return
    target = os.path.join(ROOT, dag.dag_id, run_id)
    os.makedirs(target, exist_ok=True)
    for n in range(first, first + count):
        pq.write_table(table(n), os.path.join(target, f"part-{n:05d}.parquet"))


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks=64,
               tags=["airflow-commit-provider-bench"])


with _dag("sb_stage_instances"):
    commit_stage("stage", target=TARGET, python_callable=stage_write, expand_op_kwargs=[{}] * WRITES,
                 conn_id=CONN_ID, mode="append")

with _dag("sb_stage_shards"):
    commit_stage("stage", target=TARGET, python_callable=stage_write, expand_op_kwargs=[{}] * (WRITES // SHARDS),
                 shards_per_task=SHARDS, conn_id=CONN_ID, mode="append")

with _dag("sb_plain_shards"):
    PythonOperator.partial(task_id="write", python_callable=plain_write).expand(
        op_kwargs=[{"first": i * SHARDS, "count": SHARDS} for i in range(WRITES // SHARDS)])

with _dag("sb_plain_instances"):
    PythonOperator.partial(task_id="write", python_callable=plain_write).expand(
        op_kwargs=[{"first": i, "count": 1} for i in range(WRITES)])
