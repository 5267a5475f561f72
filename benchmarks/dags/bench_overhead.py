"""Two DAGs writing the same 8 Parquet shards of ``BENCH_ROWS`` rows (default 50,000): plainly (PythonOperator,
pq.write_table) and through the commit stage. The benchmark compares their dag.test() wall times."""

from __future__ import annotations

import os
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_commit_provider.operators.stage import commit_stage

ROOT = os.environ.get("BENCH_ROOT", "/tmp/bench-overhead")
SHARDS, ROWS = 8, int(os.environ.get("BENCH_ROWS", "50000"))


def shard_table(shard: int) -> pa.Table:
    import pyarrow.compute as pc

    ids = pa.array(range(shard * ROWS, (shard + 1) * ROWS), pa.int64())
    return pa.table({"id": ids, "value": pc.cast(pc.divide(ids, 7), pa.float64())})


def plain_write(shard: int) -> None:
    os.makedirs(f"{ROOT}/plain", exist_ok=True)
    pq.write_table(shard_table(shard), f"{ROOT}/plain/part-{shard:05d}.parquet")


with DAG("bench_plain", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as bench_plain:
    PythonOperator.partial(task_id="write", python_callable=plain_write).expand(
        op_kwargs=[{"shard": s} for s in range(SHARDS)])

with DAG("bench_commit", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as bench_commit:
    commit_stage("stage", target=f"{ROOT}/committed", python_callable=shard_table,
                 expand_op_kwargs=[{"shard": s} for s in range(SHARDS)], algorithm=1, mode="overwrite")
