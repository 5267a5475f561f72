"""The S3 store through a network that fails (tests/s3/faultproxy.py between s3fs and moto's server).

A response lost after its request took effect makes the client resend it, and the resent request meets what the
first one did: an exclusive create answers 412 for the caller's own object, a multipart completion finds its
upload gone. The store resolves each answer: it compares the object with what its own request would have made.
Setup, which took its own marker for another setup's and claimed the next application attempt, for ever, ends.
"""

from __future__ import annotations

import os
import uuid

import boto3
import pytest

from airflow_commit_provider.protocol import CorruptRecord, make_committer, run_task_attempt

from ..protocol import scenario as sc
from .faultproxy import proxied_store

PART_SIZE = 5 * 2**20


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


@pytest.mark.timeout(120)
def test_a_completion_resent_after_its_answer_was_lost_finds_its_object(bucket, fault_proxy):
    """Every multipart completion's first answer lost; S3 answers the resend NoSuchUpload. The store looks at the
    key: an object with the ETag these parts make is this upload, completed."""
    url, root = new_root(bucket)
    store = proxied_store(fault_proxy, root)
    c = committer(store, "magic")
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
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
    url, root = new_root(bucket)
    store = proxied_store(fault_proxy, root)
    c = committer(store, "magic")
    c.setup_job()
    outcomes = [run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1))) for t in range(sc.TASKS)]
    victim = outcomes[0].record["files"][0]
    client = boto3.client("s3")
    client.abort_multipart_upload(Bucket=bucket, Key=f"table/{victim['path']}", UploadId=victim["upload_id"])
    client.put_object(Bucket=bucket, Key=f"table/{victim['path']}", Body=b"x" * victim["size"])
    with pytest.raises(CorruptRecord, match=victim["upload_id"]):
        committer(store, "magic").commit_job(sc.TASKS)
