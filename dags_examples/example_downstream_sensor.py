"""A downstream DAG that waits for the partitioned write's ``_SUCCESS`` (deferrable) and reads its manifest."""

from __future__ import annotations

import os
from datetime import datetime

from _demo_data import ROOT
from airflow.sdk import DAG, task

from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor

with DAG("commit_downstream_sensor", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example"]) as dag:
    wait = SuccessMarkerSensor(task_id="wait_for_events", target=os.path.join(ROOT, "events"), deferrable=True,
                               verify_files=True, poke_interval=2, timeout=600,
                               retries=1)  # apache/airflow#71580: a trigger firing right after deferral

    @task
    def report(manifest: dict) -> dict:
        import pyarrow.dataset as ds

        rows = ds.dataset(os.path.join(ROOT, "events"), format="parquet", partitioning="hive").count_rows()
        if rows != manifest["totals"]["rows"]:
            raise ValueError(f"_SUCCESS says {manifest['totals']['rows']} rows, the dataset has {rows}")
        print(f"job {manifest['job_id']}: {manifest['totals']['files']} files, {rows} rows - consistent")
        return {"rows": rows, "files": manifest["totals"]["files"]}

    report(wait.output)
