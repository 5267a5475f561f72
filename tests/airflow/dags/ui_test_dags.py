"""DAGs for the commit-status view in a real browser (tests/deployment/test_ui.py): one stage of 4 mapped writes
(``ui_v1``, ``ui_v2``), an unmapped one (``ui_unmapped``), 2 write task instances of 3 shards each
(``ui_sharded``), an audited stage awaiting a person's approval (``ui_audit``), a DAG without any stage
(``ui_plain``), and a stage of
1,000 tasks (``ui_big``) whose tasks one Python task runs through the protocol (1,000 Airflow task instances would
take the deployment many minutes; the view reads the storage's 1,000 tasks the same way).

Driven by the run's conf and by files in ``COMMIT_TEST_WORK``, never by time:

- ``conf["fail"]``: task numbers whose every try fails after writing half its rows (the run fails, the teardown
  aborts the job); ``conf["fail_first_run"]``: the same, only before the run is first cleared;
- ``conf["short"]``: task numbers that write half their rows and succeed (``ui_audit``'s per-task row check fails
  and blames them);
- ``hold-<dag_id>-<run_id>-<task>``: while it exists, that task's try waits inside the user callable (its
  attempt is set up and has no fate: the stage is visibly running); ``holding-...`` says it got there.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, TaskGroup, task

from airflow_commit_provider.operators import CommitAbortOperator, CommitJobOperator, CommitSetupOperator
from airflow_commit_provider.operators.identity import make_job_id
from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.protocol import make_committer
from airflow_commit_provider.protocol.audit import Approval, Audit, checks
from airflow_commit_provider.protocol.tasks.writer import TaskAttemptWriter

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
    if task in conf.get("short", []):
        return
    if task in conf.get("fail", []) or (task in conf.get("fail_first_run", []) and not dag_run.clear_number):
        raise RuntimeError(f"injected failure of task {task}, try {ti.try_number} (conf {conf})")
    yield table.slice(ROWS // 2)


for _dag_id, _alg in (("ui_v1", 1), ("ui_v2", 2)):
    with DAG(_dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
             default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
             tags=["airflow-commit-provider-tests"]) as _dag:
        commit_stage("stage", target="{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, _dag_id),
                     python_callable=ui_write, expand_op_kwargs=[{"task": t} for t in range(4)], algorithm=_alg,
                     mode="append", partition_by=["day"])
    globals()[_dag_id] = _dag


with DAG("ui_unmapped", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ui_unmapped:
    commit_stage("stage", target="{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, "ui_unmapped"),
                 python_callable=ui_write, op_kwargs={"task": 0}, mode="append", partition_by=["day"])


with DAG("ui_audit", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ui_audit:
    commit_stage("stage", target="{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, "ui_audit"),
                 python_callable=ui_write, expand_op_kwargs=[{"task": t} for t in range(4)], mode="append",
                 audit=Audit(checks=[checks.Rows(min=ROWS, per="task"), checks.NotNull("row")],
                             approval=Approval(timeout=timedelta(hours=4))))


def ui_write_shard(task_number: int, ti, dag_run):
    """One shard of ``ui_sharded``: ``ui_write`` of its task number (``conf["fail"]`` names task numbers)."""
    yield from ui_write(task_number, ti, dag_run)


with DAG("ui_sharded", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
         tags=["airflow-commit-provider-tests"]) as ui_sharded:
    commit_stage("stage", target="{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, "ui_sharded"),
                 python_callable=ui_write_shard, expand_op_kwargs=[{}, {}], shards_per_task=3, mode="append",
                 partition_by=["day"])


with DAG("ui_plain", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ui_plain:

    @task
    def no_stage() -> int:
        return 1

    no_stage()


BIG = 1000
BIG_TARGET = "{{ dag_run.conf.get('target') or '%s' }}" % os.path.join(ROOT, "ui_big")


def write_big(target: str, ti, dag_run) -> int:
    """The 1,000 tasks of the stage, each through the protocol as a write task does it: every attempt set up
    first (so all are visibly running), then each writes one file and commits; with ``hold-ui_big-<run>``
    present it stops after half of them until the file is removed."""
    c = make_committer(target, make_job_id(ti.dag_id, ti.run_id, "stage"), algorithm=1, mode="append")
    attempts = [c.setup_task(n, 1) for n in range(BIG)]
    hold = os.path.join(WORK, f"hold-ui_big-{ti.run_id}")
    for ta in attempts:
        if ta.task == BIG // 2 and os.path.exists(hold):
            open(os.path.join(WORK, f"holding-ui_big-{ti.run_id}"), "w").close()
            deadline = time.monotonic() + 900
            while os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.2)
        with TaskAttemptWriter(c, ta) as w:
            w.write(pa.table({"task": pa.array([ta.task], pa.int32())}))
        c.commit_task(ta, w.rows, sizes=w.sizes)
    return BIG


with DAG("ui_big", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as ui_big:
    _common = {"target": BIG_TARGET, "algorithm": 1, "mode": "append", "job_name": "stage"}
    with TaskGroup("stage"):
        _setup = CommitSetupOperator(task_id="setup", **_common)
        _write = task(write_big, task_id="write")(target=BIG_TARGET)
        _commit = CommitJobOperator(task_id="commit", expected_tasks=BIG, **_common)
        _abort = CommitAbortOperator(task_id="abort", commit_task_id="stage.commit", **_common)
        _setup >> _write >> _commit >> _abort.as_teardown(setups=_setup)
