"""The committers on S3 (moto's server over HTTP): v1, v2 and the zero-copy magic committer.

Crash injection and races run in real worker processes, as on the local disk; the magic committer is checked for
what it promises: nothing visible before job commit (HEAD 404, not listed), zero bytes copied, one request per
file at job commit plus a constant, uploads reused on recovery, and an abort that leaves other jobs' uploads alone.
"""

from __future__ import annotations

import json
import os

import boto3
import pytest

from airflow_commit_provider.protocol import (
    CommitDenied,
    InvalidOutputSpec,
    StorageCapabilityError,
    TaskAttemptWriter,
    faults,
    make_committer,
    read_success_marker,
    run_task_attempt,
)

from ..protocol import scenario as sc
from ..support import race_two_processes
from ..protocol.test_crash_matrix import MIDWAY, expect_killed, spawn

ALGORITHMS = [1, 2, "magic"]


def pending_uploads(bucket: str) -> list[str]:
    resp = boto3.client("s3").list_multipart_uploads(Bucket=bucket)
    return [u["Key"] for u in resp.get("Uploads", [])]


def produce(task, attempt):
    return lambda w: w.write(sc.task_table(task, attempt))


def make(root, algorithm, **kw):
    kw.setdefault("mode", "append")
    kw.setdefault("partition_by", ["day"])
    return make_committer(root, kw.pop("job", "job"), algorithm=algorithm, **kw)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_overwrite_on_s3_reads_back(bucket, algorithm):
    root = f"s3://{bucket}/table"
    sc.write_old_data(root)
    c = make(root, algorithm, mode="overwrite")
    c.setup_job()
    for t in range(sc.TASKS):
        assert run_task_attempt(c, t, 1, produce(t, 1)).status == "committed"
    manifest = c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root), old=set())
    assert read_success_marker(root, verify_files=True)["job_uuid"] == manifest["job_uuid"]
    assert manifest["algorithm"] == algorithm
    assert not [k for k in sc.all_files(root) if k.startswith("_temporary")]
    assert pending_uploads(bucket) == []


def test_magic_nothing_visible_before_job_commit_and_nothing_copied(bucket, s3fs_fs):
    root = f"s3://{bucket}/events"
    c = make(root, "magic")
    c.setup_job()
    outcomes = [run_task_attempt(c, t, 1, produce(t, 1)) for t in range(sc.TASKS)]
    keys = [f["path"] for o in outcomes for f in o.record["files"]]
    assert len(keys) == 8
    client = boto3.client("s3")
    for key in keys:
        with pytest.raises(client.exceptions.ClientError, match="404"):
            client.head_object(Bucket=bucket, Key=f"events/{key}")
    assert sc.visible_files(root) == [], "I2: nothing listed before job commit"
    assert len(pending_uploads(bucket)) == 8
    manifest = c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
    diag = manifest["diagnostics"]
    assert diag["bytes_copied"] == 0
    publish = diag["requests"]["moves"]
    assert publish.get("CompleteMultipartUpload") == 8 and "CopyObject" not in publish
    assert sum(publish.values()) <= 8 + 4, f"one request per file plus a constant: {publish}"
    assert pending_uploads(bucket) == []


def test_magic_large_files_are_multipart_and_bounded(bucket):
    root = f"s3://{bucket}/blobs"
    c = make(root, "magic", partition_by=(), part_size=5 * 2**20)
    c.setup_job()
    blob = os.urandom(12 * 2**20 + 123)

    def write(w):
        with w.open_file("blob.bin") as fh:
            for i in range(0, len(blob), 2**20):  # 1 MiB writes: the buffer never holds more than a part
                fh.write(blob[i:i + 2**20])
                assert fh._fill < 5 * 2**20 and len(fh._buf) == 5 * 2**20

    outcome = run_task_attempt(c, 0, 1, write)
    assert len(outcome.record["files"][0]["parts"]) == 3
    c.commit_job(1)
    assert boto3.client("s3").get_object(Bucket=bucket, Key="blobs/blob.bin")["Body"].read() == blob


