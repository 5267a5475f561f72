"""An overwrite that never leaves the target missing, then a Spark-like writer guarded before every try.

``write_totals``: old data is deleted only at job commit, after the new data is in place; the stage's
ensure-target pre-task creates the target if it is missing.

``insert_overwrite_report`` stands in for Spark's ``INSERT OVERWRITE`` (a ``SparkSubmitOperator`` in real life): it
checks that its table path exists (Spark fails with "Path does not exist" otherwise), deletes it, then writes.
Its first try dies right after the delete (simulated). An upstream pre-task would not help: Airflow retries only
the writer. ``pre_execute=ensure_target_before_each_try(...)`` re-creates the path before each of its tries, so
the retry finds it.
"""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _demo_data import ROOT, record_call
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_commit_provider.operators.ensure_target import ensure_target_before_each_try
from airflow_commit_provider.operators.stage import commit_stage

TOTALS = os.path.join(ROOT, "daily_totals")
REPORT = os.path.join(ROOT, "daily_totals_report")


def daily_totals(ti):
    record_call("daily_totals", ti)
    return pa.table({"day": ["2024-01-01", "2024-01-02"], "total": [1234.5, 987.25]})


def insert_overwrite_report(ti):
    """INSERT OVERWRITE TABLE report SELECT day, total * 100 AS cents FROM daily_totals, as Spark runs it."""
    record_call("insert_overwrite_report", ti)
    if not os.path.isdir(REPORT):
        raise FileNotFoundError(f"Path does not exist: file:{REPORT}")
    shutil.rmtree(REPORT)
    if ti.try_number == 1:
        raise RuntimeError("application attempt lost after deleting the table path (simulated)")
    totals = pq.read_table(TOTALS)
    os.makedirs(REPORT)
    pq.write_table(pa.table({"day": totals["day"], "cents": pc.multiply(totals["total"], 100)}),
                   os.path.join(REPORT, "part-00000.parquet"))


with DAG("commit_overwrite", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example"]) as dag:
    stage = commit_stage("write_totals", target=TOTALS, python_callable=daily_totals, algorithm=1,
                         mode="overwrite", ensure_target=True)
    stage >> PythonOperator(task_id="insert_overwrite_report", python_callable=insert_overwrite_report,
                            retries=1, retry_delay=timedelta(seconds=1),
                            pre_execute=ensure_target_before_each_try(REPORT))
