"""DAGs of ``benchmarks/distributed.py``: the same mapped write as plain PythonOperators and as a commit stage, at
several task sizes (seconds of work per task, then a small Parquet file to S3 through the connection
``commit_s3``), and a 1,000-task stage for the scale run.

- ``wc_plain_<s>``: ``PythonOperator`` mapped over the tasks; each waits *s* seconds (the task's work) and writes
  ``part-<task>.parquet`` straight into ``s3://<bucket>/plain/<dag_id>/<run_id>/``;
- ``wc_stage_<s>``: ``commit_stage`` (setup, mapped write, commit, abort teardown) doing the same work into
  ``s3://<bucket>/stage/<dag_id>/<run_id>/``;
- ``wc_noop_<s>``: the control, the floor of any wrapping that keeps four task instances: ``wc_plain_<s>``'s mapped
  write (the same callable, into ``s3://<bucket>/plain/<dag_id>/<run_id>/``) with three no-op ``PythonOperator``
  tasks where the stage has its own, in a task group of the same name: ``stage.setup`` before it,
  ``stage.commit`` after it (``none_failed``, as the stage's) and ``stage.abort`` after that, a teardown of
  ``stage.setup`` (``as_teardown``), so the run waits for it as it waits for the stage's abort;
- ``scale_<alg>``: ``COMMIT_BENCH_SCALE_TASKS`` (1,000) mapped write tasks of 10 rows each.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, ObjectStoragePath, TaskGroup

from airflow_commit_provider.operators.stage import commit_stage

BUCKET = os.environ.get("COMMIT_CELERY_BUCKET", "commit-celery")
SIZES = json.loads(os.environ.get("COMMIT_BENCH_SIZES", "[0, 1, 10, 30]"))
TASKS = int(os.environ.get("COMMIT_BENCH_TASKS", "4"))
SCALE_TASKS = int(os.environ.get("COMMIT_BENCH_SCALE_TASKS", "1000"))
ROWS = 1000


def table(task: int, rows: int = ROWS) -> pa.Table:
    return pa.table({"task": pa.array([task] * rows, pa.int32()), "row": pa.array(range(rows), pa.int32())})


def plain_write(task: int, seconds: float, run_id: str, dag_run) -> None:
    time.sleep(seconds)  # the task's own work
    out = ObjectStoragePath(f"s3://{BUCKET}/plain/{dag_run.dag_id}/{run_id}/part-{task:05d}.parquet",
                            conn_id="commit_s3")
    with out.open("wb") as fh:
        pq.write_table(table(task), fh)


def stage_write(task: int, seconds: float) -> pa.Table:
    time.sleep(seconds)
    return table(task)


def noop() -> None:
    """The control's setup, commit and abort: nothing, so what they cost is Airflow's alone."""


def scale_write(task: int) -> pa.Table:
    return table(task, rows=10)


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks=1024,
               tags=["airflow-commit-provider-bench"])


for _s in SIZES:
    _kwargs = [{"task": t, "seconds": _s} for t in range(TASKS)]
    with _dag(f"wc_plain_{_s}") as _d:
        PythonOperator.partial(task_id="write", python_callable=plain_write).expand(op_kwargs=_kwargs)
    globals()[_d.dag_id] = _d
    with _dag(f"wc_stage_{_s}") as _d:
        commit_stage("stage", target=f"s3://{BUCKET}/stage/{_d.dag_id}/{{{{ run_id }}}}", conn_id="commit_s3",
                     python_callable=stage_write, expand_op_kwargs=_kwargs, algorithm=1)
    globals()[_d.dag_id] = _d
    with _dag(f"wc_noop_{_s}") as _d, TaskGroup("stage"):
        _setup = PythonOperator(task_id="setup", python_callable=noop)
        _write = PythonOperator.partial(task_id="write", python_callable=plain_write).expand(op_kwargs=_kwargs)
        _commit = PythonOperator(task_id="commit", python_callable=noop, trigger_rule="none_failed")
        _abort = PythonOperator(task_id="abort", python_callable=noop)
        _setup >> _write >> _commit >> _abort.as_teardown(setups=_setup)
    globals()[_d.dag_id] = _d

for _alg in (1, "magic"):
    with _dag(f"scale_{'v1' if _alg == 1 else _alg}") as _d:
        commit_stage("stage", target=f"s3://{BUCKET}/scale/{_d.dag_id}/{{{{ run_id }}}}", conn_id="commit_s3",
                     python_callable=scale_write, expand_op_kwargs=[{"task": t} for t in range(SCALE_TASKS)],
                     algorithm=_alg)
    globals()[_d.dag_id] = _d
