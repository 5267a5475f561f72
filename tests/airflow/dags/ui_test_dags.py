"""DAGs for the commit-status view in a real browser (tests/deployment/test_ui.py): one stage of 4 mapped writes.

Driven by the run's conf and by files in ``COMMIT_TEST_WORK``, never by time:

- ``conf["fail"]``: task numbers whose every try fails after writing half its rows (the run fails, the teardown
  aborts the job);
- ``hold-<dag_id>-<run_id>-<task>``: while it exists, that task's try waits inside the user callable (its
  attempt is set up and has no fate: the stage is visibly running); ``holding-...`` says it got there.
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
ROWS = 10


def ui_write(task: int, ti, dag_run):
    conf = dag_run.conf or {}
    table = pa.table({"task": pa.array([task] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                      "day": [f"2024-01-0{1 + i % 2}" for i in range(ROWS)]})
    hold = os.path.join(WORK, f"hold-{ti.dag_id}-{ti.run_id}-{task}")
    if os.path.exists(hold):
        open(os.path.join(WORK, f"holding-{ti.dag_id}-{ti.run_id}-{task}"), "w").close()
        deadline = time.monotonic() + 900
        while os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.2)
    yield table.slice(0, ROWS // 2)
    if task in conf.get("fail", []):
        raise RuntimeError(f"injected failure of task {task}, try {ti.try_number} (conf fail={conf['fail']})")
    yield table.slice(ROWS // 2)


for _dag_id, _alg in (("ui_v1", 1), ("ui_v2", 2)):
    with DAG(_dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
             default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
             tags=["airflow-commit-provider-tests"]) as _dag:
        commit_stage("stage", target="{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, _dag_id),
                     python_callable=ui_write, expand_op_kwargs=[{"task": t} for t in range(4)], algorithm=_alg,
                     mode="append", partition_by=["day"])
    globals()[_dag_id] = _dag
