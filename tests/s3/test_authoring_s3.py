"""Smoke tests of the ways to author a stage, on S3 (moto's server over HTTP, reached through the Airflow
connection ``commit_s3``), each one ``dag.test()``: ``@task.commit_stage`` with algorithm 2 and with the magic
committer, hand-wired ``Commit*Operator``s with the magic committer (each with one failing write try that its
retry redoes), and a ``job_key`` whose second run replaces the first. Rows read back from S3 and counted, and the
user callable's calls counted; no multipart upload left pending.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections import Counter
from datetime import datetime, timezone

import pytest

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import DAGS_FOLDER, TEST_WORK
from ..protocol import scenario as sc
from .test_s3 import pending_uploads

SHARDS, ROWS = 3, 10
NO_CACHE = {"use_listings_cache": False, "skip_instance_cache": True}


@pytest.fixture
def dags(bucket, airflow_db, monkeypatch):
    """The DAG file, imported with its targets in this test's bucket."""
    monkeypatch.setenv("COMMIT_TEST_S3_BUCKET", bucket)
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.insert(0, str(DAGS_FOLDER))
    for path in list(TEST_WORK.iterdir()):
        if path.name.startswith(("calls.log", "fail-")):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    sys.modules.pop("s3_authoring_test_dags", None)
    return importlib.import_module("s3_authoring_test_dags")


def calls(dag_id: str) -> Counter:
    """(shard, try) -> calls of the user callable."""
    path = TEST_WORK / "calls.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((int(shard), int(tr)) for d, shard, tr in map(str.split, lines) if d == dag_id)


def committed(bucket: str, dag_id: str) -> tuple[list[dict], dict]:
    """The rows under the stage's target, checked once each, and its marker (its files verified)."""
    root = f"s3://{bucket}/{dag_id}"
    rows = sc.read_rows(root)
    assert Counter((r["shard"], r["row"]) for r in rows) == {(s, r): 1 for s in range(SHARDS) for r in range(ROWS)}
    return rows, read_success_marker(root, verify_files=True, storage_options=NO_CACHE)


@pytest.mark.parametrize("dag_id,committer", [("s3_deco_v2", "FileOutputCommitter"),
                                               ("s3_deco_magic", "MagicCommitter"),
                                               ("s3_ops_magic", "MagicCommitter")])
def test_a_stage_on_s3_with_a_failing_try_commits_each_row_once(dags, bucket, dag_id, committer):
    (TEST_WORK / f"fail-{dag_id}-1-1").touch()
    dr = getattr(dags, dag_id).test()
    assert dr.state == "success"
    assert calls(dag_id) == {(0, 1): 1, (1, 1): 1, (1, 2): 1, (2, 1): 1}, "the failed try's shard ran again"
    rows, manifest = committed(bucket, dag_id)
    assert {r["shard"]: r["try"] for r in rows} == {0: 1, 1: 2, 2: 1}, "shard 1's rows are its retry's"
    assert manifest["committer"] == committer and manifest["totals"]["rows"] == SHARDS * ROWS
    assert str(manifest["algorithm"]) == {"s3_deco_v2": "2"}.get(dag_id, "magic")
    assert pending_uploads(bucket) == [], "the failed try's uploads were aborted"


def test_a_keyed_stage_on_s3_run_twice_for_one_key_keeps_its_rows_once(dags, bucket):
    for day in (1, 2):
        when = datetime(2024, 6, day, tzinfo=timezone.utc)
        dr = dags.s3_keyed.test(logical_date=when, run_after=when, run_conf={"key": "k"})
        assert dr.state == "success"
        rows, manifest = committed(bucket, "s3_keyed")
        assert manifest["generation"] == day - 1 and manifest["labels"]["job_key"] == "k"
    assert manifest["replaced_generation"] is not None
    assert calls("s3_keyed") == {(s, 1): 2 for s in range(SHARDS)}, "each run called every shard once"
