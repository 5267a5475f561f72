"""The fault-injection matrix as one command: ``python -m tests.fault_matrix [--quick]``.

Every injection point x algorithm x file system (local disk; S3 on moto's server, Google Cloud Storage on
fake-gcs-server and Azure Blob Storage on Azurite, started here on 127.0.0.1) x kill style (``os._exit`` and SIGKILL
of the worker process), and a Delta and an Iceberg table (local disk; job commit points and the table transaction's
own, ``--no-tables`` leaves them out: ``tests/protocol/test_tables.py``). Each cell: an earlier application attempt
committed two tasks; a worker process runs a whole application attempt and is killed at the point; the job is then
recovered as Airflow would (a DAG-run clear for ``exit``, "clear only failed" for ``kill``); the output is read back
with pyarrow row by row (nothing lost, nothing duplicated, old data replaced as overwrite says), and no
``_temporary`` and no pending multipart upload may remain. Prints the matrix and the pass count; exits non-zero on
any failure.

Then the same for a task instance of several shards (``shards_per_task``, ``tests/protocol/shard_scenario.py``):
every task-side point x file system x kill style, the worker running one try of a task instance of 4 shards,
killed after some shards committed (and after the shards of an earlier application attempt were recovered); its
retry must call the user code of exactly the uncommitted shards, and the job commit hold every row once.

Then an audited stage (write, audit, publish: ``tests/protocol/test_audit_faults.py``): the worker killed at each
audit point (:data:`faults.AUDIT_POINTS`) and right after the commit fixed its plan, recovered the same ways; the
output must hold every row once and its ``_SUCCESS`` the verdict of the audit the commit took.

CI runs the same cells through pytest (``tests/protocol/test_crash_matrix.py``, ``tests/s3/test_s3.py``,
``tests/protocol/test_audit_faults.py``); this command is the full cross product. ``--quick`` keeps the local file
system only, ``--stores azure,gcs`` the ones named; ``--only task``, ``--only shards`` or ``--only audit`` runs one
of the three matrices.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_commit_provider.protocol import faults, read_success_marker  # noqa: E402
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE  # noqa: E402
from tests.protocol import scenario as sc  # noqa: E402
from tests.protocol import shard_scenario as ss  # noqa: E402
from tests.protocol.test_crash_matrix import MIDWAY, spawn  # noqa: E402
from tests.support import start_azurite, start_fake_gcs, start_moto  # noqa: E402

POINTS = [p for p in faults.POINTS if not p.startswith("abort_job.")] + list(faults.TABLE_POINTS)
#: the points a job commit into a table reaches (its task side is the files' own): the other rows are "-" there
TABLE_CELL_POINTS = [p for p in POINTS if p.startswith(("commit_job.", "table_commit."))
                     and p != "commit_job.mid_delete"]


def run_table_cell(fmt: str, point: str, kill: str, base: str) -> str:
    """A job commit into a Delta or Iceberg table killed at *point*, resumed by a new process: the table then
    holds an earlier job's rows and this job's exactly once, in exactly two transactions."""
    from tests.protocol.test_tables import expected, rows, run, transactions

    if point not in TABLE_CELL_POINTS:
        return "n/a"
    where = os.path.join(base, uuid.uuid4().hex)
    cfg = {"format": fmt, "location": where, "table_name": "ns.events" if fmt == "iceberg" else None,
           "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 3, "rows": 4, "gen": 0}
    try:
        first = run(cfg)
        if first.returncode != 0:
            return f"FAIL: the earlier job failed: {first.stderr[-300:]}"
        cfg = {**cfg, "job_id": "events-2", "gen": 1}
        proc = run(cfg, f"{point}={kill}@{MIDWAY.get(point, 1)}")
        if proc.returncode != (FAULT_EXIT_CODE if kill == "exit" else -9):
            return f"FAIL: worker rc={proc.returncode}: {proc.stderr[-300:]}"
        again = run({**cfg, "phase": "commit"})
        if again.returncode != 0:
            return f"FAIL: the resumed commit failed: {again.stderr[-300:]}"
        if rows(cfg) != sorted(expected() + expected(gen=1)) or transactions(cfg) != 2:
            return f"FAIL: {len(rows(cfg))} rows in {transactions(cfg)} transactions"
        return "pass"
    except Exception as exc:  # a failed cell is reported, the matrix goes on
        return f"FAIL: {type(exc).__name__}: {exc} {traceback.format_exc(limit=2)[-200:]}"


def new_root(fs: str, base: str) -> str:
    if fs == "local":
        return os.path.join(base, uuid.uuid4().hex)
    if fs in ("gcs", "azure"):
        from airflow_commit_provider.protocol.stores.azure import azure_filesystem
        from airflow_commit_provider.protocol.stores.gcs import gcs_filesystem

        bucket = f"m-{uuid.uuid4().hex[:16]}"
        (gcs_filesystem() if fs == "gcs" else azure_filesystem()).mkdir(bucket)
        return f"{'gs' if fs == 'gcs' else 'abfs'}://{bucket}/table"
    import boto3

    bucket = f"m-{uuid.uuid4().hex[:16]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/table"


def no_pending_uploads(root: str) -> str | None:
    if not root.startswith("s3://"):
        return None
    import boto3

    pending = boto3.client("s3").list_multipart_uploads(Bucket=root.split("/")[2]).get("Uploads", [])
    return f"FAIL: {len(pending)} pending uploads left" if pending else None


def run_shard_cell(fs: str, algorithm, point: str, kill: str, base: str) -> str:
    """A task instance of several shards killed at *point*: ``pass``, ``n/a`` or ``FAIL: ...``."""
    root = new_root(fs, base)
    work = tempfile.mkdtemp(dir=base)
    cfg = {"root": root, "work": work, "algorithm": algorithm, "mode": "overwrite"}
    if algorithm == "magic":
        cfg["part_size"] = 5 * 2**20
    try:
        result = ss.crash_cell(cfg, point, kill)
        return (no_pending_uploads(root) or result) if result == "pass" else result
    except Exception as exc:  # a failed cell is reported, the matrix goes on
        return f"FAIL: {type(exc).__name__}: {exc} {traceback.format_exc(limit=2)[-200:]}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: the audited stage's cells: every audit point, and the commit's plan (a resumed commit keeps the verdict)
AUDIT_MATRIX_POINTS = [*faults.AUDIT_POINTS, "commit_job.after_plan"]


def run_audit_cell(fs: str, algorithm, point: str, kill: str, base: str) -> str:
    """:func:`run_cell` of an audited stage, whose ``_SUCCESS`` must then carry the audit's passing verdict."""
    return run_cell(fs, algorithm, point, kill, base, audit=True)


