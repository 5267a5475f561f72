"""``@task.commit_stage`` into a Delta table (``dt_delta``), run by ``tests/airflow/test_decorated_tables.py``.

The table is ``<COMMIT_TEST_ROOT>/dt_delta``; every call of the callable is appended to ``calls.log`` in
``COMMIT_TEST_WORK`` as ``<dag_id> <n> <try>``; ``fail-<dag_id>-<n>-<try>`` there makes that try fail after
building its rows.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, task

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
ROWS = 10

with DAG("dt_delta", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
         tags=["airflow-commit-provider-tests"]) as dt_delta:
    @task.commit_stage(target=os.path.join(ROOT, "dt_delta"), table_format="delta", mode="append",
                       partition_by=["day"])
    def load(n: int, ti=None) -> pa.Table:
        with open(os.path.join(WORK, "calls.log"), "a") as fh:
            fh.write(f"{ti.dag_id} {n} {ti.try_number}\n")
        rows = pa.table({"n": pa.array([n] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                         "try": pa.array([ti.try_number] * ROWS, pa.int32()),
                         "day": [f"d{r % 2}" for r in range(ROWS)]})
        if os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-{n}-{ti.try_number}")):
            raise RuntimeError(f"injected failure of {n}, try {ti.try_number}")
        return rows

    load.expand(n=[0, 1, 2])
