"""Compaction as a job with a fixed plan (:mod:`airflow_commit_provider.protocol.compaction`), from outside: real
processes, real Parquet files, every row counted by pyarrow and duckdb, every marker verified."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_commit_provider.protocol import FileOutputCommitter, read_success_marker, run_task_attempt

from . import compaction_worker as worker
from . import scenario as sc

DAYS = ("d0", "d1")
FILES_PER_DAY = 6
ROWS_PER_FILE = 5


def small_table(root: str) -> list[int]:
    """Two partitions of six five-row files each: 60 ids, each once."""
    ids: list[int] = []
    for day in DAYS:
        os.makedirs(f"{root}/day={day}", exist_ok=True)
        for i in range(FILES_PER_DAY):
            rows = list(range(len(ids), len(ids) + ROWS_PER_FILE))
            pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), f"{root}/day={day}/small-{i:02d}.parquet",
                           compression="none")
            ids += rows
    return ids


def ids_pyarrow(root: str) -> Counter[int]:
    return Counter(r["id"] for r in sc.read_rows(root))


def ids_duckdb(root: str) -> Counter[int]:
    import duckdb

    files = [f"{root}/{p}" for p in sc.visible_files(root)]
    if not files:
        return Counter()
    rows = duckdb.connect().execute("select id from read_parquet(?, hive_partitioning = true)", [files]).fetchall()
    return Counter(r[0] for r in rows)


def assert_rows(root: str, expected: Counter[int]) -> None:
    """The rows readers see are exactly *expected* (each id as often as it says), read by pyarrow and duckdb, and
    every marker present tells the truth."""
    for read in (ids_pyarrow, ids_duckdb):
        got = read(root)
        twice = sorted(i for i, n in got.items() if n > expected.get(i, 0))
        lost = sorted(i for i, n in expected.items() if got.get(i, 0) < n)
        assert not twice and not lost, f"{read.__name__}: {len(twice)} ids too often {twice[:10]}, " \
                                       f"{len(lost)} ids lost {lost[:10]}"
    sc.assert_markers_tell_truth(root)


def wait_stopped(proc) -> None:
    """Block until *proc* stopped itself at its armed ``stop`` fault point (or died: then fail, naming why)."""
    pid, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        out, err = proc.communicate()
        raise AssertionError(f"the worker ended (status {status}) before its stop point:\n{out}\n{err}")


def resume(proc) -> tuple[int, str, str]:
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def test_two_overlapping_compactions_one_commits_the_other_refuses(tmp_path):
    """Run 2 has merged every group and is at its job commit when run 1, planned over the same inputs, runs
    from start to end. Before the fix both committed: run 2's plan kept only the inputs still visible (none) and
    published its merged files next to run 1's: 60 of 60 ids twice, with a ``_SUCCESS`` that verified."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    run2 = worker.start(root, "compact-run2", 1, faults="commit_job.after_recovery=stop")
    wait_stopped(run2)
    run1 = worker.run(root, "compact-run1", 1)
    code, out, err = resume(run2)
    assert_rows(root, Counter(ids))
    assert (run1.returncode, code) == (worker.REFUSED, 0), f"run 1: {run1.stderr}\nrun 2: {err}"
    assert "InputsClaimed" in run1.stderr and "compact-run2" in run1.stderr, run1.stderr
    assert read_success_marker(root, verify_files=True)["totals"]["rows"] == len(ids)
    assert not any("small-" in f for f in sc.visible_files(root)), "the committed run merged every input"


def _dynamic_rewrite(root: str, day: str, ids: list[int]) -> None:
    """A job of this provider replacing partition *day* (mode dynamic) with *ids*."""
    c = FileOutputCommitter(root, f"rewrite-{day}", algorithm=1, mode="dynamic", partition_by=["day"])
    c.setup_job()
    table = pa.table({"id": pa.array(ids, pa.int64()), "day": [day] * len(ids)})
    run_task_attempt(c, 0, 1, lambda w: w.write(table))
    c.commit_job(1)


def test_a_retry_after_a_dynamic_job_rewrote_a_partition_loses_nothing(tmp_path):
    """Try 1 merges d0's group (task 0), then dies; a dynamic job replaces d0 before try 2. Before the fix, try 2
    rebuilt its groups from the inputs still there (only d1's), so task 0 stood for d1's group and recovery
    adopted the old d0 merge in its place: d1's 30 ids were lost and d0's 30 replaced ids came back."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    first = worker.run(root, "compact", 1, faults="commit_task.after_record=kill@1")
    assert first.returncode == -signal.SIGKILL, first.stderr
    new_d0 = list(range(1000, 1030))
    _dynamic_rewrite(root, "d0", new_d0)
    expected = Counter(new_d0 + ids[30:])
    assert_rows(root, expected)
    retry = worker.run(root, "compact", 2)
    assert_rows(root, expected)   # whatever the retry did, no row lost and none back from the replaced d0
    assert retry.returncode == worker.REFUSED, retry.stdout + retry.stderr
    assert "day=d0/small-00.parquet" in retry.stderr, retry.stderr
