"""The commit history reader (:mod:`airflow_commit_provider.protocol.history`) on S3 (moto's server over HTTP):
a listing's ETags say which commit logs changed, so an unchanged log is not fetched again, and a rewritten one
(a job's next generation) is."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("algorithm", [1, "magic"])
def test_s3_watcher_through_a_connection_fires_every_commit(bucket, algorithm):
    """The trigger on S3 through the Airflow connection: two jobs committed between two polls fire twice, in
    order (v1, which copies, and magic, which completes uploads); a trigger re-created from ``serialize()``
    fires only what came after."""
    from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger

    from ..airflow.test_committed_output_trigger import Watcher, fired_between_polls

    root = f"s3://{bucket}/events"
    trigger = CommittedOutputTrigger(target=root, conn_id="commit_s3", poke_interval=0)
    w = Watcher(trigger)
    try:
        events = fired_between_polls(w, root, ("job-a",), ("job-c", "job-b"), algorithm=algorithm)
        kwargs = trigger.serialize()[1]
    finally:
        w.close()
    assert [e["job_id"] for e in events] == ["job-a", "job-c", "job-b"]
    commit(root, "job-d")
    w = Watcher(CommittedOutputTrigger(**kwargs))
    try:
        assert w.next()["job_id"] == "job-d"
    finally:
        w.close()
