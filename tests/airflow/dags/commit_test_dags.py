"""DAGs for the Airflow tests (dag.test() and the real deployment), one per scenario family.

Controlled at run time by files in ``COMMIT_TEST_WORK`` so a test can decide which task fails when:

- ``fail-<dag_id>-<map_index>-<try>``: that try of that task fails after writing half its rows;
- ``fail-<dag_id>-<map_index>-always``: every try of that task fails;
- ``calls.log``: every call of the user callable is appended (dag, map index, try);
- ``hold-<dag_id>-<task_id>``: while it exists, that task's tries wait in ``pre_execute`` (after writing
  ``holding-<dag_id>-<task_id>-<try>``): lets a test act at a known point of a try instead of racing it.

Targets are ``<COMMIT_TEST_ROOT>/<dag_id>`` (the Spark-like DAGs: ``dag_run.conf["target"]`` if given).
Write tasks retry once (0.2 s delay).
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_commit_provider.operators.ensure_target import ensure_target_before_each_try
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


def stage_dag(dag_id: str, *, mode: str = "append", algorithm: int = 1, tasks: int = TASKS,
              job_key: str | None = None) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
             tags=["airflow-commit-provider-tests"]) as dag:
        commit_stage("stage", target=os.path.join(ROOT, dag_id), python_callable=produce,
                     expand_op_kwargs=[{"task": t} for t in range(tasks)], algorithm=algorithm, mode=mode,
                     partition_by=["day"], job_key=job_key)
    return dag


for _mode in ("error", "append", "overwrite", "dynamic"):
    for _alg in (1, 2):
        globals()[f"ct_{_mode}_v{_alg}"] = stage_dag(f"ct_{_mode}_v{_alg}", mode=_mode, algorithm=_alg)

ct_empty = stage_dag("ct_empty", tasks=0)
# a plain file stage (no table_format) whose target the test makes a Delta table: its setup refuses, no retry
ct_table_filejob = stage_dag("ct_table_filejob", mode="overwrite")


def produce_for_key(task: int, dag_run) -> pa.Table:
    """ROWS rows of *task*, each carrying the run's job key (``dag_run.conf["key"]``)."""
    key = dag_run.conf["key"]
    return pa.table({"task": pa.array([task] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                     "key": [key] * ROWS})


with DAG("ct_job_key", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as ct_job_key:
    # one target for every key, in append mode: each key's job adds its rows; a re-run of a key replaces its own
    commit_stage("stage", target=os.path.join(ROOT, "ct_job_key"), python_callable=produce_for_key,
                 expand_op_kwargs=[{"task": t} for t in range(TASKS)], mode="append",
                 job_key="{{ dag_run.conf['key'] }}")


# every run is one job (a key that renders the same for every logical date): two runs at once overlap
ct_overlap_append = stage_dag("ct_overlap_append", tasks=2, job_key="one-job-for-every-run")
ct_overlap_overwrite = stage_dag("ct_overlap_overwrite", mode="overwrite", tasks=2, job_key="one-job-for-every-run")


def hold_while_flagged(context) -> None:
    """A ``pre_execute``: while ``hold-<dag_id>-<task_id>`` exists, wait (the try is running and
    has done nothing yet). A test uses it to pause the DAG at a known point, not at a guessed time."""
    ti = context["ti"]
    hold = os.path.join(WORK, f"hold-{ti.dag_id}-{ti.task_id}")
    if not os.path.exists(hold):
        return
    open(os.path.join(WORK, f"holding-{ti.dag_id}-{ti.task_id}-{ti.try_number}"), "w").close()
    deadline = time.monotonic() + 900
    while os.path.exists(hold):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{hold} still there after 900 s")
        time.sleep(0.2)


with DAG("ct_sensor", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ct_sensor:
    # No retries: a failed try must fail the test. The real-deployment test orders the pokes and the data by
    # observable states (see tests/deployment/test_real_deployment.py), so Airflow's event-lag races
    # (apache/airflow#71172, #71580) cannot occur there, whatever the load.
    SuccessMarkerSensor(task_id="wait_poke", target=os.path.join(ROOT, "ct_dynamic_v1"), mode="reschedule",
                        poke_interval=1, timeout=900, verify_files=True, pre_execute=hold_while_flagged)
    SuccessMarkerSensor(task_id="wait_deferred", target=os.path.join(ROOT, "ct_dynamic_v1"), deferrable=True,
                        poke_interval=1, timeout=900, verify_files=True)


def spark_like_insert_overwrite(target: str, ti) -> None:
    """Stands in for Spark's ``INSERT OVERWRITE`` (local path or S3): the table path must exist ("Path does not
    exist" otherwise), is deleted, then written. ``fail-<dag_id>-0-<try>`` kills that try right after the
    delete, as an application attempt dying mid-overwrite."""
    import fsspec

    dag_id, try_number = ti.dag_id, ti.try_number
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{dag_id} 0 {try_number}\n")
    remote = "://" in target and not target.startswith("file://")
    fs, path = fsspec.core.url_to_fs(target, **({"use_listings_cache": False, "skip_instance_cache": True}
                                                 if remote else {}))
    if not fs.exists(path):
        raise FileNotFoundError(f"Path does not exist: {target}")
    fs.rm(path, recursive=True)
    for flag in (f"fail-{dag_id}-0-{try_number}", f"fail-{dag_id}-0-always"):
        if os.path.exists(os.path.join(WORK, flag)):
            raise RuntimeError(f"application attempt died after deleting {target} (try {try_number}, {flag})")
    fs.makedirs(path, exist_ok=True)
    fs.pipe_file(f"{path}/part-00000.txt", f"written by try {try_number}".encode())


def spark_overwrite_dag(dag_id: str, *, guarded: bool) -> DAG:
    """One Spark-like writer task (retries=1); *guarded*: with the ensure-target ``pre_execute`` guard."""
    target = "{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, dag_id)
    conn_id = "{{ dag_run.conf.get('conn_id') or '' }}"
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
             tags=["airflow-commit-provider-tests"]) as dag:
        PythonOperator(task_id="insert_overwrite", python_callable=spark_like_insert_overwrite,
                       op_kwargs={"target": target},
                       pre_execute=ensure_target_before_each_try(target, conn_id) if guarded else None)
    return dag


ct_spark_guarded = spark_overwrite_dag("ct_spark_guarded", guarded=True)
ct_spark_unguarded = spark_overwrite_dag("ct_spark_unguarded", guarded=False)

with DAG("ct_maintenance", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ct_maintenance:
    from airflow_commit_provider.operators.maintenance import CompactOutputOperator, DeduplicateOutputOperator

    # one job wrote ds=1 (an INSERT OVERWRITE of the partition): Hive's attempts of one task are duplicates there
    dedup = DeduplicateOutputOperator(task_id="dedup", target=os.path.join(ROOT, "ct_maintenance"), apply=True,
                                      single_job_dirs=True)
    dedup >> CompactOutputOperator(task_id="compact", target=os.path.join(ROOT, "ct_maintenance"),
                                   target_size=10**6)

# both kinds of maintenance pointed at a Delta table (the test makes it): each refuses, without a retry
with DAG("ct_table_maintenance", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
         tags=["airflow-commit-provider-tests"]) as ct_table_maintenance:
    from airflow_commit_provider.operators.maintenance import CompactOutputOperator, DeduplicateOutputOperator

    DeduplicateOutputOperator(task_id="dedup", target=os.path.join(ROOT, "ct_table_maintenance"), apply=True)
    CompactOutputOperator(task_id="compact", target=os.path.join(ROOT, "ct_table_maintenance"), target_size=10**6)