def test_magic_recovery_reuses_uploads(bucket):
    root = f"s3://{bucket}/rec"
    c = make(root, "magic")
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    run_task_attempt(c, 1, 1, produce(1, 1))
    c.setup_job()  # application attempt 1
    before = c.store.request_counts()
    outcomes = [run_task_attempt(c, t, 2, lambda w: pytest.fail("recovered task ran")) for t in (0, 1)]
    after = c.store.request_counts()
    assert [o.status for o in outcomes] == ["recovered", "recovered"]
    for op in ("CreateMultipartUpload", "UploadPart", "CopyObject", "PutObject"):
        if op == "PutObject":
            assert after.get(op, 0) - before.get(op, 0) == 2, "one record per recovered task, nothing else"
        else:
            assert after.get(op, 0) == before.get(op, 0), f"{op} during recovery"
    for t in (2, 3):
        run_task_attempt(c, t, 2, produce(t, 2))
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))


def test_magic_abort_is_job_scoped(bucket):
    root = f"s3://{bucket}/shared"
    a, b = make(root, "magic", job="job-a"), make(root, "magic", job="job-b")
    a.setup_job()
    b.setup_job()
    for t in range(2):
        run_task_attempt(a, t, 1, produce(t, 1))
        run_task_attempt(b, t, 1, produce(t, 1))
    b_uploads = {k for k in pending_uploads(bucket) if b.job_record().job_uuid in k}
    assert len(b_uploads) == 4 and len(pending_uploads(bucket)) == 8
    result = a.abort_job()
    assert result["aborted"]
    assert set(pending_uploads(bucket)) == b_uploads, "only job a's uploads were aborted"
    b.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)
    assert pending_uploads(bucket) == []


def test_denied_magic_attempt_aborts_its_uploads(bucket):
    root = f"s3://{bucket}/deny"
    c = make(root, "magic")
    c.setup_job()
    sc.commit_one_deny_the_next(c)   # try 2 starts after try 1 committed: it runs, and is denied at its commit
    assert len(pending_uploads(bucket)) == 2, "only the winner's uploads stay pending"
    c.commit_job(1)
    assert {r["attempt"] for r in sc.read_rows(root)} == {1}


def test_a_magic_zombie_whose_upload_the_job_commit_aborted_leaves_nothing_behind(bucket):
    """A try set up before its job committed has an upload open; the job commit aborts it (an upload of the job
    that no record lists), so the try's next write fails when it wakes. Its abort removes what it wrote and the
    directories it re-created, records nothing under the committed job, and leaves no upload pending."""
    root = f"s3://{bucket}/late"
    c = make(root, "magic")
    c.setup_job()
    zombie = make(root, "magic")

    with pytest.raises(OSError):   # its upload is gone when it closes the file
        run_task_attempt(zombie, 0, 1, sc.wakes_after_the_commit(c))
    assert not [f for f in sc.all_files(root) if f.startswith("_temporary")], sc.all_files(root)
    assert pending_uploads(bucket) == []
    assert {r["attempt"] for r in sc.read_rows(root)} == {2}


def test_magic_needs_s3(tmp_path):
    with pytest.raises(StorageCapabilityError, match="magic committer needs a store that stages files"):
        make_committer(str(tmp_path), "job", algorithm="magic")


S3_POINTS = [p for p in faults.POINTS if not p.startswith("abort_job.")]
S3_CASES = [(p, a) for p in S3_POINTS for a in (1, "magic") if not (a == "magic" and p == "commit_task.mid_move")
            and not (a == 1 and p == "commit_task.mid_move")]


