"""Stages on the object stores beside S3 under ``dag.test()``, each store reached only through its Airflow
connection: the environment the other tests use to find the emulator is taken away for the runs. A write try fails
and its retry redoes only that shard (mapped tasks, and shards of one task instance); a ``job_key``'s second run
replaces the first's rows; the rows read back once; the sensor, its trigger and the Commit status view read the
commit through the same connection."""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
from collections import Counter
from datetime import datetime, timezone

import pytest

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import DAGS_FOLDER, TEST_WORK
from ..protocol import scenario as sc
from ..s3.test_composition_pairs import _deferred, _poke, _view

SHARDS, ROWS = 3, 10


@pytest.fixture
def dags(cloud, bucket, airflow_db, monkeypatch):
    monkeypatch.setenv("COMMIT_TEST_CLOUD_ROOT", f"{cloud.scheme}://{bucket}")
    monkeypatch.setenv("COMMIT_TEST_CLOUD_CONN", cloud.conn_id)
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.insert(0, str(DAGS_FOLDER))
    for path in list(TEST_WORK.iterdir()):
        if path.name.startswith(("calls.log", "fail-")):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    sys.modules.pop("cloud_test_dags", None)
    return importlib.import_module("cloud_test_dags")


def calls(dag_id: str) -> Counter:
    lines = (TEST_WORK / "calls.log").read_text().splitlines() if (TEST_WORK / "calls.log").exists() else []
    return Counter((int(shard), int(tr)) for d, shard, tr in map(str.split, lines) if d == dag_id)


@contextlib.contextmanager
def only_the_connection(cloud, monkeypatch):
    """Without the emulator's address in the environment: what reaches the store is the connection."""
    with monkeypatch.context() as m:
        for name in cloud.env:
            m.delenv(name)
        yield


STAGES = [(c, s, a) for c in ("gcs", "azure") for s, a in (("v1", "1"), ("v2", "2"), ("shards", "1"))]
STAGES.append(("azure", "magic", "magic"))


@pytest.mark.parametrize("cloud,stage,algorithm", STAGES, indirect=["cloud"], ids=["-".join(c) for c in STAGES])
def test_a_stage_through_its_connection_commits_each_row_once(cloud, bucket, dags, monkeypatch, stage, algorithm):
    dag = getattr(dags, stage)
    (TEST_WORK / f"fail-{dag.dag_id}-1-1").touch()
    root = cloud.root(bucket, dag.dag_id)
    with only_the_connection(cloud, monkeypatch):
        dr = dag.test()
        poked, deferred = _poke(root, cloud.conn_id, verify_files=True), _deferred(root, cloud.conn_id)
        state, tasks = _view(dag.dag_id, dr.run_id)
    assert dr.state == "success"
    assert calls(dag.dag_id) == {(0, 1): 1, (1, 1): 1, (1, 2): 1, (2, 1): 1}, "the failed try's shard ran again"
    rows = sc.read_rows(root)
    assert Counter((r["shard"], r["row"]) for r in rows) == {(s, r): 1 for s in range(SHARDS) for r in range(ROWS)}
    assert {r["shard"]: r["try"] for r in rows} == {0: 1, 1: 2, 2: 1}, "shard 1's rows are its retry's"
    manifest = read_success_marker(root, fs=cloud.filesystem(), verify_files=True)
    assert str(manifest["algorithm"]) == algorithm and manifest["totals"]["rows"] == SHARDS * ROWS
    assert manifest["output"] == root
    assert not [f for f in sc.all_files(root) if f.startswith("_temporary")]
    assert poked["job_uuid"] == deferred["job_uuid"] == manifest["job_uuid"], "the sensor and its trigger"
    assert state == "committed" and set(tasks.values()) == {"committed"} and len(tasks) == SHARDS


def test_a_keyed_stage_run_twice_for_one_key_keeps_its_rows_once(cloud, bucket, dags, monkeypatch):
    root = cloud.root(bucket, dags.keyed.dag_id)
    for day in (1, 2):
        when = datetime(2024, 6, day, tzinfo=timezone.utc)
        with only_the_connection(cloud, monkeypatch):
            assert dags.keyed.test(logical_date=when, run_after=when, run_conf={"key": "k"}).state == "success"
        rows = sc.read_rows(root)
        assert Counter((r["shard"], r["row"]) for r in rows) == {(s, r): 1 for s in range(SHARDS)
                                                                 for r in range(ROWS)}
    assert calls(dags.keyed.dag_id) == {(s, 1): 2 for s in range(SHARDS)}, "each run called every shard once"
