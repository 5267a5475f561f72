"""``airflow-commit`` on S3 (moto's server over HTTP) through the stages' Airflow connection, as a person runs it:
a magic job's pending uploads are shown and aborted, a committed job's marker verified, and no secret printed."""

from __future__ import annotations

import boto3
import pyarrow as pa

from airflow_commit_provider.protocol import make_committer, run_task_attempt

from ..cli.test_cli import as_json, cli

SECRET = "testing-secret-do-not-log"   # the connection's password (tests/s3/conftest.py)


def uploads(bucket: str) -> list[str]:
    return [u["Key"] for u in boto3.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def test_a_dead_magic_jobs_uploads_are_shown_and_purged_through_the_connection(bucket):
    root = f"s3://{bucket}/events"
    done = make_committer(root, "done", algorithm=1, mode="append")
    done.setup_job()
    run_task_attempt(done, 0, 1, lambda w: w.write(pa.table({"x": [1]})))
    done.commit_job(expected_tasks=1)
    dead = make_committer(root, "dead", algorithm="magic", mode="append")
    dead.setup_job()
    run_task_attempt(dead, 0, 1, lambda w: w.write(pa.table({"x": [2]})))   # committed, its run then died
    assert len(uploads(bucket)) == 1

    found = as_json("inspect", root, "--conn-id", "commit_s3")
    jobs = {j["job_id"]: j for j in found["jobs"]}
    assert jobs["dead"]["state"] == "running" and jobs["dead"]["recoverable_tasks"] == [0]
    assert len(jobs["dead"]["pending_uploads"]) == 1 and not jobs["dead"]["collectable"]
    assert as_json("verify", root, "--conn-id", "commit_s3")["ok"]

    shown = cli("abort", root, "--conn-id", "commit_s3", "--job", "dead", "--purge")
    assert "purged" in shown.stdout
    assert uploads(bucket) == [], "the job's pending upload is aborted"
    assert [j["job_id"] for j in as_json("inspect", root, "--conn-id", "commit_s3")["jobs"]] == ["done"]
    for args in (("inspect", root), ("verify", root), ("gc", root)):
        out = cli(*args, "--conn-id", "commit_s3")
        assert SECRET not in out.stdout + out.stderr


def test_an_undefined_connection_is_refused_by_name(bucket):
    done = cli("inspect", f"s3://{bucket}/x", "--conn-id", "no_such_conn", expect=2)
    assert "no_such_conn" in done.stderr and "not defined" in done.stderr
