"""Stages on an object store beside S3 (Google Cloud Storage or Azure Blob Storage on their emulators), reached only
through an Airflow connection, run by ``tests/clouds/test_clouds_airflow.py``.

The targets are under ``COMMIT_TEST_CLOUD_ROOT`` (``gs://<bucket>`` or ``abfs://<container>``) through the
connection ``COMMIT_TEST_CLOUD_CONN`` (read when the file is imported: the test sets both, then imports). Every
call of the user callable is appended to ``calls.log`` in ``COMMIT_TEST_WORK`` as ``<dag_id> <shard> <try>``;
``fail-<dag_id>-<shard>-<try>`` there makes that try fail after building its rows.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, task

ROOT = os.environ.get("COMMIT_TEST_CLOUD_ROOT", "gs://commit-test")
CONN_ID = os.environ.get("COMMIT_TEST_CLOUD_CONN", "commit_gcs")
#: the DAG ids start with the store's name: runs on each store are runs of DAGs of their own
CLOUD = {"gs": "gcs", "abfs": "azure"}[ROOT.split("://", 1)[0]]
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
SHARDS, ROWS = 3, 10


def shard_rows(shard: int, ti) -> pa.Table:
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.dag_id} {shard} {ti.try_number}\n")
    rows = pa.table({"shard": pa.array([shard] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                     "try": pa.array([ti.try_number] * ROWS, pa.int32())})
    if os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-{shard}-{ti.try_number}")):
        raise RuntimeError(f"injected failure of shard {shard}, try {ti.try_number}")
    return rows


def _stage(dag_id: str, algorithm: int, **stage: object) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
             default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
             tags=["airflow-commit-provider-tests"]) as dag:
        if stage.get("shards_per_task"):
            # one task instance of SHARDS shards: a retry runs only the shards that did not commit
            @task.commit_stage(target=f"{ROOT}/{dag_id}", conn_id=CONN_ID, algorithm=algorithm,
                               mode="overwrite", **stage)
            def load_shards(shard_index: int, ti=None) -> pa.Table:
                return shard_rows(shard_index, ti)

            load_shards()
            return dag

        @task.commit_stage(target=f"{ROOT}/{dag_id}", conn_id=CONN_ID, algorithm=algorithm,
                           ensure_target=True, **{"mode": "overwrite", **stage})
        def load(shard: int, ti=None) -> pa.Table:
            return shard_rows(shard, ti)

        load.expand(shard=list(range(SHARDS)))
    return dag


v1 = _stage(f"{CLOUD}_v1", 1)
v2 = _stage(f"{CLOUD}_v2", 2)
shards = _stage(f"{CLOUD}_shards", 1, shards_per_task=SHARDS)
# Azure stages blocks for the magic committer; on GCS it is refused where the DAG is parsed
magic = _stage(f"{CLOUD}_magic", "magic") if CLOUD == "azure" else None
# every run whose conf names one key is one job: a second run replaces the first's rows
keyed = _stage(f"{CLOUD}_keyed", 1, mode="append", job_key="{{ dag_run.conf['key'] }}")
