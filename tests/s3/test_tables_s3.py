"""Delta and Iceberg tables on S3 (moto's server over HTTP): the job's files go through the committer's S3 store,
the table's log or metadata through the format's own client, given the endpoint and credentials explicitly (as
the stage's hook derives them from its Airflow connection); killed after the table transaction and resumed, or
two processes committing one generation at once, the rows are there once.

Delta on S3 relies on conditional puts: delta-rs writes each log entry with ``If-None-Match: *``, which moto
honours; the race test below is what fails if a second writer could replace a log entry.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from airflow_commit_provider.protocol import read_success_marker
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE

from ..protocol.tables_worker import run_job
from ..protocol.test_tables import expected, referenced_now, root, rows, run, spawn, table_id, transactions


@pytest.fixture(params=["delta", "iceberg"])
def base(request, bucket, moto_server, tmp_path) -> dict:
    """A Delta table at ``s3://<bucket>/events``, or an Iceberg table whose warehouse is ``s3://<bucket>/wh``
    (a SQL catalog on SQLite, pyiceberg's S3 file IO pointed at moto)."""
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[request.param])
    creds = {"key": os.environ["AWS_ACCESS_KEY_ID"], "secret": os.environ["AWS_SECRET_ACCESS_KEY"]}
    if request.param == "delta":
        where = {"location": f"s3://{bucket}/events", "storage_options": {
            "AWS_ENDPOINT_URL": moto_server, "AWS_ACCESS_KEY_ID": creds["key"],
            "AWS_SECRET_ACCESS_KEY": creds["secret"], "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
            "conditional_put": "etag"}}
    else:
        where = {"location": f"s3://{bucket}/wh", "table_name": "ns.events", "catalog": {
            "type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"s3://{bucket}/wh",
            "s3.endpoint": moto_server, "s3.access-key-id": creds["key"],
            "s3.secret-access-key": creds["secret"], "s3.region": "us-east-1"}}
    return {"format": request.param, **where, "job_id": "events-1", "mode": "append", "partition_by": ["day"],
            "tasks": 3, "rows": 4, "gen": 0}


@pytest.mark.parametrize("point", ["table_commit.before", "table_commit.after", "commit_job.after_success"])
def test_job_commit_on_s3_killed_then_resumed_commits_once(base, point):
    run_job(base)                                            # an earlier job's rows, which must stay
    cfg = {**base, "job_id": "events-2", "gen": 1}
    proc = run(cfg, f"{point}=kill")
    assert proc.returncode == -9, proc.stderr
    assert rows(base) in (expected(), sorted(expected() + expected(gen=1))), "a partial job is visible"
    again = run({**cfg, "phase": "commit"})
    assert again.returncode == 0, again.stderr
    assert rows(base) == sorted(expected() + expected(gen=1))
    assert transactions(base) == 2, "the resumed commit made a second transaction"
    assert table_id(read_success_marker(root(base))["table"]) == table_id(json.loads(again.stdout)["table"])
    assert run({**cfg, "phase": "commit"}).returncode == 0
    assert transactions(base) == 2


def test_two_processes_committing_one_generation_on_s3_add_it_once(base):
    """Both built on one snapshot: the second to send its log entry (Delta) or swap (Iceberg) is refused and
    finds the generation landed."""
    first = spawn(base, "table_commit.before=stop")
    os.waitpid(first.pid, os.WUNTRACED)
    second = run({**base, "phase": "commit"})
    assert second.returncode == 0, second.stderr
    os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    # refused by the format, it then finds the job record gone (the second run finished the commit) and returns
    # that commit's manifest, changing nothing more
    assert first.returncode == 0, err
    assert json.loads(out)["table"] == json.loads(second.stdout)["table"]
    assert rows(base) == expected()
    assert transactions(base) == 1


def test_nothing_is_visible_on_s3_before_the_transaction(base):
    run_job(base)
    proc = run({**base, "job_id": "events-2", "gen": 1}, "table_commit.before=exit")
    assert proc.returncode == FAULT_EXIT_CODE, proc.stderr
    assert rows(base) == expected()
    assert transactions(base) == 1


def test_the_marker_of_an_overwrite_on_s3_lists_what_the_table_version_reads(base):
    """The overwritten files stay under the data root for the table's first version; the marker lists the files
    the current version references (its ``retained`` none of the replaced ones), and verify_files accepts it."""
    run_job(base)
    run_job({**base, "job_id": "events-2", "mode": "overwrite", "gen": 1})
    marker = read_success_marker(root(base), verify_files=True)
    assert {f["path"] for f in marker["files"]} | {f["path"] for f in marker["retained"]} == referenced_now(base)
    assert marker["retained"] == [] and marker["job_id"] == "events-2"
    assert rows(base) == expected(gen=1)
