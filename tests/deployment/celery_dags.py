"""DAGs for the distributed (CeleryExecutor) suite. Workers share nothing but S3, so the tests steer and observe
the tasks through objects under ``s3://<COMMIT_CELERY_BUCKET>/ctl/<dag_id>/<run_id>/``:

- ``tries/<map_index>-<try>.json``: written by every try of a write task before it does anything (recovered tries
  too): the worker's name, its TMPDIR, the run's clear number;
- ``calls/<map_index>-<try>.json``: written when the user callable runs (not for a recovered task), with the path
  of a file it wrote in the worker's private scratch directory;
- ``spread-<clear_number>``: while tries of that clear round have run on fewer than two workers, a try waits in
  ``pre_execute`` (so the mapped writes land on both workers whatever the broker's order);
- ``hold-<map_index>-<try>``: that try writes half its rows, records ``holding/<map_index>-<try>.json`` and waits
  while the object exists (a test kills its worker there);
- ``fail-<map_index>-always`` / ``fail-<map_index>-<try>``: that try fails after half its rows;
- ``commit/<try>.json``: written by every try of a commit task before it runs (its worker's name);
- ``stop-commit-<try>``: that commit try stops itself (SIGSTOP) right after its table transaction, before its
  commit log and ``_SUCCESS`` (a test kills its worker there).

Data goes to ``s3://<bucket>/data/<dag_id>`` through the Airflow connection ``commit_s3``; ``cc_iceberg`` writes
the Iceberg table ``celery.events`` whose SQL catalog is the PostgreSQL database ``COMMIT_ICEBERG_CATALOG_URI``
names (beside Airflow's own) and whose warehouse is ``s3://<bucket>/warehouse``, its files through ``commit_s3``
too.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, TaskGroup

from airflow_commit_provider.operators import (
    CommitAbortOperator,
    CommitJobOperator,
    CommitSetupOperator,
    CommitWriteOperator,
)
from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.protocol import faults

BUCKET = os.environ.get("COMMIT_CELERY_BUCKET", "commit-celery")
WORKER = os.environ.get("COMMIT_WORKER_NAME", "?")
TASKS = 6
ROWS = 10


def _fs():
    import s3fs

    return s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)


def _ctl(ti) -> str:
    return f"{BUCKET}/ctl/{ti.dag_id}/{ti.run_id}"


def _record(fs, path: str, **extra) -> None:
    fs.pipe_file(path, json.dumps({"worker": WORKER, "host": socket.gethostname(), "pid": os.getpid(),
                                   "tmpdir": tempfile.gettempdir(), **extra}).encode())


def record_try(context) -> None:
    """``pre_execute`` of every write try: record where it runs; wait for the other worker if asked to."""
    ti, fs = context["ti"], _fs()
    ctl, round_ = _ctl(ti), context["dag_run"].clear_number
    _record(fs, f"{ctl}/tries/{ti.map_index}-{ti.try_number}.json", clear_number=round_)
    if fs.exists(f"{ctl}/spread-{round_}"):
        while True:  # a barrier on an observable state (tries recorded by both workers), not a timed wait
            workers = {json.loads(fs.cat_file(p))["worker"] for p in fs.find(f"{ctl}/tries")
                       if json.loads(fs.cat_file(p))["clear_number"] == round_}
            if len(workers) >= 2:
                return
            time.sleep(0.2)


def produce(task: int, ti):
    fs, ctl = _fs(), _ctl(ti)
    scratch = os.path.join(os.environ.get("COMMIT_WORKER_SCRATCH", tempfile.gettempdir()),
                           f"{ti.dag_id}-{ti.run_id}-{task}-{ti.try_number}.txt")
    with open(scratch, "w") as fh:  # private to this worker: no other worker can see it
        fh.write("scratch")
    _record(fs, f"{ctl}/calls/{task}-{ti.try_number}.json", scratch=scratch)
    table = pa.table({"task": pa.array([task] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                      "attempt": pa.array([ti.try_number] * ROWS, pa.int32()),
                      "day": [f"d{i % 2}" for i in range(ROWS)]})
    yield table.slice(0, ROWS // 2)
    hold = f"{ctl}/hold-{task}-{ti.try_number}"
    if fs.exists(hold):
        _record(fs, f"{ctl}/holding/{task}-{ti.try_number}.json")
        while fs.exists(hold):  # the test kills this worker here
            time.sleep(0.2)
    for flag in (f"fail-{task}-{ti.try_number}", f"fail-{task}-always"):
        if fs.exists(f"{ctl}/{flag}"):
            raise RuntimeError(f"injected failure of task {task}, try {ti.try_number} ({flag})")
    yield table.slice(ROWS // 2)


def stage_dag(dag_id: str, algorithm: int | str, mode: str = "append") -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
             default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
             tags=["airflow-commit-provider-tests"]) as dag:
        commit_stage("stage", target=f"s3://{BUCKET}/data/{dag_id}", conn_id="commit_s3", python_callable=produce,
                     expand_op_kwargs=[{"task": t} for t in range(TASKS)], algorithm=algorithm, mode=mode,
                     partition_by=["day"], write_kwargs={"pre_execute": record_try})
    return dag


cc_magic = stage_dag("cc_magic", "magic")
cc_v1 = stage_dag("cc_v1", 1)
cc_kill = stage_dag("cc_kill", "magic")


def record_commit_try(context) -> None:
    """``pre_execute`` of every commit try: record its worker; arm the stop after the table transaction if asked."""
    ti, fs = context["ti"], _fs()
    ctl = _ctl(ti)
    _record(fs, f"{ctl}/commit/{ti.try_number}.json")
    if fs.exists(f"{ctl}/stop-commit-{ti.try_number}"):
        os.environ[faults.ENV_VAR] = "table_commit.after=stop"
        faults.disarm()   # the environment is read again at the next point


with DAG("cc_iceberg", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=0.2)},
         tags=["airflow-commit-provider-tests"]) as cc_iceberg:
    shared = {"target": None, "conn_id": "commit_s3", "table_format": "iceberg", "table_name": "celery.events",
              "catalog": {"type": "sql", "uri": os.environ.get("COMMIT_ICEBERG_CATALOG_URI", "sqlite://"),
                          "warehouse": f"s3://{BUCKET}/warehouse"},
              "mode": "append", "partition_by": "day", "job_name": "stage"}
    with TaskGroup("stage"):
        setup = CommitSetupOperator(task_id="setup", **shared)
        write = CommitWriteOperator.partial(task_id="write", python_callable=produce, pre_execute=record_try,
                                            **shared).expand(op_kwargs=[{"task": t} for t in range(TASKS)])
        commit = CommitJobOperator(task_id="commit", write_task_id="stage.write", pre_execute=record_commit_try,
                                   **shared)
        abort = CommitAbortOperator(task_id="abort", commit_task_id="stage.commit", **shared)
        setup >> write >> commit >> abort.as_teardown(setups=setup)
