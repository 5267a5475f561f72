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


def test_every_line_inspect_prints_works_as_printed_and_a_store_out_of_reach_is_said(bucket):
    """``inspect`` printed ``airflow-commit gc s3://... --apply`` without the ``--conn-id`` it was run with: as
    printed, the line reached no store (seen in a deployment on moto). It prints the connection; followed
    literally, it collects the failed job. Without the connection, a store out of reach is a refusal naming the
    error and ``--conn-id``, not a traceback with the exit code of a false marker."""
    import os
    import shlex
    import subprocess
    import sys

    from ..support import free_port

    root = f"s3://{bucket}/events"
    failed = make_committer(root, "failed", algorithm="magic", mode="append")
    failed.setup_job()
    run_task_attempt(failed, 0, 1, lambda w: w.write(pa.table({"x": [1]})))
    failed.abort_job(keep_committed=True)   # the failed run's teardown: its committed upload kept
    text = cli("inspect", root, "--conn-id", "commit_s3").stdout
    line = next(part for part in text.split("`") if part.startswith("airflow-commit gc"))
    assert line == f"airflow-commit gc {root} --apply --conn-id commit_s3", text
    assert "removed: job failed (failed)" in cli(*shlex.split(line)[1:]).stdout
    assert uploads(bucket) == [] and as_json("inspect", root, "--conn-id", "commit_s3")["jobs"] == []

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env["AWS_ENDPOINT_URL_S3"] = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    done = subprocess.run([sys.executable, "-m", "airflow_commit_provider.cli", "inspect", root],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2, done
    assert f"cannot read {root}: EndpointConnectionError" in done.stderr and "--conn-id <conn_id>" in done.stderr
    assert "Traceback" not in done.stderr
