"""Concurrent jobs on one target, each in its own OS process: each commits exactly its own data, and one job's
abort or cleanup never touches another's work."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, LocalStore, read_success_marker, run_task_attempt

from ..support import resume, wait_stopped
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


def _committed(root: str, job: str, day: str = "d0") -> dict:
    c = FileOutputCommitter(root, job, algorithm=1, mode="append")
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(_table(job, 0, day)))
    return c.commit_job(1)


@pytest.mark.parametrize("end", ["teardown", "purge", "commit"])
def test_no_marker_vouches_for_a_v2_jobs_uncommitted_files(tmp_path, end):
    """Found from outside (session 19): a job that committed while a v2 job's task commits were visible wrote a
    root ``_SUCCESS`` listing them as ``retained``; a reader gated on it read rows the v2 job's abort then took
    away. The commit writes no marker while such files are visible (it says why); the v2 job's commit writes its
    own, and its abort writes the last commit's back (before, nothing did: readers waited for the next commit)."""
    root = str(tmp_path / "out")
    first = _committed(root, "first")
    v2 = FileOutputCommitter(root, "v2job", algorithm=2, mode="append")
    v2.setup_job()
    run_task_attempt(v2, 0, 1, lambda w: w.write(_table("v2job", 0, "d1")))
    assert not os.path.exists(os.path.join(root, "_SUCCESS")), "the v2 task commit withdrew the marker"
    other = _committed(root, "other")
    assert "job v2job (v2) has not committed" in other["diagnostics"]["markers_held_back"]["why"]
    assert any("no _SUCCESS written" in w for w in other["diagnostics"]["warnings"])
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
    if end == "commit":
        v2.commit_job(1)
        marker = read_success_marker(root, verify_files=True)
        assert marker["job_id"] == "v2job" and len(marker["retained"]) == 2   # first's and other's files
        return
    v2.abort_job(keep_committed=end == "teardown")
    marker = read_success_marker(root, verify_files=True)
    assert marker["job_uuid"] == other["job_uuid"] != first["job_uuid"], "the last commit's marker, back"
    assert "abort of job v2job" in marker["diagnostics"]["marker_written_back"]
    assert {r["path"] for r in marker["retained"]} == {f["path"] for f in first["files"]}
    assert {r["job"] for r in sc.read_rows(root)} == {"first", "other"}


def test_a_v2_abort_does_not_write_a_marker_back_while_another_v2_job_shows_files(tmp_path):
    root = str(tmp_path / "out")
    _committed(root, "first")
    jobs = [FileOutputCommitter(root, f"v2{i}", algorithm=2, mode="append") for i in range(2)]
    for i, c in enumerate(jobs):
        c.setup_job()
        run_task_attempt(c, 0, 1, lambda w, i=i: w.write(_table(f"v2{i}", 0, "d1")))
    jobs[0].abort_job()
    assert not os.path.exists(os.path.join(root, "_SUCCESS")), "v21's files are still visible, uncommitted"
    jobs[1].abort_job()
    assert read_success_marker(root, verify_files=True)["job_id"] == "first"


def test_a_v2_teardown_that_died_between_a_record_and_its_files_holds_other_markers_back(tmp_path):
    """Found by attacking the rule above from outside: the teardown removes a v2 task's record before its files;
    killed in between, the files stay visible with no record, and the next job's commit, which looked at records
    alone, vouched for them. Files named with an uncommitted v2 job's generation count too now."""
    from airflow_commit_provider.protocol import faults

    root = str(tmp_path / "out")
    z = FileOutputCommitter(root, "z", algorithm=2, mode="append")
    z.setup_job()
    run_task_attempt(z, 0, 1, lambda w: w.write(_table("z", 0, "d1")))
    faults.arm("abort_job.after_task_record", "raise")
    with pytest.raises(faults.InjectedFault):
        z.abort_job(keep_committed=True)
    faults.disarm()
    assert {r["job"] for r in sc.read_rows(root)} == {"z"}, "z's uncommitted rows are still visible"
    x = _committed(root, "x")
    assert x["diagnostics"]["markers_held_back"]["directories"] == [""]
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
    z.abort_job(keep_committed=True)   # the teardown again: z's rows go, x's marker comes back
    assert read_success_marker(root, verify_files=True)["job_uuid"] == x["job_uuid"]
    assert {r["job"] for r in sc.read_rows(root)} == {"x"}


def _paused(statement: str, point: str) -> subprocess.Popen:
    """*statement* (``C`` is ``FileOutputCommitter``, ``json`` imported) in a Python of its own, stopped
    (SIGSTOP) at fault point *point*: a zombie at the worst moment, which the test resumes (``support.resume``)."""
    code = f"import json; from airflow_commit_provider.protocol import FileOutputCommitter as C; {statement}"
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "COMMIT_PROVIDER_FAULTS": f"{point}=stop"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_stopped(proc)
    return proc


