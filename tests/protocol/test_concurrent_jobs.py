"""Concurrent jobs on one target, each in its own OS process: each commits exactly its own data, and one job's
abort or cleanup never touches another's work."""

from __future__ import annotations

import multiprocessing as mp

import pyarrow as pa

from airflow_commit_provider.protocol import FileOutputCommitter, read_success_marker, run_task_attempt

from . import scenario as sc

TASKS = 6


def _table(job: str, task: int, day: str) -> pa.Table:
    return pa.table({"job": [job] * 5, "task": pa.array([task] * 5, pa.int32()), "row": pa.array(range(5), pa.int32()),
                     "day": [day] * 5})


def _run_job(root: str, job: str, mode: str, day_of_task: dict, barrier, abort: bool) -> None:
    c = FileOutputCommitter(root, job, algorithm=1, mode=mode, partition_by=["day"], commit_threads=2)
    c.setup_job()
    barrier.wait(timeout=60)
    for t in range(TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(_table(job, t, day_of_task[t])))
    barrier.wait(timeout=60)  # both jobs have committed every task; now one commits while the other aborts
    if abort:
        c.abort_job()
    else:
        c.commit_job(TASKS)


def _run(root: str, jobs: list[tuple[str, str, dict, bool]]) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(jobs))
    procs = [ctx.Process(target=_run_job, args=(root, job, mode, days, barrier, abort))
             for job, mode, days, abort in jobs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0


def _rows_by_job(root: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in sc.read_rows(root):
        out.setdefault(r["job"], []).append((r["task"], r["row"], str(r["day"])))
    return out


def test_two_append_jobs_both_commit_everything(tmp_path):
    root = str(tmp_path / "out")
    days = {t: f"d{t % 3}" for t in range(TASKS)}
    _run(root, [("append-a", "append", days, False), ("append-b", "append", days, False)])
    rows = _rows_by_job(root)
    expected = sorted((t, i, days[t]) for t in range(TASKS) for i in range(5))
    assert sorted(rows["append-a"]) == expected
    assert sorted(rows["append-b"]) == expected


def test_two_dynamic_jobs_on_different_partitions(tmp_path):
    root = str(tmp_path / "out")
    days_a = {t: "2024-01-01" for t in range(TASKS)}
    days_b = {t: "2024-01-02" for t in range(TASKS)}
    _run(root, [("dyn-a", "dynamic", days_a, False), ("dyn-b", "dynamic", days_b, False)])
    rows = _rows_by_job(root)
    assert sorted(rows["dyn-a"]) == sorted((t, i, "2024-01-01") for t in range(TASKS) for i in range(5))
    assert sorted(rows["dyn-b"]) == sorted((t, i, "2024-01-02") for t in range(TASKS) for i in range(5))
    for day, job in (("2024-01-01", "dyn-a"), ("2024-01-02", "dyn-b")):
        assert read_success_marker(f"{root}/day={day}", verify_files=True)["job_id"] == job


def test_abort_of_one_job_leaves_the_other(tmp_path):
    root = str(tmp_path / "out")
    days = {t: f"d{t % 2}" for t in range(TASKS)}
    _run(root, [("keep", "append", days, False), ("drop", "append", days, True)])
    rows = _rows_by_job(root)
    assert set(rows) == {"keep"}
    assert sorted(rows["keep"]) == sorted((t, i, days[t]) for t in range(TASKS) for i in range(5))
    assert not (tmp_path / "out" / "_temporary").exists()


def test_the_abort_of_a_v2_job_that_made_nothing_visible_leaves_the_other_jobs_marker(tmp_path):
    """Found from outside (session 19): a v2 job whose task committed no file (an empty task) withdrew the root
    ``_SUCCESS`` of another, committed job when its teardown withdrew that commit: no visible file changed, and
    the marker was gone for good."""
    root = str(tmp_path / "out")
    done = FileOutputCommitter(root, "done", algorithm=1, mode="append")
    done.setup_job()
    run_task_attempt(done, 0, 1, lambda w: w.write(_table("done", 0, "d0")))
    manifest = done.commit_job(1)
    empty = FileOutputCommitter(root, "empty", algorithm=2, mode="append")
    empty.setup_job()
    assert run_task_attempt(empty, 0, 1, lambda w: None).files == 0
    assert read_success_marker(root, verify_files=True)["job_uuid"] == manifest["job_uuid"]
    empty.abort_job(keep_committed=True)
    assert read_success_marker(root, verify_files=True)["job_uuid"] == manifest["job_uuid"]
