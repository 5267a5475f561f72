"""Stages on S3 (moto's server through the Airflow connection ``commit_s3``) built each way a DAG author builds
one: ``@task.commit_stage`` with algorithm 2 and with the magic committer, hand-wired ``Commit*Operator``s with the
magic committer, and ``commit_stage`` with a ``job_key``; run by ``tests/s3/test_authoring_s3.py``.

The bucket is ``COMMIT_TEST_S3_BUCKET`` (read when the file is imported: the test sets it, then imports). Every
call of the user callable is appended to ``calls.log`` in ``COMMIT_TEST_WORK`` as ``<dag_id> <shard> <try>``;
``fail-<dag_id>-<shard>-<try>`` there makes that try fail after building its rows.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, task

from airflow_commit_provider.operators import (
    CommitAbortOperator,
    CommitJobOperator,
    CommitSetupOperator,
    CommitWriteOperator,
)
from airflow_commit_provider.operators.stage import commit_stage

BUCKET = os.environ.get("COMMIT_TEST_S3_BUCKET", "commit-test")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
CONN_ID = "commit_s3"
SHARDS, ROWS = 3, 10
DEFAULTS = {"retries": 1, "retry_delay": timedelta(seconds=0.2)}


def target(dag_id: str) -> str:
    return f"s3://{BUCKET}/{dag_id}"


def shard_rows(shard: int, ti) -> pa.Table:
    """Shard *shard*'s rows, tagged with the try that wrote them; the call is logged first."""
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.dag_id} {shard} {ti.try_number}\n")
    rows = pa.table({"shard": pa.array([shard] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                     "try": pa.array([ti.try_number] * ROWS, pa.int32())})
    if os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-{shard}-{ti.try_number}")):
        raise RuntimeError(f"injected failure of shard {shard}, try {ti.try_number}")
    return rows


def _decorated(dag_id: str, algorithm: int | str, mode: str) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
             tags=["airflow-commit-provider-tests"]) as dag:
        @task.commit_stage(target=target(dag_id), conn_id=CONN_ID, algorithm=algorithm, mode=mode)
        def load(shard: int, ti=None) -> pa.Table:
            return shard_rows(shard, ti)

        load.expand(shard=list(range(SHARDS)))
    return dag


s3_deco_v2 = _decorated("s3_deco_v2", 2, "overwrite")
s3_deco_magic = _decorated("s3_deco_magic", "magic", "append")


with DAG("s3_ops_magic", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as s3_ops_magic:
    _shared = {"target": target("s3_ops_magic"), "conn_id": CONN_ID, "algorithm": "magic", "mode": "append",
               "job_name": "events"}
    _setup = CommitSetupOperator(task_id="setup", **_shared)
    _write = CommitWriteOperator.partial(task_id="write", python_callable=shard_rows, **_shared).expand(
        op_kwargs=[{"shard": s} for s in range(SHARDS)])
    _commit = CommitJobOperator(task_id="commit", write_task_id="write", **_shared)
    _abort = CommitAbortOperator(task_id="abort", commit_task_id="commit", **_shared)
    _setup >> _write >> _commit >> _abort.as_teardown(setups=_setup)


with DAG("s3_keyed", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as s3_keyed:
    # every run whose conf names one key is one job: a second run replaces the first's rows
    commit_stage("load", target=target("s3_keyed"), conn_id=CONN_ID, python_callable=shard_rows,
                 expand_op_kwargs=[{"shard": s} for s in range(SHARDS)], mode="append",
                 job_key="{{ dag_run.conf['key'] }}")
