"""The protocol on S3 through a network that fails (tests/s3/faultproxy.py between s3fs and moto's server).

A response lost after its request took effect makes the client resend it, and the resent request meets what the
first one did: an exclusive create answers 412 for the caller's own object, a multipart completion finds its
upload gone. The store resolves each answer (it compares the object with what its own request would have made),
and every loop over "taken" is bounded. Here: the store rule itself, the setup that hung, the completion's check,
then a matrix of fault schedules x algorithms x the commit points (setup, task commit, job commit; abort), in
which every job commits every row exactly once (read back with pyarrow) or fails with a clear error from which the
next try recovers, and none hangs.

The CI subset is 6 cells (a cell costs 5-20 s on 2 busy cores); ``COMMIT_NET_FAULTS=all`` runs all 32::

    COMMIT_NET_FAULTS=all .venv/bin/python -m pytest tests/s3/test_net_faults.py -q -p no:cacheprovider

and each cell prints the requests the proxy saw and the faults it fired (``-s``; a summary table ends the run;
``COMMIT_NET_FAULTS_HITS=1`` also lists every request a fault hit). The client retries as s3fs does, with
botocore's own retries off (:func:`~.faultproxy.proxied_store`): a throttled cell takes seconds, not a minute.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import boto3
import botocore.exceptions
import pytest

from airflow_commit_provider.protocol import (
    CommitProtocolError,
    CorruptRecord,
    make_committer,
    read_success_marker,
    run_task_attempt,
)

from ..protocol import scenario as sc
from ..netfaults import Steps
from .faultproxy import proxied_store

ALGORITHMS = [1, 2, "magic"]
PART_SIZE = 5 * 2**20

#: fault schedules: the proxy's rules (see :class:`~.faultproxy.Rule`)
SCHEDULES: dict[str, list[dict[str, object]]] = {
    # every other exclusive create's answer lost: its resend meets its own object (setup looped forever on it)
    "creates-lost": [{"action": "lose", "method": "PUT", "header": "If-None-Match", "every": 2}],
    # every third request of any kind took effect and its answer was lost
    "every-3rd-lost": [{"action": "lose", "every": 3}],
    # every third request refused before it reached the server
    "resets": [{"action": "reset", "every": 3}],
    # every fourth request throttled
    "slowdown": [{"action": "slowdown", "every": 4}],
    # every other multipart completion's answer lost (the resend then meets NoSuchUpload, as on S3)
    "completes-lost": [{"action": "lose", "method": "POST", "query": "uploadId", "every": 2}],
    # an outage of writes: 12 PUTs in a row refused, more than the client's retries of one (s3fs tries 5 times,
    # aiohttp resends each once on a kept-alive connection; a read is tried 25 times): a step fails, its retry
    # recovers
    "outage": [{"action": "reset", "method": "PUT", "after": 10, "limit": 12}],
}
FLOWS = ("commit", "abort")
CI_CELLS = {(1, "creates-lost", "commit"), (2, "creates-lost", "commit"), ("magic", "creates-lost", "commit"),
            ("magic", "completes-lost", "commit"), (2, "every-3rd-lost", "abort"), ("magic", "outage", "commit")}
FULL = os.environ.get("COMMIT_NET_FAULTS", "") == "all"
CELLS = [(a, s, f) for a in ALGORITHMS for s in SCHEDULES for f in FLOWS
         if (s != "completes-lost" or a == "magic") and (FULL or (a, s, f) in CI_CELLS)]
#: what a step may fail with when the network outlasts the client's retries: the client's error or the protocol's
CLEAR_ERRORS = (CommitProtocolError, OSError, botocore.exceptions.BotoCoreError)

_RESULTS: list[tuple[str, str]] = []


@pytest.fixture(scope="module", autouse=True)
def _summary(pytestconfig):
    """The counts of every cell run, as a table at the end of the module."""
    yield
    reporter = pytestconfig.pluginmanager.getplugin("terminalreporter")
    if reporter is not None and _RESULTS:
        reporter.write_line(f"\nnetwork fault cells: {len(_RESULTS)}")
        for cell, line in _RESULTS:
            reporter.write_line(f"  {cell:<32} {line}")


def new_root(bucket: str) -> tuple[str, str]:
    return f"s3://{bucket}/table", f"{bucket}/table"


def committer(store, algorithm, job: str = sc.JOB):
    kwargs = {"part_size": PART_SIZE} if algorithm == "magic" else {}
    return make_committer(store, job, algorithm=algorithm, mode="overwrite", partition_by=["day"],
                          commit_threads=2, **kwargs)


# ---------------------------------------------------------------------------------------------- the store rule
@pytest.mark.timeout(60)
def test_an_exclusive_create_whose_answer_was_lost_is_its_own(bucket, fault_proxy):
    """The resent PutObject meets the object its first request created: the store reads it, finds its own bytes,
    and answers "created" (it answered "another writer was first"). Another writer's object is still refused."""
    store = proxied_store(fault_proxy, f"{bucket}/root")
    rule = fault_proxy.add("lose", method="PUT", header="If-None-Match", limit=1)
    mine = f"mine {uuid.uuid4()}".encode()
    assert store.create_exclusive("_rec", mine) is True
    assert rule.fired == 1, fault_proxy.counts()
    assert store.read_bytes("_rec") == mine
    assert store.create_exclusive("_rec", f"theirs {uuid.uuid4()}".encode()) is False
    assert store.read_bytes("_rec") == mine


