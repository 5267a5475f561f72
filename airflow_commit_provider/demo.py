"""The demo: ``python -m airflow_commit_provider.demo``.

Part 1 (the protocol, no Airflow): a partitioned Parquet dataset written with FileOutputCommitter v1 by worker
processes; one task attempt is SIGKILLed midway through writing, its retry commits, the "driver" restarts (a new
application attempt) and recovers every committed task without re-running it; job commit prints the ``_SUCCESS``
summary. Part 2 (Airflow): an example DAG run end to end with ``dag.test()`` on an embedded SQLite metadata
database (see :mod:`airflow_commit_provider.example_runner`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Any

DEMO_TASKS = 4
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def _events(task: int, rows: int = 1000) -> Any:
    import pyarrow as pa

    return pa.table({
        "event_id": pa.array([task * rows + i for i in range(rows)], pa.int64()),
        "task": pa.array([task] * rows, pa.int32()),
        "day": [DAYS[i % len(DAYS)] for i in range(rows)],
        "amount": pa.array([(i * 7919) % 1000 / 10 for i in range(rows)], pa.float64()),
    })


def _committer(out: str) -> Any:
    from .protocol import FileOutputCommitter

    return FileOutputCommitter(out, "demo-events", algorithm=1, mode="overwrite", partition_by=["day"],
                               labels={"demo": "protocol"})


def _worker(out: str, task: int, attempt: int) -> None:
    """One task attempt in its own process (what an Airflow worker runs)."""
    from .protocol import run_task_attempt

    def produce(writer: Any) -> None:
        table = _events(task)
        half = table.num_rows // 2
        writer.write(table.slice(0, half))
        writer.write(table.slice(half))

    outcome = run_task_attempt(_committer(out), task, attempt, produce, max_rows_per_file=200)
    print(json.dumps(outcome.to_dict()))


def _spawn(out: str, task: int, attempt: int, fault: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("COMMIT_PROVIDER_FAULTS", None)
    if fault:
        env["COMMIT_PROVIDER_FAULTS"] = fault
    return subprocess.run([sys.executable, "-m", "airflow_commit_provider.demo", "--worker", out, str(task),
                           str(attempt)], env=env, capture_output=True, text=True)


def protocol_demo(out: str) -> dict[str, Any]:
    """Part 1; returns the ``_SUCCESS`` manifest."""
    import pyarrow.dataset as ds

    from .protocol import read_success_marker

    shutil.rmtree(out, ignore_errors=True)
    committer = _committer(out)
    print(f"== protocol demo: FileOutputCommitter v1, mode=overwrite, partitioned by day, into {out}")
    ctx = committer.setup_job()
    print(f"setup_job: job uuid {ctx.job_uuid}, application attempt {ctx.app_attempt}")
    for task in range(DEMO_TASKS):
        fault = "writer.after_file=kill@2" if task == 2 else None
        proc = _spawn(out, task, 1, fault)
        if proc.returncode == -9:
            print(f"task {task} attempt 1: worker SIGKILLed midway through writing (after 2 files)")
            proc = _spawn(out, task, 2)
        proc.check_returncode()
        outcome = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"task {task} attempt {outcome['attempt']}: {outcome['status']}, {outcome['files']} files, "
              f"{outcome['rows']} rows")
    ctx = committer.setup_job()
    print(f"driver restarted: application attempt {ctx.app_attempt}; every task tried again:")
    for task in range(DEMO_TASKS):
        outcome = json.loads(_spawn(out, task, 3).stdout.strip().splitlines()[-1])
        print(f"  task {task}: {outcome['status']} from application attempt {outcome['recovered_from_app']} "
              f"(user code ran: {outcome['ran_callable']})")
    manifest = committer.commit_job(DEMO_TASKS)
    manifest = read_success_marker(out, verify_files=True)
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    ids = rows.column("event_id").to_pylist()
    assert len(ids) == len(set(ids)) == DEMO_TASKS * 1000, "every event exactly once"
    totals = manifest["totals"]
    print(f"_SUCCESS: {totals['files']} files, {totals['rows']} rows, {totals['bytes']} bytes, "
          f"{totals['partitions']} partitions, application attempt {manifest['app_attempt']}")
    print("job commit stages (s): " + ", ".join(f"{k}={v:.4f}" for k, v in manifest["durations"].items()))
    print(f"read back with pyarrow: {len(ids)} rows, {len(set(ids))} distinct event ids - exactly once")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.abspath("demo-output"), help="directory for the demo's outputs")
    parser.add_argument("--protocol-only", action="store_true", help="skip the Airflow part")
    parser.add_argument("--worker", nargs=3, metavar=("OUT", "TASK", "ATTEMPT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker[0], int(args.worker[1]), int(args.worker[2]))
        return 0
    protocol_demo(os.path.join(args.out, "protocol-events"))
    if not args.protocol_only:
        from .example_runner import run_example, ui_hint

        runs = run_example(args.out)
        print(ui_hint(args.out, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
