"""Job commit's cleanup: on a local disk the committed job's records leave ``_temporary/<job>`` in one rename into
``_temporary/_trash`` and are deleted then or later (``defer_cleanup``); a deferred or interrupted deletion is
finished by the next commit_job, setup_job, abort_job or remove_trash of the same job, never of another."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, read_success_marker, run_task_attempt

from . import scenario as sc

TASKS = 4


def committed_job(root: str, job: str = "job", **kw) -> FileOutputCommitter:
    c = FileOutputCommitter(root, job, mode="append", **kw)
    c.setup_job()
    for t in range(TASKS):
        assert run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1))).status == "committed"
    return c


def trash(root: str) -> list[str]:
    path = os.path.join(root, "_temporary", "_trash")
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


@pytest.mark.parametrize("algorithm", [1, 2])
def test_deferred_cleanup_leaves_only_trash_and_the_next_call_removes_it(tmp_path, algorithm):
    root = str(tmp_path / "out")
    c = committed_job(root, algorithm=algorithm)
    manifest = c.commit_job(TASKS, defer_cleanup=True)
    # committed: _SUCCESS, the data, the commit log; the job's directory is gone, its records wait in the trash
    assert read_success_marker(root, verify_files=True)["job_uuid"] == manifest["job_uuid"]
    sc.assert_exactly_once(sc.read_rows(root))
    assert not os.path.exists(os.path.join(root, "_temporary", "job"))
    assert len(trash(root)) == 1 and trash(root)[0].startswith("job.")
    assert c.status()["state"] == "committed"
    # a retried commit (the commit task's retry) answers from the commit log and finishes the cleanup
    again = c.commit_job(TASKS)
    assert again["job_uuid"] == manifest["job_uuid"]
    assert not os.path.exists(os.path.join(root, "_temporary"))


def test_cleanup_not_deferred_leaves_nothing(tmp_path):
    root = str(tmp_path / "out")
    committed_job(root).commit_job(TASKS)
    assert not os.path.exists(os.path.join(root, "_temporary"))
    sc.assert_exactly_once(sc.read_rows(root))


@pytest.mark.parametrize("finisher", ["setup_job", "abort_job", "remove_trash"])
def test_trash_is_removed_by_the_jobs_next_call_and_only_its_own(tmp_path, finisher):
    root = str(tmp_path / "out")
    other = committed_job(root, job="other")
    other.commit_job(TASKS, defer_cleanup=True)
    c = committed_job(root, job="job")
    c.commit_job(TASKS, defer_cleanup=True)
    assert [name.split(".")[0] for name in trash(root)] == ["job", "other"]
    getattr(c, finisher)()
    assert [name.split(".")[0] for name in trash(root)] == ["other"]
    assert other.remove_trash() == 1
    if finisher != "setup_job":   # setup_job started a new generation of "job": its directory is live
        assert not os.path.exists(os.path.join(root, "_temporary"))


def _commit_and_die(root: str) -> None:
    from airflow_commit_provider.protocol import faults

    faults.arm("commit_job.after_cleanup", "kill")
    FileOutputCommitter(root, "job", mode="append").commit_job(TASKS, defer_cleanup=True)


def test_a_commit_killed_after_the_rename_is_finished_by_the_retry(tmp_path):
    """A real process SIGKILLed after its cleanup's rename: the output is committed, the retry removes the trash."""
    root = str(tmp_path / "out")
    committed_job(root)
    proc = multiprocessing.get_context("spawn").Process(target=_commit_and_die, args=(root,))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -9
    assert len(trash(root)) == 1
    manifest = FileOutputCommitter(root, "job", mode="append").commit_job(TASKS)
    assert read_success_marker(root, verify_files=True)["job_uuid"] == manifest["job_uuid"]
    sc.assert_exactly_once(sc.read_rows(root))
    assert not os.path.exists(os.path.join(root, "_temporary"))