def run_cell(fs: str, algorithm, point: str, kill: str, base: str, *, audit: bool = False) -> str:
    """``pass``, ``n/a`` (the point is not on this algorithm's path) or ``FAIL: ...``."""
    root = new_root(fs, base)
    work = tempfile.mkdtemp(dir=base)
    cfg = {"root": root, "work": work, "algorithm": algorithm, "mode": "overwrite", "audit": audit}
    if algorithm == "magic":
        cfg["part_size"] = 5 * 2**20
    try:
        sc.write_old_data(root)
        sc.phase_prior(cfg)
        proc = spawn("main", cfg, f"{point}={kill}@{MIDWAY.get(point, 1)}")
        if proc.returncode == 0:
            return "n/a"
        if proc.returncode != (FAULT_EXIT_CODE if kill == "exit" else -9):
            return f"FAIL: worker rc={proc.returncode}: {proc.stderr[-300:]}"
        sc.check_no_duplicates(sc.read_rows(root))
        if kill == "exit":
            sc.phase_main(cfg, 21)
        else:
            sc.phase_retry(cfg, 31)
        sc.assert_exactly_once(sc.read_rows(root), old=set())
        if audit and not read_success_marker(root).get("audit", {}).get("passed"):
            return "FAIL: _SUCCESS has no passing audit verdict"
        leftovers = [f for f in sc.all_files(root) if f.startswith("_temporary")]
        if leftovers:
            return f"FAIL: left {leftovers[:3]}"
        return no_pending_uploads(root) or "pass"
    except Exception as exc:  # a failed cell is reported, the matrix goes on
        return f"FAIL: {type(exc).__name__}: {exc} {traceback.format_exc(limit=2)[-200:]}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: the file systems of the matrix and the algorithms each runs
