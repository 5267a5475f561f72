"""A stage the Commit status view is watched on while it runs (``tests/airflow/test_view_truth.py``), under
``dag.test()``: one write task instance with ten shards run one at a time, so every shard commit is a step the
view must show; ``fail-<task_number>-<try>`` in ``COMMIT_TEST_WORK`` makes that try of that shard fail.
Target: ``<COMMIT_TEST_ROOT>/view_truth``. ``OBSERVE``, when a test sets it, is called before each shard writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG

from airflow_commit_provider.operators.stage import commit_stage

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
SHARDS = 10
OBSERVE: Callable[[str], None] | None = None


def shard_rows(shard_index: int, task_number: int, ti) -> pa.Table:
    if OBSERVE is not None:
        OBSERVE(f"write.shard_{task_number}.try_{ti.try_number}")
    if os.path.exists(os.path.join(WORK, f"fail-{task_number}-{ti.try_number}")):
        raise RuntimeError(f"injected failure of shard {task_number}, try {ti.try_number}")
    return pa.table({"task": pa.array([task_number] * 4, pa.int32()), "row": pa.array(range(4), pa.int32()),
                     "attempt": pa.array([ti.try_number] * 4, pa.int32())})


with DAG("view_truth", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
         tags=["airflow-commit-provider-tests"]) as view_truth:
    commit_stage("write", target=os.path.join(ROOT, "view_truth"), python_callable=shard_rows,
                 expand_op_kwargs=[{}], mode="append", shards_per_task=SHARDS, shard_threads=1)


with DAG("view_truth_refused", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as view_truth_refused:
    # mode "error": a target that holds anything refuses the setup (a test puts a file there)
    commit_stage("write", target=os.path.join(ROOT, "view_truth_refused"), python_callable=shard_rows,
                 expand_op_kwargs=[{}], mode="error", shards_per_task=2)
