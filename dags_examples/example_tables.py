"""The same write stage publishing into a Delta Lake table and an Apache Iceberg table, each job commit one table
transaction.

Four shards, partitioned by day: the Delta table at ``<root>/events_delta`` (``commit_stage``, mode ``append``),
the Iceberg table ``demo.events`` in a SQL catalog on SQLite in ``<root>/warehouse`` (``@task.commit_stage``,
mode ``dynamic``). Clearing a successful run is a new generation of the same job: its one transaction replaces
what the earlier one added, so rows are never added twice, in ``append`` mode too. Needs the ``delta`` and
``iceberg`` extras.
"""

from __future__ import annotations

import os
from datetime import datetime

from _demo_data import ROOT, SHARDS, events, record_call
from airflow.sdk import DAG, Asset, task

from airflow_commit_provider.operators.stage import commit_stage

DELTA_TABLE = os.path.join(ROOT, "events_delta")
WAREHOUSE = os.path.join(ROOT, "warehouse")


def load_shard(shard: int, ti):
    record_call("load_shard", ti)
    return events(shard)


with DAG("commit_tables", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example"]) as dag:
    commit_stage("write_delta", target=DELTA_TABLE, table_format="delta", python_callable=load_shard,
                 expand_op_kwargs=[{"shard": s} for s in range(SHARDS)], mode="append", partition_by=["day"],
                 outlets=[Asset("commit_demo_events_delta", uri=f"file://{DELTA_TABLE}")])

    @task.commit_stage(target=WAREHOUSE, table_format="iceberg", table_name="demo.events", mode="dynamic",
                       partition_by=["day"])
    def write_iceberg(shard: int, ti=None):
        record_call("write_iceberg", ti)
        return events(shard)

    write_iceberg.expand(shard=list(range(SHARDS)))