@pytest.mark.timeout(30)
def test_a_part_resent_after_a_reset_is_sent_whole(bucket, fault_proxy):
    """s3fs resends a failed UploadPart with the same arguments; the part's body had been read to its end, so the
    resent request announced the part's length and sent nothing, and hung until the client's read timeout."""
    store = proxied_store(fault_proxy, f"{bucket}/root")
    upload = store.start_upload("part")
    rule = fault_proxy.add("reset", method="PUT", query="uploadId", limit=2)
    data = bytearray(os.urandom(100_000))
    etag = store.upload_part("part", upload, 1, data)
    store.complete_upload("part", upload, [(1, etag)], len(data))
    assert rule.fired == 2, fault_proxy.counts()
    assert store.read_bytes("part") == data


@pytest.mark.timeout(60)
def test_setup_ends_when_every_other_create_answer_is_lost(bucket, fault_proxy):
    """Setup claims application attempt 0: it looped over 0, 1, 2, ... for ever, each resent marker creation
    taken for another setup's claim."""
    store = proxied_store(fault_proxy, new_root(bucket)[1])
    rule = fault_proxy.add("lose", method="PUT", header="If-None-Match", every=2)
    ctx = committer(store, 1).setup_job()
    assert ctx.app_attempt == 0
    assert rule.fired >= 1, fault_proxy.counts()
    names = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="table/_temporary/")["Contents"]
    assert [n["Key"] for n in names if n["Key"].endswith("/_app.json")] == \
        [f"table/_temporary/{sc.JOB}/0/_app.json"], "exactly one application attempt claimed"


def staged_magic_job(bucket: str, fault_proxy) -> tuple[str, Any, list[Any]]:
    """A magic job through the proxy whose tasks all committed (their uploads pending): its URL, store and the
    tasks' outcomes."""
    url, root = new_root(bucket)
    store = proxied_store(fault_proxy, root)
    c = committer(store, "magic")
    c.setup_job()
    return url, store, [run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
                        for t in range(sc.TASKS)]


@pytest.mark.timeout(120)
def test_a_completion_resent_after_its_answer_was_lost_finds_its_object(bucket, fault_proxy):
    """Every multipart completion's first answer lost; S3 answers the resend NoSuchUpload. The store looks at the
    key: an object with the ETag these parts make is this upload, completed."""
    url, store, _ = staged_magic_job(bucket, fault_proxy)
    rule = fault_proxy.add("lose", method="POST", query="uploadId")   # every completion's first answer
    fault_proxy.completed.clear()
    committer(store, "magic").commit_job(sc.TASKS)
    counts = fault_proxy.counts()
    assert rule.fired == 8 and counts["NoSuchUpload answered"] == 8, counts
    sc.assert_exactly_once(sc.read_rows(url))


