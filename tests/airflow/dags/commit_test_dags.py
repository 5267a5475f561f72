"""DAGs for the Airflow tests (dag.test() and the real deployment), one per scenario family.

Controlled at run time by files in ``COMMIT_TEST_WORK`` so a test can decide which task fails when:

- ``fail-<dag_id>-<map_index>-<try>``: that try of that task fails after writing half its rows;
- ``fail-<dag_id>-<map_index>-always``: every try of that task fails;
- ``calls.log``: every call of the user callable is appended (dag, map index, try).

Targets are ``<COMMIT_TEST_ROOT>/<dag_id>``. Write tasks retry once (0.2 s delay).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG

from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
TASKS = 4
ROWS = 10


def make_rows(dag_id: str, task: int, attempt: int) -> pa.Table:
    return pa.table({
        "task": pa.array([task] * ROWS, pa.int32()),
        "row": pa.array(range(ROWS), pa.int32()),
        "attempt": pa.array([attempt] * ROWS, pa.int32()),
        "day": [f"d{i % 2}" for i in range(ROWS)],
    })


def produce(task: int, ti):
    dag_id, try_number = ti.dag_id, ti.try_number
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{dag_id} {task} {try_number}\n")
    table = make_rows(dag_id, task, try_number)
    yield table.slice(0, ROWS // 2)
    for flag in (f"fail-{dag_id}-{task}-{try_number}", f"fail-{dag_id}-{task}-always"):
        if os.path.exists(os.path.join(WORK, flag)):
            raise RuntimeError(f"injected failure of task {task}, try {try_number} ({flag})")
    yield table.slice(ROWS // 2)


DEFAULTS = {"retries": 1, "retry_delay": timedelta(seconds=0.2)}


def stage_dag(dag_id: str, *, mode: str = "append", algorithm: int = 1, tasks: int = TASKS) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
             tags=["airflow-commit-provider-tests"]) as dag:
        commit_stage("stage", target=os.path.join(ROOT, dag_id), python_callable=produce,
                     expand_op_kwargs=[{"task": t} for t in range(tasks)], algorithm=algorithm, mode=mode,
                     partition_by=["day"])
    return dag


for _mode in ("error", "append", "overwrite", "dynamic"):
    for _alg in (1, 2):
        globals()[f"ct_{_mode}_v{_alg}"] = stage_dag(f"ct_{_mode}_v{_alg}", mode=_mode, algorithm=_alg)

ct_empty = stage_dag("ct_empty", tasks=0)

with DAG("ct_sensor", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ct_sensor:
    # Airflow 3.3 race (apache/airflow#71172): a reschedule poke's late executor event, drained after the next
    # poke was queued, fails the sensor; seen once in CI with poke_interval=1. A longer interval narrows the
    # window and a retry (which finds _SUCCESS at its first poke) covers the rest, as the README advises.
    SuccessMarkerSensor(task_id="wait_poke", target=os.path.join(ROOT, "ct_dynamic_v1"), mode="reschedule",
                        poke_interval=5, timeout=600, verify_files=True, retries=1,
                        retry_delay=timedelta(seconds=1))
    SuccessMarkerSensor(task_id="wait_deferred", target=os.path.join(ROOT, "ct_dynamic_v1"), deferrable=True,
                        poke_interval=1, timeout=600, verify_files=True)

with DAG("ct_maintenance", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ct_maintenance:
    from airflow_commit_provider.operators.maintenance import CompactOutputOperator, DeduplicateOutputOperator

    dedup = DeduplicateOutputOperator(task_id="dedup", target=os.path.join(ROOT, "ct_maintenance"), apply=True)
    dedup >> CompactOutputOperator(task_id="compact", target=os.path.join(ROOT, "ct_maintenance"),
                                   target_size=10**6)
