"""Audited stages in every authoring style ``example_audit.py`` does not show, in one DAG for
``tests/airflow/test_audit.py``: hand-wired operators (``CommitAuditOperator`` between the writes and the commit,
the setup and the commit given the same ``Audit``) with a data callable, a stage of two shards per task instance,
the same with its shards committed together, and a stage with a ``job_key`` (run twice for one key, each generation audited). Targets are
``<COMMIT_TEST_ROOT>/audit_styles/<stage>``; every call of the user callable is appended to ``calls.log``."""

from __future__ import annotations

import os
from datetime import datetime

import pyarrow as pa
from airflow.sdk import DAG

from airflow_commit_provider.operators import (CommitAbortOperator, CommitAuditOperator, CommitJobOperator,
                                               CommitSetupOperator, CommitWriteOperator, commit_stage)
from airflow_commit_provider.protocol.audit import Audit, checks

ROOT = os.path.join(os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root"), "audit_styles")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
ROWS = 5


def rows(task: int, ti, shard_index: int = 0) -> pa.Table:
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.task_id} {task} {shard_index} {ti.try_number}\n")
    return pa.table({"id": pa.array([(task * 10 + shard_index) * 100 + i for i in range(ROWS)], pa.int64()),
                     "day": [f"d{i % 2}" for i in range(ROWS)]})


def ids_unique(dataset) -> bool:
    ids = dataset.to_table(columns=["id"]).column("id").to_pylist()
    return len(ids) == len(set(ids)) == 3 * ROWS


CHECKS = Audit(checks=[checks.Rows(min=ROWS, per="task"), checks.NotNull("id"), checks.Between("id", 0, 10_000)])

with DAG("audit_styles", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as audit_styles:
    # Columns on a partitioned stage: every task of it must hold the same specification (the partition column)
    audit = Audit(checks=[*CHECKS.checks, checks.Columns({"id": "int64", "day": None})], data=ids_unique)
    shared = {"target": os.path.join(ROOT, "ops"), "mode": "append", "partition_by": ["day"], "job_name": "ops"}
    setup = CommitSetupOperator(task_id="ops_setup", audit=audit, **shared)
    write = CommitWriteOperator.partial(task_id="ops_write", python_callable=rows, **shared).expand(
        op_kwargs=[{"task": t} for t in range(3)])
    check = CommitAuditOperator(task_id="ops_audit", audit=audit, write_task_id="ops_write", **shared)
    commit = CommitJobOperator(task_id="ops_commit", write_task_id="ops_write", audit=audit, **shared)
    abort = CommitAbortOperator(task_id="ops_abort", commit_task_id="ops_commit", **shared)
    setup >> write >> check >> commit >> abort.as_teardown(setups=setup)

    commit_stage("shards", target=os.path.join(ROOT, "shards"), python_callable=rows,
                 expand_op_kwargs=[{"task": t} for t in range(2)], shards_per_task=2, mode="append",
                 partition_by=["day"], audit=CHECKS)
    commit_stage("together", target=os.path.join(ROOT, "together"), python_callable=rows,
                 expand_op_kwargs=[{"task": t} for t in range(2)], shards_per_task=2, shard_commit="together",
                 mode="append", partition_by=["day"], audit=CHECKS)
    commit_stage("keyed", target=os.path.join(ROOT, "keyed"), python_callable=rows,
                 expand_op_kwargs=[{"task": t} for t in range(2)], job_key="{{ dag_run.conf.get('key', 'k') }}",
                 mode="append", audit=CHECKS)
