"""Stages whose write task instances run several shards each (``shards_per_task``), under ``dag.test()``.

Controlled at run time by files in ``COMMIT_TEST_WORK``: ``fail-<dag_id>-<task_number>-<try>`` makes that try of
that shard (protocol task) fail after building its rows; every call of a user callable is appended to
``calls.log`` as ``<dag_id> <map_index> <shard_index> <task_number> <try>``. Targets are
``<COMMIT_TEST_ROOT>/<dag_id>``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, task

from airflow_commit_provider.operators.stage import commit_stage

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
ROWS = 10
INSTANCES = 3
SHARDS = 4
DEFAULTS = {"retries": 1, "retry_delay": timedelta(seconds=0.2)}


def shard_rows(day: int, shard_index: int, task_number: int, ti) -> pa.Table:
    """One shard's rows; *day* is the task instance's own argument (its map), the rest is the shard's."""
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.dag_id} {ti.map_index} {shard_index} {task_number} {ti.try_number}\n")
    table = pa.table({"task": pa.array([task_number] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                      "attempt": pa.array([ti.try_number] * ROWS, pa.int32()),
                      "day": [f"d{r % 2}" for r in range(ROWS)], "source_day": [day] * ROWS})
    if os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-{task_number}-{ti.try_number}")):
        raise RuntimeError(f"injected failure of task {task_number}, try {ti.try_number}")
    return table


with DAG("sh_operator", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as sh_operator:
    commit_stage("write", target=os.path.join(ROOT, "sh_operator"), python_callable=shard_rows,
                 expand_op_kwargs=[{"day": d} for d in range(INSTANCES)], mode="dynamic", partition_by=["day"],
                 shards_per_task=SHARDS, shard_threads=2)


# the same stages with their shards committed together: one protocol task (one record) per task instance
with DAG("sh_together_operator", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args=DEFAULTS, tags=["airflow-commit-provider-tests"]) as sh_together_operator:
    commit_stage("write", target=os.path.join(ROOT, "sh_together_operator"), python_callable=shard_rows,
                 expand_op_kwargs=[{"day": d} for d in range(INSTANCES)], mode="dynamic", partition_by=["day"],
                 shards_per_task=SHARDS, shard_threads=2, shard_commit="together")


with DAG("sh_together_decorator", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args=DEFAULTS, tags=["airflow-commit-provider-tests"]) as sh_together_decorator:
    @task.commit_stage(target=os.path.join(ROOT, "sh_together_decorator"), mode="overwrite",
                       shards_per_task=SHARDS, shard_commit="together")
    def load_together(day: int, shard_index: int, task_number: int, ti=None) -> pa.Table:
        return shard_rows(day, shard_index, task_number, ti)

    load_together.expand(day=list(range(INSTANCES)))


with DAG("sh_one", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as sh_one:
    # the same callable with one shard per task instance: task number = map index
    commit_stage("write", target=os.path.join(ROOT, "sh_one"), python_callable=shard_rows,
                 expand_op_kwargs=[{"day": d} for d in range(INSTANCES)], mode="append")


with DAG("sh_decorator", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as sh_decorator:
    @task.commit_stage(target=os.path.join(ROOT, "sh_decorator"), mode="overwrite", shards_per_task=SHARDS)
    def load(day: int, shard_index: int, task_number: int, ti=None) -> pa.Table:
        return shard_rows(day, shard_index, task_number, ti)

    load.expand(day=list(range(INSTANCES)))



#: ``sh_rekeyed``'s shards per task instance: ``sh_rekeyed-shards`` in ``COMMIT_TEST_WORK`` when there (read at
#: parse time, as a DAG edit would change it), else SHARDS. Its job is fixed by ``job_key`` across runs.
_REKEYED = os.path.join(WORK, "sh_rekeyed-shards")
with DAG("sh_rekeyed", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as sh_rekeyed:
    commit_stage("write", target=os.path.join(ROOT, "sh_rekeyed"), python_callable=shard_rows,
                 expand_op_kwargs=[{"day": d} for d in range(INSTANCES)], mode="append", job_key="fixed",
                 shards_per_task=int(open(_REKEYED).read()) if os.path.exists(_REKEYED) else SHARDS, shard_threads=1)


# sh_tables: a Delta stage and an Iceberg stage (SQLite catalog in its target) with shards, one job per data
# interval: a failing shard's retry, and a second run of the interval replacing the first's rows in its table
# (sh_tables_together: the same, every task instance's shards committed together)
for _dag_id, _commit in (("sh_tables", "each"), ("sh_tables_together", "together")):
    with DAG(_dag_id, schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
             tags=["airflow-commit-provider-tests"]) as _dag:
        for _stage, _table in (("delta", {"table_format": "delta"}),
                               ("iceberg", {"table_format": "iceberg", "table_name": "shards.events"})):
            commit_stage(_stage, target=os.path.join(ROOT, _dag_id, _stage), python_callable=shard_rows,
                         expand_op_kwargs=[{"day": d} for d in range(INSTANCES)], mode="append",
                         partition_by=["day"], shards_per_task=3, shard_threads=1, shard_commit=_commit,
                         job_key="{{ data_interval_start }}", **_table)
    globals()[_dag_id] = _dag
del _dag
