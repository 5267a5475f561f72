"""The extra links, built from real operators: the commit-status page of the run and the target location."""

from __future__ import annotations

import pytest
from airflow.models.taskinstancekey import TaskInstanceKey

from airflow_commit_provider.links.commit_status import CommitStatusLink, CommitTargetLink
from airflow_commit_provider.operators.commit import CommitJobOperator

KEY = TaskInstanceKey(dag_id="daily events", task_id="stage.commit", run_id="manual__2024-01-01T00:00:00+00:00")


@pytest.mark.parametrize("target,expected", [
    ("s3://bucket/tables/events", "https://s3.console.aws.amazon.com/s3/buckets/bucket?prefix=tables/events/"),
    ("s3a://bucket/tables/events/", "https://s3.console.aws.amazon.com/s3/buckets/bucket?prefix=tables/events/"),
    ("s3://bucket/day=2024-01-01 x", "https://s3.console.aws.amazon.com/s3/buckets/bucket?prefix=day%3D2024-01-01%20x/"),
    ("/data/events", "file:///data/events"),
    ("memory://events", "memory://events"),
])
def test_target_link_points_at_the_data(target, expected):
    op = CommitJobOperator(task_id="commit", target=target, expected_tasks=1)
    assert CommitTargetLink().get_link(op, ti_key=KEY) == expected


def test_status_link_quotes_dag_and_run_ids():
    op = CommitJobOperator(task_id="commit", target="/data/events", expected_tasks=1)
    assert CommitStatusLink().get_link(op, ti_key=KEY) == \
        "/commit-status/dags/daily%20events/runs/manual__2024-01-01T00%3A00%3A00%2B00%3A00"
