"""The magic committer on Azure Blob Storage (Azurite over HTTP): a file's bytes are blocks staged under its final
name, invisible until the job commit's Put Block List; nothing is copied.

Staged blocks cannot be aborted one upload at a time (only a blob's name can be deleted, and every try of a task
writes the same names), so nothing deletes them: the job commit's Put Block List discards the blocks of the tries
that lost under the names it commits, and Azure discards any other a week after its blob's last Put Block. What
these tests check is what a reader sees (nothing before the job commit, every row once after) and that nothing a
try left behind is ever visible.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

import pytest

from airflow_commit_provider.protocol import (
    StagedDataExpired,
    faults,
    make_committer,
    run_task_attempt,
)
from airflow_commit_provider.protocol.audit.expiry import approval_risk

from ..protocol import scenario as sc

pytestmark = pytest.mark.parametrize("cloud", ["azure"], indirect=True)


def produce(task: int, attempt: int):
    return lambda w: w.write(sc.task_table(task, attempt))


def make(root: str, **kw):
    kw.setdefault("mode", "append")
    kw.setdefault("partition_by", ["day"])
    return make_committer(root, kw.pop("job", "job"), algorithm="magic", **kw)


def blobs(container: str) -> tuple[set[str], set[str]]:
    """``(committed, staged only)``: the blob names readers see, and those holding uncommitted blocks alone."""
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"])
    box = client.get_container_client(container)
    committed = {b.name for b in box.list_blobs()}
    every = {b.name for b in box.list_blobs(include=["uncommittedblobs"])}
    return committed, every - committed


def test_nothing_is_visible_before_the_job_commit_and_nothing_is_copied(cloud, bucket):
    root = cloud.root(bucket, "events")
    c = make(root)
    c.setup_job()
    outcomes = [run_task_attempt(c, t, 1, produce(t, 1)) for t in range(sc.TASKS)]
    paths = {f"events/{f['path']}" for o in outcomes for f in o.record["files"]}
    assert len(paths) == 8 and all(f["parts"] for o in outcomes for f in o.record["files"])
    committed, staged = blobs(bucket)
    assert staged == paths, "every file is staged under its final name"
    assert not committed & paths and sc.visible_files(root) == [], "I2: nothing listed before the job commit"
    manifest = c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
    assert manifest["diagnostics"]["bytes_copied"] == 0
    committed, staged = blobs(bucket)
    assert paths <= committed and staged == set(), "the commit made every staged blob, and left none staged"


def test_a_large_file_is_staged_in_blocks_of_part_size(cloud, bucket):
    root = cloud.root(bucket, "blobs")
    c = make(root, partition_by=(), part_size=2**18)
    c.setup_job()
    blob = os.urandom(3 * 2**18 + 77)
    outcome = run_task_attempt(c, 0, 1, lambda w: _write_file(w, "blob.bin", blob))
    assert len(outcome.record["files"][0]["parts"]) == 4
    c.commit_job(1)
    assert c.store.read_bytes("blob.bin") == blob


def test_an_empty_file_commits_empty(cloud, bucket):
    c = make(cloud.root(bucket, "empty"), partition_by=())
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: _write_file(w, "nothing.bin", b""))
    assert not c.store.exists("nothing.bin")
    c.commit_job(1)
    assert c.store.read_bytes("nothing.bin") == b""


def _write_file(w, name: str, data: bytes) -> None:
    with w.open_file(name) as fh:
        fh.write(data)


def test_a_denied_try_and_a_failed_one_leave_nothing_visible(cloud, bucket):
    """Try 1 of task 0 commits; try 2 wrote the same names and is denied; try 3 of task 1 wrote a name of its own
    and failed. Only try 1's rows are published, and the job commit's block lists discarded try 2's blocks (same
    names); try 3's blob stays staged, unseen, until Azure discards it."""
    root = cloud.root(bucket, "deny")
    c = make(root)
    c.setup_job()
    sc.commit_one_deny_the_next(c)   # try 2 starts after try 1 committed: it stages, and is denied at its commit

    def fail(w):
        _write_file(w, "stray.bin", b"never")
        raise RuntimeError("the try fails")

    with pytest.raises(RuntimeError):
        run_task_attempt(c, 1, 3, fail)
    run_task_attempt(c, 1, 4, produce(1, 4))
    c.commit_job(2)
    assert {(r["task"], r["attempt"]) for r in sc.read_rows(root)} == {(0, 1), (1, 4)}
    sc.check_no_duplicates(sc.read_rows(root))
    committed, staged = blobs(bucket)
    assert staged == {"deny/stray.bin"}, "only the name no winner has stays staged"
    assert not c.store.exists("stray.bin") and "stray.bin" not in sc.visible_files(root)


