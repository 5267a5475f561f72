"""A partitioned Parquet write: four shards, partitioned by day, committed with FileOutputCommitter v1.

Each shard is one mapped task (task number = map index). Re-running a day's DAG run replaces only what that run
wrote before (mode ``dynamic``: the partitions this job writes are replaced, others are kept).
"""

from __future__ import annotations

import os
from datetime import datetime

from _demo_data import ROOT, SHARDS, events, record_call
from airflow.sdk import DAG, Asset

from airflow_commit_provider.operators.stage import commit_stage

TARGET = os.path.join(ROOT, "events")


def load_shard(shard: int, ti):
    record_call("load_shard", ti)
    return events(shard)


with DAG("commit_partitioned_write", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example"]) as dag:
    commit_stage("write_events", target=TARGET, python_callable=load_shard,
                 expand_op_kwargs=[{"shard": s} for s in range(SHARDS)], algorithm=1, mode="dynamic",
                 partition_by=["day"], outlets=[Asset("commit_demo_events", uri=f"file://{TARGET}")])
