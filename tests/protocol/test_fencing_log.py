"""The retry's log says that the try it replaces was fenced (issue 25, item 7): a worker SIGKILLed mid-write, then
the next try of the task in another process. Before, nothing in the retry's log told the user why the killed
try's files were gone and that it could never commit."""

from __future__ import annotations

import logging

import pytest

from airflow_commit_provider.protocol import CommitDenied
from airflow_commit_provider.protocol.tasks.context import TaskAttemptContext

from . import scenario as sc
from .test_crash_matrix import expect_killed, spawn


def test_the_retry_logs_that_the_killed_try_is_fenced(tmp_path, caplog):
    cfg = {"root": str(tmp_path / "out"), "work": str(tmp_path / "work"), "algorithm": 1, "mode": "overwrite"}
    sc.committer(cfg).setup_job()
    expect_killed(spawn("task", {**cfg, "task": 2, "attempt": 1}, "writer.after_file=kill"), "kill")
    with caplog.at_level(logging.WARNING, logger="airflow_commit_provider.protocol.tasks.attempts"):
        sc.run_task(cfg, 2, 2)
    [line] = [r.getMessage() for r in caplog.records if "fenced" in r.getMessage()]
    assert line.startswith("task 2: attempt 1 (a try that was killed") and "can never commit" in line
    # what the line says holds: the killed try, woken, cannot commit
    c = sc.committer(cfg)
    job = c.job.require_job()
    zombie = TaskAttemptContext(c.job_id, job.job_uuid, 0, 2, 1, c.layout.attempt_dir(0, 2, 1))
    with pytest.raises(CommitDenied, match="recorded as failed|already committed"):
        c.commit_task(zombie)