@pytest.mark.parametrize("point,algorithm", S3_CASES, ids=[f"{p}-{a}" for p, a in S3_CASES])
def test_s3_crash_and_recover(bucket, tmp_path, point, algorithm):
    """A worker process dies (os._exit) at each point; recovery in this process; read back row by row."""
    cfg = {"root": f"s3://{bucket}/crash", "work": str(tmp_path), "algorithm": algorithm, "mode": "overwrite"}
    if algorithm == "magic":
        cfg["part_size"] = 5 * 2**20
    sc.write_old_data(cfg["root"])
    sc.phase_prior(cfg)
    expect_killed(spawn("main", cfg, f"{point}=exit@{MIDWAY.get(point, 1)}"), "exit")
    rows = sc.read_rows(cfg["root"])
    sc.check_no_duplicates(rows)
    if not any(k.startswith("_commits/") or "_commit_plan_" in k for k in sc.all_files(cfg["root"])):
        assert {r["task"] for r in rows} <= {sc.OLD_TASK}, "I2: nothing of the job visible before job commit"
    sc.phase_main(cfg, 21)
    sc.assert_exactly_once(sc.read_rows(cfg["root"]), old=set())
    assert pending_uploads(bucket) == [], "I7: no pending upload of the job left behind"
    assert not [k for k in sc.all_files(cfg["root"]) if k.startswith("_temporary")]


RACES = 10


def _race_all(root, algorithm, attempt, barrier, results) -> None:
    for i in range(RACES):
        c = make(f"{root}/r{i}", algorithm, part_size=5 * 2**20) if algorithm == "magic" else \
            make(f"{root}/r{i}", algorithm)

        def write() -> tuple:
            ta = c.setup_task(0, attempt)
            with TaskAttemptWriter(c, ta, partition_by=c.partition_by) as w:
                w.write(sc.task_table(0, attempt))
            return ta, w

        # Airflow's race (see tests/protocol/test_races.py): try 1, a zombie, commits while try 2 starts
        if attempt == 1:
            ta, w = write()
            barrier.wait(timeout=60)
        else:
            barrier.wait(timeout=60)
            ta, w = write()
        try:
            c.commit_task(ta, w.rows, sizes=w.sizes)
            results.put((i, attempt, "won"))
        except CommitDenied as denied:
            results.put((i, attempt, f"denied:{denied.winner['attempt'] if denied.winner else 'fenced'}"))


@pytest.mark.parametrize("algorithm", [1, "magic"])
def test_s3_two_processes_race_for_one_task(bucket, algorithm):
    root = f"s3://{bucket}/race"
    for i in range(RACES):
        make(f"{root}/r{i}", algorithm).setup_job()
    outcomes = race_two_processes(_race_all, root, algorithm, results=2 * RACES)
    for i in range(RACES):
        pair = sorted(o[1:] for o in outcomes if o[0] == i)
        winners = [a for a, what in pair if what == "won"]
        assert len(winners) == 1, pair
        # the loser was told the winner, or (try 1 only) was recorded failed by try 2's setup before its commit
        assert [what for a, what in pair if a != winners[0]] in ([f"denied:{winners[0]}"], ["denied:fenced"])
        assert winners[0] == 2 or "denied:fenced" not in [what for _, what in pair]
        make(f"{root}/r{i}", algorithm).commit_job(1)
        assert {r["attempt"] for r in sc.read_rows(f"{root}/r{i}")} == {winners[0]}
    assert pending_uploads(bucket) == []


@pytest.mark.parametrize("algorithm", [1, "magic"])
def test_s3_error_mode_claim(bucket, algorithm):
    """Mode ``error`` on S3: job A's commit dies after its plan, job B (set up while the target was empty) is
    refused naming A, A's resume commits its rows only; a third job is refused at setup (see
    tests/protocol/test_error_claim.py). The claim is one exclusive PUT (If-None-Match)."""
    root = f"s3://{bucket}/claim"
    kw = {"mode": "error", "part_size": 5 * 2**20} if algorithm == "magic" else {"mode": "error"}
    a, b = make(root, algorithm, job="job-a", **kw), make(root, algorithm, job="job-b", **kw)
    for c, attempt in ((a, 1), (b, 2)):
        c.setup_job()
        run_task_attempt(c, 0, attempt, produce(0, attempt))
    sc.crash_after_plan(a)
    with pytest.raises(InvalidOutputSpec, match="belongs to job job-a"):
        b.commit_job(1)
    assert sc.visible_files(root) == []
    a.commit_job(1)
    assert sorted((r["task"], r["row"], r["attempt"]) for r in sc.read_rows(root)) == \
        [(0, i, 1) for i in range(sc.ROWS)]
    assert json.loads(a.store.read_bytes("_commits/_error_claim.json"))["job_id"] == "job-a"
    with pytest.raises(InvalidOutputSpec, match="job-a"):
        make(root, algorithm, job="job-c", **kw).setup_job()
    assert b.abort_job()["aborted"] is True
    assert read_success_marker(root, verify_files=True)["job_id"] == "job-a"
    assert pending_uploads(bucket) == []


