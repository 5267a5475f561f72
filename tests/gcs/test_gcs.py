"""The protocol on Google Cloud Storage: fake-gcs-server over HTTP (tests/gcs/conftest.py).

Create-if-absent is an upload with ``ifGenerationMatch=0``; an answer lost after the upload took effect is
resolved by the object's bytes (the fault proxy of tests/s3 in front of the emulator). A worker process dies at
every protocol point (os._exit), algorithms 1 and 2; the recovery reads every row back once. The lifecycle
schedules of tests/protocol/lifecycle.py run on GCS too (``python -m tests.schedules --gcs N`` is the long run).
"""

from __future__ import annotations

import os

import pytest

from airflow_commit_provider.protocol import InvalidOutputSpec, faults, make_committer, run_task_attempt, store_for
from airflow_commit_provider.protocol.stores.gcs import GCSStore, gcs_filesystem

from ..protocol import lifecycle as lc
from ..protocol import scenario as sc
from ..protocol.test_crash_matrix import MIDWAY, expect_killed, spawn
from ..s3.faultproxy import FaultProxy

COUNT = int(os.environ.get("COMMIT_GCS_SCHEDULES", "3"))
STEPS = int(os.environ.get("COMMIT_GCS_SCHEDULE_STEPS", "20"))
SEED = int(os.environ.get("COMMIT_SCHEDULES_SEED", "0"))


def test_a_gs_url_is_the_gcs_store_and_its_create_if_absent_has_one_winner(gcs_bucket):
    store = store_for(f"gs://{gcs_bucket}/out")
    assert isinstance(store, GCSStore) and store.url("x") == f"gs://{gcs_bucket}/out/x"
    assert store.create_exclusive("_r", b"one") is True
    assert store.create_exclusive("_r", b"two") is False
    assert store.read_bytes("_r") == b"one", "the loser's bytes never landed"


def test_an_answer_lost_after_the_create_took_effect_is_resolved_by_the_bytes(gcs_server, gcs_bucket):
    """gcsfs resends an upload whose answer was lost; the resent one meets the object the first one created (412).
    The store reads it back: holding exactly this call's bytes, it is this call's (not "another writer was first");
    a different writer meeting it is refused."""
    with FaultProxy(gcs_server, lifetime=120) as proxy:
        rule = proxy.add("lose", method="POST", query="ifGenerationMatch", limit=1)
        store = GCSStore(gcs_filesystem({"endpoint_url": proxy.url, "token": "anon"}), f"{gcs_bucket}/out")
        assert store.create_exclusive("_claim", b"attempt 1 at 12:00") is True
        assert rule.fired == 1, proxy.counts()
        assert store.create_exclusive("_claim", b"attempt 2 at 12:01") is False
    assert store_for(f"gs://{gcs_bucket}/out").read_bytes("_claim") == b"attempt 1 at 12:00"


def test_a_committed_job_reads_back_once_and_leaves_nothing_behind(gcs_bucket):
    root = f"gs://{gcs_bucket}/events"
    c = make_committer(root, "job", mode="overwrite", partition_by=["day"])
    c.setup_job()
    for task in range(3):
        assert run_task_attempt(c, task, 1, lambda w, t=task: w.write(sc.task_table(t, 1))).status == "committed"
        assert sc.read_rows(root) == [], "I2: nothing visible before the job commit"
    manifest = c.commit_job(3)
    sc.assert_exactly_once(sc.read_rows(root), tasks=3, old=set())
    assert manifest["totals"]["files"] == len(sc.visible_files(root))
    assert not [f for f in sc.all_files(root) if f.startswith("_temporary")]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_on_gcs_is_refused_before_anything_is_made(gcs_bucket, fmt):
    from airflow_commit_provider.protocol.tables import table_target

    with pytest.raises(InvalidOutputSpec, match="not supported: tables are committed on a local path or on s3"):
        table_target(fmt, f"gs://{gcs_bucket}/t", table_name="ns.t" if fmt == "iceberg" else None)
    assert sc.all_files(f"gs://{gcs_bucket}/t") == []


GCS_POINTS = [p for p in faults.POINTS if not p.startswith("abort_job.")]
#: algorithm 1 keeps a committed task's files in its attempt directory (no move at task commit); algorithm 2's job
#: commit moves nothing (its task commits did)
GCS_CASES = [(p, a) for p in GCS_POINTS for a in (1, 2)
             if not (a == 1 and p == "commit_task.mid_move") and not (a == 2 and p == "commit_job.mid_move")]


@pytest.mark.parametrize("point,algorithm", GCS_CASES, ids=[f"{p}-{a}" for p, a in GCS_CASES])
def test_gcs_crash_and_recover(gcs_bucket, tmp_path, point, algorithm):
    """A worker process dies (os._exit) at each point; recovery in this process; read back row by row."""
    cfg = {"root": f"gs://{gcs_bucket}/crash", "work": str(tmp_path), "algorithm": algorithm, "mode": "overwrite"}
    sc.write_old_data(cfg["root"])
    sc.phase_prior(cfg)
    expect_killed(spawn("main", cfg, f"{point}=exit@{MIDWAY.get(point, 1)}"), "exit")
    rows = sc.read_rows(cfg["root"])
    sc.check_no_duplicates(rows)
    if algorithm == 1 and not any(k.startswith("_commits/") or "_commit_plan_" in k
                                  for k in sc.all_files(cfg["root"])):
        assert {r["task"] for r in rows} <= {sc.OLD_TASK}, "I2: nothing of the job visible before job commit"
    sc.phase_main(cfg, 21)
    sc.assert_exactly_once(sc.read_rows(cfg["root"]), old=set())
    assert not [k for k in sc.all_files(cfg["root"]) if k.startswith("_temporary")]


@pytest.mark.parametrize("algorithm", [1, 2])
def test_random_schedules_gcs(gcs_bucket: str, algorithm: int) -> None:
    tally = lc.run_many("gcs", COUNT, first_seed=SEED, steps=STEPS, bucket=gcs_bucket, known=lc.known_open,
                        algorithm=algorithm)
    print(f"gcs {algorithm}: {tally.schedules} schedules, {tally.steps} steps")
    assert not tally.failures, lc.describe(tally.failures[0], bucket=gcs_bucket, shrink_it=False)
    if tally.known:
        pytest.xfail(f"{len(tally.known)} schedule(s) hit known open bug(s) {sorted({b for _, b in tally.known})}")
