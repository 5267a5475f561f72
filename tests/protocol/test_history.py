"""The commit history reader (:mod:`airflow_commit_provider.protocol.history`) over real commits on a local disk:
what counts as new to a cursor when a commit log is deleted and re-created, or unreadable for a while."""

from __future__ import annotations

import shutil

import pyarrow as pa

from airflow_commit_provider.protocol import make_committer, run_task_attempt, store_for
from airflow_commit_provider.protocol.history import Cursor, HistoryReader


def commit(root: str, job: str) -> None:
    c = make_committer(root, job, mode="append")
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(pa.table({"x": [1, 2]})))
    c.commit_job(1)


def test_a_recreated_commit_log_is_new(tmp_path):
    """A job whose log was deleted commits again as generation 0, with a new uuid: a new commit, although the
    cursor has seen a generation 0 of that job."""
    root = str(tmp_path / "t")
    commit(root, "job-a")
    reader = HistoryReader(store_for(root))
    history = reader.read()
    assert [c.manifest for c in history.jobs["job-a"]] == [None], "summaries only: a manifest is read to emit"
    assert reader.loaded(history.jobs["job-a"][0]).manifest["totals"]["rows"] == 2
    cursor = history.baseline(upto=history.jobs["job-a"][0].commit_id)
    (tmp_path / "t" / "_commits" / "job-a.json").unlink()
    assert reader.read().since(cursor) == ([], Cursor({})), "a log that vanished leaves the cursor"
    commit(root, "job-a")
    new, _ = reader.read().since(cursor)
    assert [(c.job_id, c.summary["generation"]) for c in new] == [("job-a", 0)]
    assert new[0].commit_id != cursor.seen["job-a"]


def test_an_unreadable_commit_log_holds_only_its_own_commits(tmp_path):
    """A commit log that does not parse is skipped (and named), the other jobs' commits still come, and the job
    keeps its place in the cursor: once the log reads again, only its commits not seen yet come."""
    root = str(tmp_path / "t")
    commit(root, "job-a")
    reader = HistoryReader(store_for(root))
    cursor = reader.read().baseline(upto=reader.read().jobs["job-a"][0].commit_id)
    log = tmp_path / "t" / "_commits" / "job-a.json"
    shutil.copy(log, tmp_path / "saved.json")
    log.write_text("{not json")
    commit(root, "job-b")
    history = reader.read()
    assert list(history.unreadable) == ["job-a"] and "not valid JSON" in history.unreadable["job-a"]
    new, kept = history.since(cursor)
    assert [c.job_id for c in new] == ["job-b"] and kept.seen == cursor.seen
    shutil.copy(tmp_path / "saved.json", log)
    assert [c.job_id for c in reader.read().since(cursor)[0]] == ["job-b"], "job a's seen commit stays seen"
