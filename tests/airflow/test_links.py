"""The extra links, built from real operators: the run's Commit status tab inside Airflow and the target location.

Airflow 3.3's UI renders only http(s), mailto and same-origin links (a ``file://`` link is silently dropped), and
resolves relative links against its ``<base href>`` (the api-server's base path): so links are relative, and every
target without a web console of its own (local disk, MinIO / moto endpoints) links the Commit status tab's target
view (``?view=target``), distinct from the "Commit status" link."""

from __future__ import annotations

import pytest
from airflow.models.taskinstancekey import TaskInstanceKey

from airflow_commit_provider.links.commit_status import CommitStatusLink, CommitTargetLink
from airflow_commit_provider.operators import CommitJobOperator

KEY = TaskInstanceKey(dag_id="daily events", task_id="stage.commit", run_id="manual__2024-01-01T00:00:00+00:00")
TAB = "dags/daily%20events/runs/manual__2024-01-01T00%3A00%3A00%2B00%3A00/plugin/commit-status"
#: the same tab, opened on its target view: distinct from "Commit status" (both opened the same page before)
TARGET = f"{TAB}?view=target"


@pytest.fixture(autouse=True)
def _connections(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_MINIO", '{"conn_type": "aws", "extra": {"endpoint_url": "http://127.0.0.1:9000"}}')
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LAKE", '{"conn_type": "aws", "extra": {"region_name": "eu-west-1"}}')


@pytest.mark.parametrize("target,conn_id,expected", [
    ("s3://bucket/tables/events", None, "https://s3.console.aws.amazon.com/s3/buckets/bucket?prefix=tables/events/"),
    ("s3a://bucket/tables/events/", "aws_lake",
     "https://s3.console.aws.amazon.com/s3/buckets/bucket?prefix=tables/events/"),
    ("s3://bucket/day=2024-01-01 x", None,
     "https://s3.console.aws.amazon.com/s3/buckets/bucket?prefix=day%3D2024-01-01%20x/"),
    # a custom endpoint (MinIO, moto): the AWS console would show another account's bucket, or nothing
    ("s3://bucket/tables/events", "minio", TARGET),
    ("s3://minio@bucket/tables/events", None, TARGET),
    # the UI drops file:// links: local targets link the tab's target view (the target and its files)
    ("/data/events", None, TARGET),
    ("file:///data/events", None, TARGET),
])
def test_target_link_is_one_the_ui_renders(target, conn_id, expected):
    op = CommitJobOperator(task_id="commit", target=target, conn_id=conn_id, expected_tasks=1)
    link = CommitTargetLink().get_link(op, ti_key=KEY)
    assert link == expected
    assert link.startswith("https://") or not link.startswith(("/", "file:", "memory:")), link


def test_target_link_with_an_endpoint_in_the_environment(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio.internal:9000")
    op = CommitJobOperator(task_id="commit", target="s3://bucket/x", expected_tasks=1)
    assert CommitTargetLink().get_link(op, ti_key=KEY) == TARGET


def test_status_link_opens_the_tab_inside_airflow_relative_to_its_base_url():
    op = CommitJobOperator(task_id="commit", target="/data/events", expected_tasks=1)
    link = CommitStatusLink().get_link(op, ti_key=KEY)
    assert link == TAB and not link.startswith("/")
    assert CommitTargetLink().get_link(op, ti_key=KEY) != link