def test_a_paused_v2_teardown_writes_no_marker_over_the_clear_that_superseded_it(tmp_path):
    """Found from outside: a v2 teardown paused before writing the last commit's marker back, while the run's
    clear set up a new attempt whose task committed (visible, uncommitted), wrote the marker when it woke, listing
    that file, and only then stood down. It stands down first now."""
    root = str(tmp_path / "out")
    _committed(root, "first")
    z = FileOutputCommitter(root, "z", algorithm=2, mode="append")
    z.setup_job()
    run_task_attempt(z, 0, 1, lambda w: w.write(_table("z-old", 0, "d1")))
    teardown = _paused(f"print(json.dumps(C({root!r}, 'z', algorithm=2, mode='append')"
                       ".abort_job(keep_committed=True)))", "abort_job.after_uploads")
    clear = FileOutputCommitter(root, "z", algorithm=2, mode="append")
    clear.setup_job()
    run_task_attempt(clear, 0, 2, lambda w: w.write(_table("z-new", 0, "d1")))
    rc, out, err = resume(teardown)
    assert rc == 0 and json.loads(out.splitlines()[-1])["state"] == "superseded", err
    assert not os.path.exists(os.path.join(root, "_SUCCESS")), "a marker would vouch for the clear's visible file"
    clear.commit_job(1)
    marker = read_success_marker(root, verify_files=True)
    assert marker["job_id"] == "z" and {r["job"] for r in sc.read_rows(root)} == {"first", "z-new"}


@pytest.mark.parametrize("end", ["teardown", "purge"])
def test_a_v2_abort_between_a_held_back_commit_and_its_cleanup_writes_that_commits_marker(tmp_path, end):
    """Found from outside: job x held its marker back (v2 job z's files visible); z's abort, run while x was
    between its markers and its cleanup, left the marker to x (its plan was still there), which had decided to
    write none: both ended, x's data committed, no marker for good. The abort leaves it only to a job commit
    that has not written its commit log yet."""
    root = str(tmp_path / "out")
    _committed(root, "first")
    z = FileOutputCommitter(root, "z", algorithm=2, mode="append")
    z.setup_job()
    run_task_attempt(z, 0, 1, lambda w: w.write(_table("z", 0, "d1")))
    x = FileOutputCommitter(root, "x", algorithm=1, mode="append")
    x.setup_job()
    run_task_attempt(x, 0, 1, lambda w: w.write(_table("x", 0, "d0")))
    # x's markers stage done (held back), its cleanup not yet
    commit = _paused(f"C({root!r}, 'x', algorithm=1, mode='append').commit_job(1)", "commit_job.after_success")
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
    z.abort_job(keep_committed=end == "teardown")
    rc, _, err = resume(commit)
    assert rc == 0, err
    assert read_success_marker(root, verify_files=True)["job_id"] == "x"
    assert {r["job"] for r in sc.read_rows(root)} == {"first", "x"}


def test_an_unreadable_commit_log_of_another_job_does_not_stop_a_v2_abort(tmp_path):
    """Found from outside: the write-back read every commit log on the target, and a torn one made every v2
    teardown and purge fail before its record: the job could not be torn down nor collected. The marker stays
    withdrawn then (which commit is last is unknown), and the abort finishes."""
    root = str(tmp_path / "out")
    _committed(root, "old")
    with open(os.path.join(root, "_commits", "old.json"), "r+b") as fh:
        fh.truncate(20)
    z = FileOutputCommitter(root, "z", algorithm=2, mode="append")
    z.setup_job()
    run_task_attempt(z, 0, 1, lambda w: w.write(_table("z", 0, "d1")))
    assert z.abort_job(keep_committed=True)["aborted"]
    assert z.abort_job()["purged"]
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
    assert {r["job"] for r in sc.read_rows(root)} == {"old"}
    from airflow_commit_provider.protocol.target import verify
    assert "which job committed there last is unknown" in verify(LocalStore(root))["no_marker"]


def test_a_dynamic_commit_beside_a_v2_job_holds_back_only_the_markers_above_its_files(tmp_path):
    """Found from outside: holding every marker back (not only those above the v2 job's files) left a dynamic
    job's own partition markers out for good, though the v2 job never wrote there."""
    root = str(tmp_path / "out")
    z = FileOutputCommitter(root, "z", algorithm=2, mode="append", partition_by=["day"])
    z.setup_job()
    run_task_attempt(z, 0, 1, lambda w: w.write(_table("z", 0, "d1")))
    x = FileOutputCommitter(root, "x", algorithm=1, mode="dynamic", partition_by=["day"])
    x.setup_job()
    run_task_attempt(x, 0, 1, lambda w: w.write(_table("x", 0, "d5")))
    held = x.commit_job(1)["diagnostics"]["markers_held_back"]["directories"]
    assert held == ["", "day=d1"]
    assert read_success_marker(os.path.join(root, "day=d5"), verify_files=True)["job_id"] == "x"
    assert not os.path.exists(os.path.join(root, "_SUCCESS"))
    z.abort_job(keep_committed=True)
    assert read_success_marker(root, verify_files=True)["job_id"] == "x"
