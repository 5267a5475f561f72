"""What the Commit status view's version check costs on S3 (moto's server over HTTP): per stage and poll, a
fixed handful of requests whatever the stage's size (up to 1,000 task records and attempt traces a listing
page), and a new version at every task commit (the bar moves shard by shard; issue 32)."""

from __future__ import annotations

import pytest

from airflow_commit_provider.plugins.app import storage_head
from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt

from ..protocol import scenario as sc


@pytest.mark.parametrize("tasks", [3, 40])
def test_the_version_check_is_five_requests_and_moves_with_every_task_commit(bucket, s3fs_fs, tasks):
    c = FileOutputCommitter(f"s3://{bucket}/out", "job", mode="append", partition_by=["day"])
    c.setup_job()
    for t in range(tasks - 1):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    before = storage_head(c)
    counts = c.store.request_counts()
    storage_head(c)
    after = c.store.request_counts()
    spent = {op: n - counts.get(op, 0) for op, n in after.items() if n != counts.get(op, 0)}
    assert spent == {"GetObject": 1, "ListObjectsV2": 4}, spent
    run_task_attempt(c, tasks - 1, 1, lambda w: w.write(sc.task_table(tasks - 1, 1)))
    assert storage_head(c) != before, "a task commit must change the version"