def spark_like_insert_overwrite(fs, path: str, dies: bool) -> None:
    """Spark's INSERT OVERWRITE on S3: check the table path, delete it, write; the first attempt dies after
    the delete."""
    fs.invalidate_cache()
    if not fs.exists(path):
        raise FileNotFoundError(f"Path does not exist: s3://{path}")
    fs.rm(path, recursive=True)
    if dies:
        raise RuntimeError("application attempt died after deleting the table path")
    fs.pipe_file(f"{path}/part-00000.parquet", b"new data")


@pytest.mark.parametrize("pre_task", [False, True])
def test_spark_insert_overwrite_retry_needs_the_pre_task(bucket, s3fs_fs, airflow_db, pre_task):
    from airflow_commit_provider.operators.ensure_target import EnsureTargetOperator

    path = f"{bucket}/warehouse/sales"
    ensure = EnsureTargetOperator(task_id="ensure", target=f"s3://{path}", conn_id="commit_s3")
    s3fs_fs.pipe_file(f"{path}/part-00000.parquet", b"old data")
    ensure.execute({})
    with pytest.raises(RuntimeError, match="application attempt died"):
        spark_like_insert_overwrite(s3fs_fs, path, dies=True)
    if pre_task:
        ensure.execute({})  # the pre-task runs again before the retried attempt (a cleared DAG run)
        spark_like_insert_overwrite(s3fs_fs, path, dies=False)
        assert s3fs_fs.cat_file(f"{path}/part-00000.parquet") == b"new data"
    else:
        with pytest.raises(FileNotFoundError, match="Path does not exist"):
            spark_like_insert_overwrite(s3fs_fs, path, dies=False)


def test_airflow_connection_endpoint_and_no_secrets(bucket, airflow_db, monkeypatch, caplog):
    from airflow_commit_provider.hooks.storage import CommitStorageHook

    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")  # the endpoint must come from the connection's extra
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    store = CommitStorageHook("commit_s3").get_store(f"s3://{bucket}/viaconn")
    c = make_committer(store, "job", algorithm="magic", mode="append")
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    manifest = c.commit_job(1)
    assert manifest["output"] == f"s3://{bucket}/viaconn"
    secret = "testing-secret-do-not-log"
    assert secret not in json.dumps(manifest) and secret not in caplog.text
    assert secret not in store.read_bytes("_SUCCESS").decode()
    with pytest.raises(InvalidOutputSpec, match="connection 'no_such_conn' is not defined"):
        CommitStorageHook("no_such_conn").get_store(f"s3://{bucket}/x")


def test_example_dag_writes_to_s3_with_magic(bucket, airflow_db, monkeypatch):
    import importlib
    import sys

    from ..conftest import DAGS_FOLDER

    monkeypatch.setenv("COMMIT_DEMO_S3_TARGET", f"s3://{bucket}/events")
    sys.path.insert(0, str(DAGS_FOLDER))
    sys.modules.pop("example_s3_magic", None)
    dr = importlib.import_module("example_s3_magic").dag.test()
    assert dr.state == "success"
    manifest = read_success_marker(f"s3://{bucket}/events", verify_files=True,
                                   storage_options={"use_listings_cache": False, "skip_instance_cache": True})
    assert manifest["committer"] == "MagicCommitter" and manifest["totals"]["rows"] == 12000
    assert manifest["diagnostics"]["bytes_copied"] == 0
    ids = [r["event_id"] for r in sc.read_rows(f"s3://{bucket}/events")]
    assert len(ids) == len(set(ids)) == 12000
    assert pending_uploads(bucket) == []
