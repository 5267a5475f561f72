"""A write stage into a Delta table and one into an Iceberg table (SQL catalog on SQLite), built from the
operators, for the real deployment: shard 2's first try fails after writing half its rows, and the commit task's
first try is killed with SIGKILL right after its table transaction, before the commit log and ``_SUCCESS``, when
the file ``kill-commit-<dag_id>-<stage>-<try>`` exists in ``COMMIT_TEST_WORK`` (the try's own process arms the
fault point ``table_commit.after``). Targets: ``<COMMIT_TEST_ROOT>/tbl_deploy/<stage>``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, TaskGroup

from airflow_commit_provider.operators import (
    CommitAbortOperator,
    CommitJobOperator,
    CommitSetupOperator,
    CommitWriteOperator,
)
from airflow_commit_provider.protocol import faults

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
SHARDS = 4
ROWS = 10


def shard_rows(shard: int, ti) -> pa.Table:
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.dag_id} {ti.task_id.split('.')[0]} {shard} {ti.try_number}\n")
    table = pa.table({"shard": pa.array([shard] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                      "try": pa.array([ti.try_number] * ROWS, pa.int32()),
                      "day": [f"d{r % 2}" for r in range(ROWS)]})
    if os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-{shard}")):   # every try, while the file is there
        yield table.slice(0, ROWS // 2)
        raise RuntimeError(f"injected failure of shard {shard}, try {ti.try_number}, after half its rows")
    if shard == 2 and ti.try_number == 1 and os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-2-1")):
        yield table.slice(0, ROWS // 2)
        raise RuntimeError("injected failure of shard 2, try 1, after half its rows")
    yield table


def kill_after_table_commit(context) -> None:
    ti = context["ti"]
    flag = os.path.join(WORK, f"kill-commit-{ti.dag_id}-{ti.task_id.split('.')[0]}-{ti.try_number}")
    if os.path.exists(flag):
        os.environ[faults.ENV_VAR] = "table_commit.after=kill"
        faults.disarm()   # the environment is read again at the next point


# tbl_deploy: a failing write try, a commit killed after its transaction, a clear after success; tbl_clear: a run
# that fails (one shard fails every try), then cleared (tests/deployment/test_real_deployment.py)
for _dag_id, _namespace in (("tbl_deploy", "deploy"), ("tbl_clear", "clear")):
    with DAG(_dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
             default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
             tags=["airflow-commit-provider-tests"]) as _dag:
        for stage, table in (("delta", {"table_format": "delta"}),
                             ("iceberg", {"table_format": "iceberg", "table_name": f"{_namespace}.events"})):
            with TaskGroup(stage):
                shared = {"target": os.path.join(ROOT, _dag_id, stage), "mode": "append", "partition_by": "day",
                          "job_name": stage, **table}
                setup = CommitSetupOperator(task_id="setup", **shared)
                write = CommitWriteOperator.partial(task_id="write", python_callable=shard_rows, **shared).expand(
                    op_kwargs=[{"shard": n} for n in range(SHARDS)])
                commit = CommitJobOperator(task_id="commit", write_task_id=f"{stage}.write",
                                           pre_execute=kill_after_table_commit, **shared)
                abort = CommitAbortOperator(task_id="abort", commit_task_id=f"{stage}.commit", **shared)
                setup >> write >> commit >> abort.as_teardown(setups=setup)
    globals()[_dag_id] = _dag


#: the Airflow connection of ``tbl_s3``: the only place its S3 endpoint and credentials are given
S3_CONN_ID = "commit_s3_tables"
S3_BUCKET = "tables"


def raise_after_table_commit_on_try_1(context) -> None:
    """Try 1 of the commit fails right after its table transaction (in process, under ``dag.test()``: an
    exception, not a kill); the retry runs with nothing armed."""
    faults.disarm()
    if context["ti"].try_number == 1:
        faults.arm("table_commit.after", "raise")


with DAG("tbl_s3", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
         tags=["airflow-commit-provider-tests"]) as tbl_s3:
    for stage, table in (
            ("delta", {"table_format": "delta", "target": f"s3://{S3_BUCKET}/events_delta"}),
            ("iceberg", {"table_format": "iceberg", "table_name": "lake.events", "target": None,
                         "catalog": {"type": "sql", "uri": f"sqlite:///{os.path.join(ROOT, 'tbl_s3.db')}",
                                     "warehouse": f"s3://{S3_BUCKET}/warehouse"}})):
        with TaskGroup(stage):
            shared = {"conn_id": S3_CONN_ID, "mode": "append", "partition_by": "day", "job_name": stage, **table}
            setup = CommitSetupOperator(task_id="setup", **shared)
            write = CommitWriteOperator.partial(task_id="write", python_callable=shard_rows, **shared).expand(
                op_kwargs=[{"shard": n} for n in range(SHARDS)])
            commit = CommitJobOperator(task_id="commit", write_task_id=f"{stage}.write",
                                       pre_execute=raise_after_table_commit_on_try_1, **shared)
            abort = CommitAbortOperator(task_id="abort", commit_task_id=f"{stage}.commit", **shared)
            setup >> write >> commit >> abort.as_teardown(setups=setup)


def shard_rows_changing_schema(shard: int, ti):
    """:func:`shard_rows`, with a column more while the file ``extra-column-<dag_id>`` exists in ``WORK``: the
    code change a user then reverts."""
    for table in shard_rows(shard, ti):
        if os.path.exists(os.path.join(WORK, f"extra-column-{ti.dag_id}")):
            table = table.append_column("note", pa.array(["new"] * table.num_rows))
        yield table


# tbl_schema: a run whose code adds a column the table lacks (its commit is refused), then the code is reverted and
# the run cleared (tests/airflow/test_recover_valid.py)
with DAG("tbl_schema", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
         tags=["airflow-commit-provider-tests"]) as tbl_schema:
    for stage, table in (("delta", {"table_format": "delta"}),
                         ("iceberg", {"table_format": "iceberg", "table_name": "schema.events"})):
        with TaskGroup(stage):
            shared = {"target": os.path.join(ROOT, "tbl_schema", stage), "mode": "append", "partition_by": "day",
                      "job_name": stage, **table}
            setup = CommitSetupOperator(task_id="setup", **shared)
            write = CommitWriteOperator.partial(task_id="write", python_callable=shard_rows_changing_schema,
                                                **shared).expand(op_kwargs=[{"shard": n} for n in range(SHARDS)])
            commit = CommitJobOperator(task_id="commit", write_task_id=f"{stage}.write", **shared)
            abort = CommitAbortOperator(task_id="abort", commit_task_id=f"{stage}.commit", **shared)
            setup >> write >> commit >> abort.as_teardown(setups=setup)


# dir_schema: the same code change for a directory stage, between a failed run (shard 3 fails every try) and its
# clear: the commit refuses the recovered old-schema shards, the next clear runs them again
# (tests/airflow/test_recover_valid.py)
with DAG("dir_schema", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
         tags=["airflow-commit-provider-tests"]) as dir_schema:
    _shared = {"target": os.path.join(ROOT, "dir_schema"), "mode": "append", "partition_by": "day"}
    _setup = CommitSetupOperator(task_id="setup", **_shared)
    _write = CommitWriteOperator.partial(task_id="write", python_callable=shard_rows_changing_schema,
                                         **_shared).expand(op_kwargs=[{"shard": n} for n in range(SHARDS)])
    _commit = CommitJobOperator(task_id="commit", write_task_id="write", **_shared)
    _setup >> _write >> _commit >> CommitAbortOperator(task_id="abort", commit_task_id="commit",
                                                        **_shared).as_teardown(setups=_setup)