STORES: dict[str, tuple] = {"local": (1, 2), "s3": (1, 2, "magic"), "gcs": (1, 2), "azure": (1, 2, "magic")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="local file system only")
    parser.add_argument("--only", choices=("task", "shards", "audit"), help="one of the three matrices")
    parser.add_argument("--no-tables", action="store_true", help="no Delta and Iceberg columns")
    parser.add_argument("--stores", type=lambda v: v.split(","), default=list(STORES),
                        help=f"comma-separated file systems of {', '.join(STORES)} (default: all)")
    args = parser.parse_args()
    unknown = sorted(set(args.stores) - set(STORES))
    if unknown:
        parser.error(f"unknown store(s) {unknown}: give some of {', '.join(STORES)}")
    stores = ["local"] if args.quick else args.stores
    columns = [(fs, alg) for fs in stores for alg in STORES[fs]]
    if not args.no_tables:
        columns += [("table", "delta"), ("table", "iceberg")]
    moto = start_moto(os.environ)[0] if "s3" in stores else None
    fake_gcs = start_fake_gcs(os.environ)[0] if "gcs" in stores else None
    azurite = start_azurite(os.environ)[0] if "azure" in stores else None
    base = tempfile.mkdtemp(prefix="fault-matrix-")
    results: dict[tuple, str] = {}
    matrices = [(m, p, c) for m, p, c in (("task", POINTS, run_cell), ("shards", ss.SHARD_POINTS, run_shard_cell),
                                          ("audit", AUDIT_MATRIX_POINTS, run_audit_cell))
                if args.only in (None, m)]
    t0 = time.monotonic()
    try:
        for matrix, points, cell in matrices:
            for point in points:
                for fs, alg in columns:
                    for kill in ("exit", "kill"):
                        if fs == "table":
                            outcome = run_table_cell(str(alg), point, kill, base) if matrix == "task" else "n/a"
                        elif point in faults.TABLE_POINTS:
                            outcome = "n/a"
                        else:
                            outcome = cell(fs, alg, point, kill, base)
                        results[(matrix, point, fs, alg, kill)] = outcome
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for server in (moto, fake_gcs, azurite):
            if server is not None:
                server.terminate()
    heads = [f"{fs} {'v' + str(alg) if isinstance(alg, int) else alg} {kill}" for fs, alg in columns
             for kill in ("exit", "kill")]
    width = max(map(len, POINTS))
    mark = {"pass": "ok", "n/a": "-"}
    for matrix, points, _ in matrices:
        title = {"task": "one task per task instance", "shards": "a task instance of 4 shards",
                 "audit": "an audited stage (write, audit, publish)"}[matrix]
        print(f"\n{title}\n" + " " * width + " | " + " | ".join(heads))
        for point in points:
            cells = [mark.get(results[(matrix, point, fs, alg, kill)], "FAIL") for fs, alg in columns
                     for kill in ("exit", "kill")]
            print(point.ljust(width) + " | " + " | ".join(c.center(len(h)) for c, h in zip(cells, heads)))
    passed = sum(v == "pass" for v in results.values())
    na = sum(v == "n/a" for v in results.values())
    failed = {k: v for k, v in results.items() if v.startswith("FAIL")}
    for key, why in failed.items():
        print(f"FAILED {key}: {why}")
    print(f"{passed} passed, {len(failed)} failed ({na} cells not on that algorithm's path; "
          f"{len(results)} cells in {time.monotonic() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
