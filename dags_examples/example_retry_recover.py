"""Tasks killed midway through their first try: every first try writes half its rows and then fails.

Each retry is a new task attempt; the failed attempt's files are removed (it is recorded as failed, so it can
never commit later), the retry commits, and the output holds every row exactly once.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from _demo_data import ROOT, SHARDS, events, record_call
from airflow.sdk import DAG

from airflow_commit_provider.operators.stage import commit_stage


def load_shard_flaky(shard: int, ti):
    record_call("load_shard_flaky", ti)
    table = events(shard)
    half = table.num_rows // 2
    yield table.slice(0, half)
    if ti.try_number == 1:
        raise RuntimeError(f"shard {shard}: worker lost midway through its first try (simulated)")
    yield table.slice(half)


with DAG("commit_retry_recover", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example"]) as dag:
    commit_stage("write_events", target=os.path.join(ROOT, "events_retried"), python_callable=load_shard_flaky,
                 expand_op_kwargs=[{"shard": s} for s in range(SHARDS)], algorithm=1, mode="overwrite",
                 partition_by=["day"], write_retries=2,
                 write_kwargs={"retry_delay": timedelta(seconds=1), "max_rows_per_file": 500})
