"""The commit history reader (:mod:`airflow_commit_provider.protocol.history`) on S3 (moto's server over HTTP):
a listing's ETags say which commit logs changed, so an unchanged log is not fetched again, and a rewritten one
(a job's next generation) is."""

from __future__ import annotations

from airflow_commit_provider.protocol import store_for
from airflow_commit_provider.protocol.history import Cursor, HistoryReader

from ..protocol.test_history import commit


def test_s3_history_reads_only_changed_logs(bucket):
    root = f"s3://{bucket}/events"
    commit(root, "job-a")
    commit(root, "job-b")
    store = store_for(root)
    reader = HistoryReader(store)
    first = reader.read()
    assert sorted(first.jobs) == ["job-a", "job-b"] and not first.unreadable
    cursor = first.baseline()
    assert [c.job_id for c in first.since(cursor)[0]] == ["job-b"], "a new reader starts at the newest commit"

    before = store.request_counts()
    unchanged = reader.read()
    after = store.request_counts()
    assert unchanged.jobs == first.jobs
    assert after.get("GetObject", 0) == before.get("GetObject", 0), "unchanged logs are not fetched again"

    commit(root, "job-a")   # job a's next generation rewrites its log
    new, _ = reader.read().since(Cursor().after(first.jobs["job-a"][0]).after(first.jobs["job-b"][0]))
    assert [(c.job_id, c.summary["generation"]) for c in new] == [("job-a", 1)]
