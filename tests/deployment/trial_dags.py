"""DAGs of the Commit status view's trial from outside (``python -m tests.deployment.view_trial``): what an operator
meets at 3 a.m., in a real deployment.

- ``trial_shards``: 100 mapped write task instances x ``shards_per_task=10`` (1,000 shards, a few rows of Parquet
  each), 2 retries;
- ``trial_schema``: 4 tasks, task 1 writes an extra column until ``fixed-trial_schema`` exists (the job commit
  refuses the mix: ``SchemaMismatch``, deterministic); ``trial_delta``: the same into a Delta table;
- ``trial_refused``: mode ``error`` on the target of the run's conf (a target that holds a file refuses the setup);
- ``trial_keyed``: ``job_key`` from the run's conf, so two runs are two generations of one job;
- ``trial_s3``: the magic committer on S3 through the connection ``trial_s3``.

Driven by the run's conf (``target``, ``delay`` seconds of work per shard) and by files in ``COMMIT_TEST_WORK``:
``fail-<dag>-<task>-<try>`` fails that try of that task after half its rows, ``failall-<dag>-<task>`` every try
while it exists, ``hold-<dag>-<run>-<task>`` holds the task inside the callable while it exists.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG

from airflow_commit_provider.operators.stage import commit_stage

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
ROWS = 4


def _flag(name: str) -> bool:
    return os.path.exists(os.path.join(WORK, name))


def rows(task_number: int, ti, dag_run):
    """A few rows of task *task_number*; fails or holds as the control files say."""
    conf = dag_run.conf or {}
    hold = os.path.join(WORK, f"hold-{ti.dag_id}-{ti.run_id}-{task_number}")
    if os.path.exists(hold):
        open(os.path.join(WORK, f"holding-{ti.dag_id}-{ti.run_id}-{task_number}"), "w").close()
        deadline = time.monotonic() + 1800
        while os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.2)
    if conf.get("delay"):
        time.sleep(float(conf["delay"]))   # the work a real shard does
    table = pa.table({"task": pa.array([task_number] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                      "try": pa.array([ti.try_number] * ROWS, pa.int32())})
    if task_number == 1 and ti.dag_id in ("trial_schema", "trial_delta") and not _flag(f"fixed-{ti.dag_id}"):
        table = table.append_column("note", pa.array(["the bug"] * ROWS))   # the code's bug: another schema
    yield table.slice(0, ROWS // 2)
    if _flag(f"fail-{ti.dag_id}-{task_number}-{ti.try_number}") or _flag(f"failall-{ti.dag_id}-{task_number}"):
        raise RuntimeError(f"injected failure of task {task_number}, try {ti.try_number}")
    yield table.slice(ROWS // 2)


def _target(dag_id: str) -> str:
    return "{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, dag_id)


DEFAULTS = {"retries": 2, "retry_delay": timedelta(seconds=1)}


def _dag(dag_id: str, **stage) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
             max_active_runs=4, tags=["airflow-commit-provider-trial"]) as dag:
        commit_stage("stage", python_callable=rows, **{"target": _target(dag_id), "mode": "append", **stage})
    return dag


trial_shards = _dag("trial_shards", expand_op_kwargs=[{}] * 100, shards_per_task=10)
trial_schema = _dag("trial_schema", expand_op_kwargs=[{}] * 4)
trial_delta = _dag("trial_delta", expand_op_kwargs=[{}] * 4, table_format="delta")
trial_refused = _dag("trial_refused", expand_op_kwargs=[{}] * 2, mode="error")
trial_keyed = _dag("trial_keyed", expand_op_kwargs=[{}] * 4, job_key="{{ dag_run.conf.get('key', 'one') }}")
trial_s3 = _dag("trial_s3", expand_op_kwargs=[{}] * 4, conn_id="trial_s3", algorithm="magic",
                target="{{ dag_run.conf['target'] }}")
