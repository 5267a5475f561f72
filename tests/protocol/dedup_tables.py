"""Table directories as users have them, for the deduplication tests, and the processes that act on them.

Spark's tables are the ones Spark 4.3 wrote (``fixtures/spark43``, see ``make_spark_fixtures``); Hive's and
Hadoop's files are named by their writers' rules (``protocol/filenames.py``); this provider's come from its own
committer. Every row is an ``id`` (int64) written once, so a reader can tell a lost row from a duplicated one.

Run as ``python -m tests.protocol.dedup_tables ACTION ROOT [ARGS]`` for a real process (killed or stopped through
``COMMIT_PROVIDER_FAULTS``): ``dedup`` (``remove_duplicates``), ``commit JOB FIRST COUNT`` (an append of ids
``FIRST..FIRST+COUNT-1`` by this provider, partitioned by ``p``), ``read OUT`` (both readers, the result as JSON
into OUT).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_commit_provider.protocol import (
    FileOutputCommitter,
    LocalStore,
    TaskAttemptWriter,
    faults,
    read_success_marker,
    run_task_attempt,
)
from airflow_commit_provider.protocol.publish.base import stored_paths

REPO = Path(__file__).resolve().parents[2]
SPARK = Path(__file__).parent / "fixtures" / "spark43"
TABLES = json.loads((SPARK / "tables.json").read_text())["tables"]


def spark_table(name: str, dest: Path) -> str:
    """A copy of the Spark-written table *name*; returns its root."""
    shutil.copytree(SPARK / name, dest)
    return str(dest)


def spark_ids(name: str) -> list[int]:
    lo, hi = TABLES[name]["ids"]
    return list(range(lo, hi))


def ids_table(ids: list[int], partition_by: tuple[str, ...] = (), part: int | None = None) -> pa.Table:
    """The rows; partitioned by ``p``: ``id % 2`` (as the Spark tables are), or *part*."""
    table = pa.table({"id": pa.array(ids, pa.int64())})
    if "p" in partition_by:
        table = table.append_column("p", pa.array([i % 2 if part is None else part for i in ids], pa.int32()))
    return table


def write_parquet(path: str, ids: list[int]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(ids_table(ids), path)


def zombie_copy(root: str, rel: str) -> str:
    """A second copy of *rel* under the name a mover that does not replace gives it (Hive's ``mvFile``:
    ``_copy_1`` before the last extension), as a zombie's late output lands next to the committed file."""
    head, _, name = rel.rpartition("/")
    base, dot, ext = name.rpartition(".")
    copy = f"{base}_copy_1.{ext}" if dot else f"{name}_copy_1"
    dst = f"{head}/{copy}" if head else copy
    shutil.copyfile(os.path.join(root, rel), os.path.join(root, dst))
    crc = os.path.join(root, head, f".{name}.crc")
    if os.path.exists(crc):  # Hadoop's file systems write a checksum beside every file they copy
        shutil.copyfile(crc, os.path.join(root, head, f".{copy}.crc"))
    return dst


def our_append(root: str, job: str, ids_by_task: dict[int, list[int]], *, algorithm: int = 1,
               mode: str = "append", partition_by: tuple[str, ...] = (), commit: bool = True) -> FileOutputCommitter:
    """A job of this provider: one committed attempt per task, then (with *commit*) its job commit."""
    c = FileOutputCommitter(root, job, algorithm=algorithm, mode=mode, partition_by=partition_by)
    c.setup_job()
    for task, ids in ids_by_task.items():
        run_task_attempt(c, task, 1, lambda w, ids=ids: w.write(ids_table(ids, partition_by)))
    if commit:
        c.commit_job(len(ids_by_task))
    return c


def unfinished_attempt(c: FileOutputCommitter, task: int, attempt: int, ids: list[int],
                       part: int | None = None) -> dict[str, bytes]:
    """Attempt *attempt* of *task* writes *ids* one row per file and stops before its task commit (a zombie, or
    a speculative attempt about to lose): its files, as that process still holds them."""
    ta = c.setup_task(task, attempt)
    with TaskAttemptWriter(c, ta, partition_by=c.partition_by, max_rows_per_file=1) as w:
        w.write(ids_table(ids, c.partition_by, part))
    # by the path each file stands for (an attempt keeps partitioned files flat: see publish.base.flat_name)
    stored = stored_paths(rel for rel, _ in c.store.list_files(ta.work_dir))
    return {rel: c.store.read_bytes(f"{ta.work_dir}/{name}") for rel, name in stored.items()}


