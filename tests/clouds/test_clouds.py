"""The protocol on the object stores beside S3 (tests/clouds/conftest.py: Google Cloud Storage on fake-gcs-server,
Azure Blob Storage on Azurite, each over HTTP), every test on each.

Create-if-absent is each store's conditional upload; an answer lost after the upload took effect is resolved by the
object's bytes (the fault proxy of tests/s3 in front of the emulator). A worker process dies at every protocol
point on each store (os._exit), algorithms 1 and 2 between them, and the magic committer on Azure at every point;
the recovery reads every row back once. The lifecycle schedules of
tests/protocol/lifecycle.py run there too (``python -m tests.schedules --gcs N --azure N`` is the long run).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from airflow_commit_provider.protocol import InvalidOutputSpec, faults, make_committer, run_task_attempt, store_for
from airflow_commit_provider.protocol.stores import AzureStore, GCSStore

from ..protocol import lifecycle as lc
from ..protocol import scenario as sc
from ..protocol.test_crash_matrix import MIDWAY, expect_killed, spawn
from ..protocol.test_marker_reads import poll_while_jobs_commit
from ..s3.faultproxy import FaultProxy

COUNT = int(os.environ.get("COMMIT_CLOUD_SCHEDULES", "3"))
STEPS = int(os.environ.get("COMMIT_CLOUD_SCHEDULE_STEPS", "20"))
SEED = int(os.environ.get("COMMIT_SCHEDULES_SEED", "0"))
STORES = {"gcs": GCSStore, "azure": AzureStore}


def test_a_url_is_its_stores_and_its_create_if_absent_has_one_winner(cloud, bucket):
    store = store_for(cloud.root(bucket, "out"))
    assert type(store) is STORES[cloud.name] and store.url("x") == cloud.root(bucket, "out/x")
    assert store.create_exclusive("_r", b"one") is True
    assert store.create_exclusive("_r", b"two") is False
    assert store.read_bytes("_r") == b"one", "the loser's bytes never landed"


def test_an_answer_lost_after_the_create_took_effect_is_resolved_by_the_bytes(cloud, bucket):
    """The client resends an upload whose answer was lost; the resent one meets the object the first one created.
    The store reads it back: holding exactly this call's bytes, it is this call's (not "another writer was first");
    a different writer meeting it is refused."""
    with FaultProxy(cloud.url, lifetime=120) as proxy:
        rule = proxy.add("lose", limit=1, **cloud.create_rule)
        store = STORES[cloud.name](cloud.filesystem(cloud.through(proxy.url)), f"{bucket}/out")
        assert store.create_exclusive("_claim", b"attempt 1 at 12:00") is True
        assert rule.fired == 1, proxy.counts()
        assert store.create_exclusive("_claim", b"attempt 2 at 12:01") is False
    assert store_for(cloud.root(bucket, "out")).read_bytes("_claim") == b"attempt 1 at 12:00"


def test_a_committed_job_reads_back_once_and_leaves_nothing_behind(cloud, bucket):
    root = cloud.root(bucket, "events")
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
def test_a_table_there_is_refused_before_anything_is_made(cloud, bucket, fmt):
    from airflow_commit_provider.protocol.tables import table_target

    with pytest.raises(InvalidOutputSpec, match="not supported: tables are committed on a local path or on s3"):
        table_target(fmt, cloud.root(bucket, "t"), table_name="ns.t" if fmt == "iceberg" else None)
    assert sc.all_files(cloud.root(bucket, "t")) == []


POINTS = [p for p in faults.POINTS if not p.startswith("abort_job.")]
#: algorithm 1 keeps a committed task's files in its attempt directory (no move at task commit); algorithm 2's job
#: commit moves nothing (its task commits did)
CASES = [(p, a) for p in POINTS for a in (1, 2)
         if not (a == 1 and p == "commit_task.mid_move") and not (a == 2 and p == "commit_job.mid_move")]


def _cells() -> list[Any]:
    """Every point on each store, every (point, algorithm) pair on one of the two: both stores are
    :class:`~airflow_commit_provider.protocol.stores.objects.FsspecObjectStore`, so what a point does to the store
    is the same code under either algorithm; the whole matrix on each store is the gcs and azure columns of
    ``python -m tests.fault_matrix`` (half the cells here keeps the suite within its time)."""
    points = sorted({p for p, _ in CASES})
    cells = []
    for cloud in ("gcs", "azure"):
        for i, point in enumerate(points):
            algorithms = [a for p, a in CASES if p == point]
            algorithm = algorithms[(i + (cloud == "azure")) % len(algorithms)]
            cells.append(pytest.param(cloud, point, algorithm, id=f"{cloud}-{point}-{algorithm}"))
    # the magic committer (Azure only: staged blocks) at every point but a task commit's move, which it has not
    cells += [pytest.param("azure", point, "magic", id=f"azure-{point}-magic") for point in points
              if point != "commit_task.mid_move"]
    return cells


@pytest.mark.parametrize("cloud,point,algorithm", _cells(), indirect=["cloud"])
def test_crash_and_recover(cloud, bucket, tmp_path, point, algorithm):
    """A worker process dies (os._exit) at each point; recovery in this process; read back row by row."""
    cfg = {"root": cloud.root(bucket, "crash"), "work": str(tmp_path), "algorithm": algorithm, "mode": "overwrite"}
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


#: the committers of each store (the magic one stages blocks on Azure; on GCS it is refused)
SCHEDULED = [("gcs", 1), ("gcs", 2), ("azure", 1), ("azure", 2), ("azure", "magic")]


@pytest.mark.parametrize("cloud,algorithm", SCHEDULED, indirect=["cloud"], ids=[f"{c}-{a}" for c, a in SCHEDULED])
def test_random_schedules(cloud, bucket: str, algorithm: int | str) -> None:
    tally = lc.run_many(cloud.name, COUNT, first_seed=SEED, steps=STEPS, bucket=bucket, known=lc.known_open,
                        algorithm=algorithm)
    print(f"{cloud.name} {algorithm}: {tally.schedules} schedules, {tally.steps} steps")
    assert not tally.failures, lc.describe(tally.failures[0], bucket=bucket, shrink_it=False)
    if tally.known:
        pytest.xfail(f"{len(tally.known)} schedule(s) hit known open bug(s) {sorted({b for _, b in tally.known})}")


def test_an_audited_job_commits_after_its_checks_its_callable_and_its_approval_and_a_failed_one_shows_nothing(
        cloud, bucket):
    """Write, audit, publish on the store: the checks judge the statistics the task commits recorded, the data
    callable reads the staged objects through the store's file system (algorithm 1), the approval holds the commit;
    a failing check publishes nothing, and the clear with the audit passing commits every row once."""
    from datetime import timedelta

    from airflow_commit_provider.protocol.audit import Approval, Audit, checks
    from airflow_commit_provider.protocol.audit.run import AuditGate, decide_approval, request_approval, run_audit

    root = cloud.root(bucket, "audited")
    c = make_committer(root, "job", algorithm=1, mode="append", partition_by=["day"])
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    failing = Audit(checks=[checks.Rows(min=sc.ROWS + 1, per="task")])
    assert not run_audit(c.job, failing, sc.TASKS, 1).passed
    assert sc.visible_files(root) == [], "a failed audit publishes nothing"
    seen = {}

    def data(dataset):
        seen["rows"] = sorted((r["task"], r["row"], r["day"]) for r in dataset.to_table().to_pylist())
        return True

    audit = Audit(checks=[checks.Rows(min=sc.ROWS, per="task")], data=data,
                  approval=Approval(timeout=timedelta(hours=1)))
    assert run_audit(c.job, audit, sc.TASKS, 2).passed   # the next try of the audit task, the audit changed
    assert seen["rows"] == sorted((t, i, f"d{i % 2}") for t in range(sc.TASKS) for i in range(sc.ROWS))
    request_approval(c.job, None, None)
    decide_approval(c.job, "approved", "ann")
    assert sc.visible_files(root) == [], "nothing visible before the commit"
    manifest = c.commit_job(sc.TASKS, gate=AuditGate(audit.digest(), approval=True))
    sc.assert_exactly_once(sc.read_rows(root))
    assert manifest["audit"]["approval"]["state"] == "approved"


def test_deleting_named_objects_deletes_each_once_and_a_missing_one_stops_nothing(cloud, bucket):
    """A batch of deletes that names an object already gone (a retried cleanup) deletes the others all the same;
    on Azure one request per object, none to look first (adlfs's expansion sent a HEAD per blob)."""
    store = STORES[cloud.name](cloud.filesystem(), f"{bucket}/out")
    for name in ("a", "b", "c"):
        assert store.create_exclusive(f"d/{name}", name.encode())
    with FaultProxy(cloud.url, lifetime=120) as proxy:
        through = STORES[cloud.name](cloud.filesystem(cloud.through(proxy.url)), f"{bucket}/out")
        through.delete_files(["d/a", "d/gone", "d/b", "d/c"])
        sent = proxy.counts()["requests"]
    assert [p for p, _ in store_for(cloud.root(bucket, "out")).list_files("d")] == []
    if cloud.name == "azure":
        assert sent == 4, f"{sent} requests to delete 4 named blobs"


#: jobs the writer commits while the reader polls (each commit is a few dozen requests to the emulator)
MARKER_JOBS = 12


@pytest.mark.parametrize("mode,algorithm", [("overwrite", 1), ("dynamic", 2)])
def test_a_reader_polling_while_jobs_replace_the_marker_is_right_or_not_ready(cloud, bucket, mode, algorithm):
    """tests/protocol/test_marker_reads.py on the store: a writer process commits job after job into one target
    while a reader process polls its markers with ``verify_files=True``; no read is CorruptRecord, and every marker
    accepted lists exactly what its job left visible."""
    poll_while_jobs_commit(cloud.root(bucket, "polled"), mode, algorithm, MARKER_JOBS)
