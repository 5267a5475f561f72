"""Writing to S3 with the zero-copy "magic" committer, through an Airflow connection.

Every file is a multipart upload to its final key, completed only at job commit: nothing is visible before,
nothing is copied. Set ``COMMIT_DEMO_S3_TARGET`` (default ``s3://commit-demo/events``) and define the connection
``commit_s3`` (``AIRFLOW_CONN_COMMIT_S3``; an ``endpoint_url`` in its extra points it at MinIO or moto).
"""

from __future__ import annotations

import os
from datetime import datetime

from _demo_data import SHARDS, events, record_call
from airflow.sdk import DAG

from airflow_commit_provider.operators.stage import commit_stage

TARGET = os.environ.get("COMMIT_DEMO_S3_TARGET", "s3://commit-demo/events")


def load_shard(shard: int, ti):
    record_call("load_shard_s3", ti)
    return events(shard)


with DAG("commit_s3_magic", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example", "s3"]) as dag:
    commit_stage("write_events", target=TARGET, conn_id="commit_s3", python_callable=load_shard,
                 expand_op_kwargs=[{"shard": s} for s in range(SHARDS)], algorithm="magic", mode="overwrite",
                 partition_by=["day"], ensure_target=True)