@pytest.mark.timeout(120)
def test_a_completion_refused_finds_no_stranger_object_its_own(bucket, fault_proxy):
    """An upload aborted outside the protocol, and an object of the very same size put at its key by someone
    else: the completion's NoSuchUpload is not taken for success (a size-only check took it), the job commit fails
    naming the upload."""
    url, store, outcomes = staged_magic_job(bucket, fault_proxy)
    victim = outcomes[0].record["files"][0]
    client = boto3.client("s3")
    client.abort_multipart_upload(Bucket=bucket, Key=f"table/{victim['path']}", UploadId=victim["upload_id"])
    client.put_object(Bucket=bucket, Key=f"table/{victim['path']}", Body=b"x" * victim["size"])
    with pytest.raises(CorruptRecord, match=victim["upload_id"]):
        committer(store, "magic").commit_job(sc.TASKS)


@pytest.mark.timeout(120)
def test_a_completion_throttled_past_the_retries_is_not_called_lost(bucket, fault_proxy):
    """Every completion answered 503 SlowDown, more often than the client retries: the job commit fails with the
    store's error (the uploads are intact), not CorruptRecord ("gone, aborted outside the protocol"), whose advice
    would throw the work away; its next try completes every upload."""
    url, store, _ = staged_magic_job(bucket, fault_proxy)
    rule = fault_proxy.add("slowdown", method="POST", query="uploadId")
    with pytest.raises(OSError) as failed:
        committer(store, "magic").commit_job(sc.TASKS)
    assert not isinstance(failed.value, (CorruptRecord, FileNotFoundError)) and rule.fired, failed.value
    fault_proxy.clear()
    committer(store, "magic").commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(url))


# ---------------------------------------------------------------------------------------------- the matrix
def job_keys(bucket: str, prefix: str) -> list[str]:
    resp = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in resp.get("Contents", [])]


def pending(bucket: str) -> list[str]:
    return [u["Key"] for u in boto3.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("algorithm", "schedule", "flow"), CELLS, ids=[f"{a}-{s}-{f}" for a, s, f in CELLS])
def test_commit_points_under_network_faults(bucket, fault_proxy, algorithm, schedule, flow):
    """A whole job (overwrite of old data, 4 tasks) with the schedule's faults on every request from setup on: the
    output is every row exactly once, old data replaced, no ``_temporary``, no pending upload; with ``abort``,
    a task fails and the teardown aborts first (the target is as before, nothing of the job left), then a re-run
    commits."""
    url, root = new_root(bucket)
    sc.write_old_data(url)
    store = proxied_store(fault_proxy, root)
    for rule in SCHEDULES[schedule]:
        fault_proxy.add(**rule)
    steps = Steps(lambda: committer(store, algorithm), CLEAR_ERRORS)
    steps.setup()
    if flow == "abort":
        steps.failed_run_aborted(url)
        assert not job_keys(bucket, f"table/_temporary/{sc.JOB}/"), "abort left the job's records"
        assert pending(bucket) == [], "abort left pending uploads"
        steps.setup()   # the re-run
    for t in range(sc.TASKS):
        steps.task(t)
    manifest = steps.commit()
    sc.assert_exactly_once(sc.read_rows(url), old=set())
    assert read_success_marker(url, verify_files=True)["job_uuid"] == manifest["job_uuid"]
    assert not job_keys(bucket, "table/_temporary/"), "commit left _temporary"
    assert pending(bucket) == [], "commit left pending uploads"
    counts = fault_proxy.counts()
    fired = sum(v for k, v in counts.items() if k not in ("requests", "server errors"))
    line = (f"requests={counts['requests']} faults={fired} failed steps={len(steps.failures)}"
            f"{' (' + ', '.join(steps.failures) + ')' if steps.failures else ''}")
    _RESULTS.append((f"{algorithm}/{schedule}/{flow}", line))
    print(f"{algorithm}/{schedule}/{flow}: {line}; {counts}")
    if os.environ.get("COMMIT_NET_FAULTS_HITS"):
        print("\n".join(map(str, fault_proxy.hits)))
    assert fired >= 1, f"the schedule fired no fault: {counts}"
