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


def abort_from_inside(task_number: int, ti) -> pa.Table:
    """Runs ``airflow-commit abort --purge`` on its own job while the run is live (a person at 3 a.m. who took the
    job for a dead one), as a process of its own, and keeps its exit code and error for the test."""
    import json
    import subprocess
    import sys

    from airflow_commit_provider.operators.identity import make_job_id

    done = subprocess.run([sys.executable, "-m", "airflow_commit_provider.cli", "abort",
                           os.path.join(ROOT, "view_truth_live_abort"), "--job",
                           make_job_id(ti.dag_id, ti.run_id, "write"), "--purge"],
                          capture_output=True, text=True, timeout=300)
    with open(os.path.join(WORK, "live-abort.json"), "w") as fh:
        json.dump({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}, fh)
    return shard_rows(0, task_number, ti)


with DAG("view_truth_live_abort", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as view_truth_live_abort:
    commit_stage("write", target=os.path.join(ROOT, "view_truth_live_abort"), python_callable=abort_from_inside,
                 expand_op_kwargs=[{}], mode="append")


with DAG("view_truth_purged", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as view_truth_purged:
    # purge_on_failure: the failed run's teardown removes the job, records and committed shards included
    commit_stage("write", target=os.path.join(ROOT, "view_truth_purged"), python_callable=shard_rows,
                 expand_op_kwargs=[{}], mode="append", shards_per_task=2, purge_on_failure=True)