def speculative_loser(c: FileOutputCommitter, task: int, ids: list[int], part: int | None = None) -> dict[str, bytes]:
    """A speculative attempt (1) of *task* that writes *ids* one row per file and is then fenced by attempt 2,
    which wins the task: the loser's files, as the zombie still holds them (it never commits them)."""
    held = unfinished_attempt(c, task, 1, ids, part)
    run_task_attempt(c, task, 2, lambda w: w.write(ids_table(ids, c.partition_by, part)))
    return held


def zombie_moves_in(root: str, held: dict[str, bytes]) -> list[str]:
    """The zombie, outside the protocol, moves its files into the output after the job committed, without
    replacing what is there: a name the output holds gets ``_copy_1`` (Hive's ``mvFile`` rule). Returns the
    paths it wrote."""
    written = []
    for rel, data in sorted(held.items()):
        dst = rel
        if os.path.exists(os.path.join(root, rel)):
            head, _, name = rel.rpartition("/")
            base, _, ext = name.rpartition(".")
            dst = f"{head}/{base}_copy_1.{ext}" if head else f"{base}_copy_1.{ext}"
        os.makedirs(os.path.dirname(os.path.join(root, dst)), exist_ok=True)
        Path(root, dst).write_bytes(data)
        written.append(dst)
    return written


def visible(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        rel = os.path.relpath(dirpath, root)
        out += [name if rel == "." else f"{rel}/{name}" for name in filenames if not name.startswith(("_", "."))]
    return sorted(out)


def all_files(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


def read_ids(root: str) -> dict[str, list[int]]:
    """The ids pyarrow (the directory, hive partitions, hidden names skipped) and duckdb (the visible files) read."""
    arrow = ds.dataset(root, format="parquet", partitioning="hive").to_table(columns=["id"]).column("id").to_pylist()
    files = [os.path.join(root, f) for f in visible(root)]
    con = duckdb.connect()
    try:
        duck = [r[0] for r in con.execute("SELECT id FROM read_parquet(?)", [files]).fetchall()] if files else []
    finally:
        con.close()
    return {"pyarrow": sorted(arrow), "duckdb": sorted(duck)}


def assert_rows_once(root: str, ids: list[int]) -> None:
    got = read_ids(root)
    assert got["pyarrow"] == sorted(ids), f"pyarrow reads {got['pyarrow']}, every row once is {sorted(ids)}"
    assert got["duckdb"] == sorted(ids), f"duckdb reads {got['duckdb']}, every row once is {sorted(ids)}"


def visible_dirs(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        if "_SUCCESS" in filenames:
            rel = os.path.relpath(dirpath, root)
            out.append("" if rel == "." else rel)
    return sorted(out)


def assert_markers_true(root: str) -> list[str]:
    """Every ``_SUCCESS`` there is tells the truth: this provider's list exactly the visible files under them
    (``read_success_marker(verify_files=True)``), Hadoop's 0-byte ones list nothing. Returns their directories."""
    found = visible_dirs(root)
    for d in found:
        path = os.path.join(root, d, "_SUCCESS")
        if os.path.getsize(path):
            read_success_marker(os.path.join(root, d), verify_files=True)
    return found


def dedup_in_process(root: str, **kwargs: Any) -> dict[str, Any]:
    from airflow_commit_provider.protocol.maintenance.dedup import remove_duplicates

    return remove_duplicates(LocalStore(root), **kwargs)


def spawn(action: str, root: str, *args: str, fault: str | None = None) -> subprocess.Popen:
    """``python -m tests.protocol.dedup_tables ACTION ROOT ARGS`` in a process of its own, *fault* armed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(faults.ENV_VAR, None)
    if fault:
        env[faults.ENV_VAR] = fault
    return subprocess.Popen([sys.executable, "-m", "tests.protocol.dedup_tables", action, root, *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_stopped(proc: subprocess.Popen) -> None:
    """Until *proc* stopped itself at its fault point (``stop``): the synchronisation, not a timing."""
    for _ in range(60000):
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid and os.WIFSTOPPED(status):
            return
        if pid:
            raise AssertionError(f"the process ended (status {status}) before its fault point: {proc.stderr.read()}")
        time.sleep(0.005)
    raise AssertionError("the process never reached its fault point")


def resume(proc: subprocess.Popen) -> str:
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{out}\n{err}"
    return out


def main() -> None:
    action, root = sys.argv[1], sys.argv[2]
    if action == "dedup":
        print(json.dumps(dedup_in_process(root, single_job_dirs="--single-job-dirs" in sys.argv)))
    elif action == "commit":
        job, first, count = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        our_append(root, job, {0: list(range(first, first + count))}, partition_by=("p",))
    elif action == "read":
        Path(sys.argv[3]).write_text(json.dumps({**read_ids(root), "markers": visible_dirs(root),
                                                 "visible": visible(root)}))
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main()