def test_recovery_reuses_the_staged_blocks(cloud, bucket):
    root = cloud.root(bucket, "rec")
    c = make(root)
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    run_task_attempt(c, 1, 1, produce(1, 1))
    c.setup_job()  # the next application attempt: the two committed tasks are adopted, not written again
    outcomes = [run_task_attempt(c, t, 2, lambda w: pytest.fail("a recovered task ran")) for t in (0, 1)]
    assert [o.status for o in outcomes] == ["recovered", "recovered"]
    for t in (2, 3):
        run_task_attempt(c, t, 2, produce(t, 2))
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))


def test_a_resumed_job_commit_commits_the_same_blocks_again(cloud, bucket):
    """Put Block List is idempotent: a job commit that dies after committing some blobs (here after the 5th) and
    runs again commits them again, to the same content; nothing doubles, nothing is missing. Blocks that are gone
    are named, not guessed."""
    root = cloud.root(bucket, "again")
    c = make(root)
    c.setup_job()
    recs = [run_task_attempt(c, t, 1, produce(t, 1)).record for t in range(sc.TASKS)]
    faults.arm("commit_job.mid_move", "raise", 5)
    try:
        with pytest.raises(faults.InjectedFault):
            c.commit_job(sc.TASKS)
    finally:
        faults.disarm()
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
    f = recs[0]["files"][0]
    with pytest.raises(FileNotFoundError, match="cannot be committed"):
        c.store.complete_upload(f["path"], f["upload_id"], [[1, "bm90LWEtYmxvY2s="]], f["size"])


def test_an_approval_is_bounded_by_the_week_azure_keeps_staged_blocks(cloud, bucket):
    magic = make(cloud.root(bucket, "approved"))
    risk = approval_risk(magic.job, None)
    assert risk is not None and risk.certain and "7 days" in risk.message
    assert approval_risk(magic.job, timedelta(days=8)).certain
    assert approval_risk(magic.job, timedelta(days=6)) is None
    assert approval_risk(make_committer(cloud.root(bucket, "approved"), "v1", algorithm=1).job, None) is None



def test_a_job_older_than_the_week_of_its_staged_blocks_is_refused_before_anything_is_visible(cloud, bucket):
    """Azure drops staged blocks a week after they were written: a job commit past that (a retry after a week,
    a long approval) would find some gone after publishing others. It is refused before its plan; the teardown
    and a new run write the rows again, once."""
    root = cloud.root(bucket, "late")
    sc.write_old_data(root)
    c = make(root, mode="overwrite")
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, produce(t, 1))
    # a week and a day pass: the generation's record says when it was set up
    rel = c.job.layout.job_record
    doc = json.loads(c.store.read_bytes(rel))
    doc["created"] = (datetime.fromisoformat(doc["created"]) - timedelta(days=8)).isoformat()
    c.store.write_bytes(rel, json.dumps(doc).encode())
    before = sc.visible_files(root)
    with pytest.raises(StagedDataExpired, match="Tear the job down.*algorithm=1"):
        c.commit_job(sc.TASKS)
    assert sc.visible_files(root) == before, "nothing visible changed"
    c.abort_job()
    again = make(root, mode="overwrite")
    again.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(again, t, 1, produce(t, 1))
    again.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root), old=set())


def test_a_try_that_wakes_after_its_job_committed_changes_nothing_visible(cloud, bucket):
    """A try set up before its job committed stages blocks under a name the commit has made (its task's), after
    the commit: Put Block succeeds (S3 would have aborted the upload; Azure has no abort), but a staged block is
    not part of the committed blob. The try then finds its job committed and leaves nothing of its own behind."""
    root = cloud.root(bucket, "late-try")
    c = make(root)
    c.setup_job()
    zombie = make(root)

    assert run_task_attempt(zombie, 0, 1, sc.wakes_after_the_commit(c)).status == "already_committed"
    assert not [f for f in sc.all_files(root) if f.startswith("_temporary")], sc.all_files(root)
    assert {r["attempt"] for r in sc.read_rows(root)} == {2}
    sc.check_no_duplicates(sc.read_rows(root))
