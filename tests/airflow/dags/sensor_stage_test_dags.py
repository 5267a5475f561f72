"""A decorated, a sharded and a keyed stage (``ss_producers``), and ``SuccessMarkerSensor``s waiting on their
outputs, in poke mode and deferrable (``ss_sensors``); run by ``tests/airflow/test_sensor_stages.py``.

Targets are ``<COMMIT_TEST_ROOT>/ss_producers/<stage>``; every call of a user callable is appended to
``calls.log`` in ``COMMIT_TEST_WORK`` as ``ss_producers <stage> <task number> <try>``.
"""

from __future__ import annotations

import os
from datetime import datetime

import pyarrow as pa
from airflow.sdk import DAG, task

from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
ROWS = 10
STAGES = ("decorated", "sharded", "keyed")


def target(stage: str) -> str:
    return os.path.join(ROOT, "ss_producers", stage)


def rows(stage: str, task_number: int, ti) -> pa.Table:
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.dag_id} {stage} {task_number} {ti.try_number}\n")
    return pa.table({"task": pa.array([task_number] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                     "run": [ti.run_id] * ROWS})


def sharded_rows(part: int, shard_index: int, task_number: int, ti) -> pa.Table:
    return rows("sharded", task_number, ti)


def keyed_rows(n: int, ti) -> pa.Table:
    return rows("keyed", n, ti)


with DAG("ss_producers", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ss_producers:
    @task.commit_stage(target=target("decorated"), mode="overwrite")
    def decorated(n: int, ti=None) -> pa.Table:
        return rows("decorated", n, ti)

    decorated.expand(n=[0, 1])
    # two write task instances of two shards each: tasks 0..3
    commit_stage("sharded", target=target("sharded"), python_callable=sharded_rows,
                 expand_op_kwargs=[{"part": 0}, {"part": 1}], mode="overwrite", shards_per_task=2, shard_threads=1)
    # every run is one job: a second run replaces the first's rows
    commit_stage("keyed", target=target("keyed"), python_callable=keyed_rows,
                 expand_op_kwargs=[{"n": 0}, {"n": 1}], mode="append", job_key="one-key")


with DAG("ss_sensors", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ss_sensors:
    # poke mode (not reschedule: no event-lag race under load, apache/airflow#71172), and deferrable
    for _stage in STAGES:
        SuccessMarkerSensor(task_id=f"poke_{_stage}", target=target(_stage), mode="poke", poke_interval=1,
                            timeout=900, verify_files=True, deferrable=False)
        SuccessMarkerSensor(task_id=f"defer_{_stage}", target=target(_stage), deferrable=True, poke_interval=1,
                            timeout=900, verify_files=True)
