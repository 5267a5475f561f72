"""An overwrite that never leaves the target missing, preceded by the ensure-target pre-task.

Old data is deleted only at job commit, after the new data is in place; the ensure-target pre-task (also usable
in front of Spark or Hive writers) re-creates the target if something deleted it, so a retried writer never
fails with "Path does not exist".
"""

from __future__ import annotations

import os
from datetime import datetime

import pyarrow as pa
from _demo_data import ROOT, record_call
from airflow.sdk import DAG

from airflow_commit_provider.operators.stage import commit_stage


def daily_totals(ti):
    record_call("daily_totals", ti)
    return pa.table({"day": ["2024-01-01", "2024-01-02"], "total": [1234.5, 987.25]})


with DAG("commit_overwrite", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example"]) as dag:
    commit_stage("write_totals", target=os.path.join(ROOT, "daily_totals"), python_callable=daily_totals,
                 algorithm=1, mode="overwrite", ensure_target=True)
