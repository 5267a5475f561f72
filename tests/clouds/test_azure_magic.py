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
    InvalidOutputSpec,
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
    outcome = run_task_attempt(c, 0, 1, lambda w: _write_file(w, _named("blob", w), blob))
    assert len(outcome.record["files"][0]["parts"]) == 4
    c.commit_job(1)
    assert c.store.read_bytes(outcome.record["files"][0]["path"]) == blob


def test_an_empty_file_commits_empty(cloud, bucket):
    c = make(cloud.root(bucket, "empty"), partition_by=())
    c.setup_job()
    path = run_task_attempt(c, 0, 1, lambda w: _write_file(w, _named("nothing", w), b"")).record["files"][0]["path"]
    assert not c.store.exists(path)
    c.commit_job(1)
    assert c.store.read_bytes(path) == b""


def _named(stem: str, writer_or_committer) -> str:
    """A file name of the writer's choosing with the job's generation in it, as the magic committer on Azure asks."""
    uuid = writer_or_committer.attempt.job_uuid if hasattr(writer_or_committer, "attempt") else \
        writer_or_committer.job_record().job_uuid
    return f"{stem}-{uuid}.bin"


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
        _write_file(w, _named("stray", w), b"never")
        raise RuntimeError("the try fails")

    stray = _named("stray", c)
    with pytest.raises(RuntimeError):
        run_task_attempt(c, 1, 3, fail)
    run_task_attempt(c, 1, 4, produce(1, 4))
    c.commit_job(2)
    assert {(r["task"], r["attempt"]) for r in sc.read_rows(root)} == {(0, 1), (1, 4)}
    sc.check_no_duplicates(sc.read_rows(root))
    committed, staged = blobs(bucket)
    assert staged == {f"deny/{stray}"}, "only the name no winner has stays staged"
    assert not c.store.exists(stray) and stray not in sc.visible_files(root)


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
    with pytest.raises(StagedDataExpired, match="Abort the job.*a clear of the Airflow run after its teardown"):
        c.commit_job(sc.TASKS)
    assert sc.visible_files(root) == before, "nothing visible changed"
    # the stage's teardown (it keeps committed tasks for a clear) purges a generation this old: kept, the clear
    # would recover them and its commit be refused again, for ever (found from outside: it looped)
    teardown = c.abort_job(keep_committed=True)
    assert teardown["aborted"] and teardown["purged"] and teardown["kept_committed_tasks"] == []
    again = make(root, mode="overwrite")
    again.setup_job()
    statuses = [run_task_attempt(again, t, 2, produce(t, 2)).status for t in range(sc.TASKS)]
    assert statuses == ["committed"] * sc.TASKS, "a new generation: every task runs again"
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


def test_a_name_another_generation_could_stage_under_is_refused(cloud, bucket):
    """Found from outside: with a name the writer chose, the next generation of the job stages under the same blob
    name, and a late job commit of this one (a zombie, completing its upload again) discards those blocks: the
    next commit fails for good. A chosen name must carry the generation; the default names do."""
    root = cloud.root(bucket, "named")
    c = make(root, mode="overwrite", partition_by=())
    c.setup_job()
    with pytest.raises(InvalidOutputSpec, match="'fixed.bin'.*each generation of a job needs names of its own"):
        run_task_attempt(c, 0, 1, lambda w: _write_file(w, "fixed.bin", b"x"))
    committed, staged = blobs(bucket)
    assert not staged and not [b for b in committed if "fixed" in b], "refused before anything was staged"

    named = _named("events", c)
    run_task_attempt(c, 0, 2, lambda w: _write_file(w, named, b"y"))
    c.commit_job(1)
    assert sc.visible_files(root) == [named]


def test_a_commit_refused_by_a_transient_error_is_not_called_lost(cloud, bucket, monkeypatch):
    """Found from outside: a Put Block List that fails for another reason than a missing block (503 ServerBusy
    after the SDK's own retries) was reported as lost data (CorruptRecord, whose advice throws the work away); the
    blocks are all there and the next try commits. The SDK call fails here as the SDK raises it."""
    from azure.core.exceptions import HttpResponseError

    root = cloud.root(bucket, "busy")
    c = make(root)
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, produce(t, 1))
    real = type(c.store)._run
    calls = []

    def busy_once(self, call):
        if call.__name__ == "commit" and not calls:
            calls.append(call)
            raise HttpResponseError(message="The server is busy. ErrorCode:ServerBusy")
        return real(self, call)

    monkeypatch.setattr(type(c.store), "_run", busy_once)
    with pytest.raises(HttpResponseError, match="busy"):
        c.commit_job(sc.TASKS)
    monkeypatch.undo()
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))


def test_a_file_of_more_parts_than_a_blob_takes_is_refused_while_written(cloud, bucket):
    """Azure commits at most 50,000 blocks a blob: a file that needs more is refused as it is written (raise
    part_size), not at the job commit after other files were published. (The limit is the store's; a store of 3
    keeps the test to a few requests.)"""
    c = make(cloud.root(bucket, "huge"), partition_by=(), part_size=1)
    assert c.store.max_parts == 50_000
    c.store.max_parts = 3
    c.setup_job()
    with pytest.raises(InvalidOutputSpec, match=r"\.bin: more than 3 parts of 1 bytes.*larger part_size"):
        run_task_attempt(c, 0, 1, lambda w: _write_file(w, _named("huge", w), b"zzzz"))


@pytest.mark.parametrize("mode", ["overwrite", "dynamic", "append", "error"])
def test_every_mode_over_old_data_commits_each_row_once(cloud, bucket, mode):
    """(From the attack on the feature, held.) Nothing of the job before its commit; old rows as the mode says."""
    root = cloud.root(bucket, f"m-{mode}")
    if mode != "error":
        sc.write_old_data(root)
    c = make(root, mode=mode)
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, produce(t, 1))
    assert sc.read_rows(root) == [] or all(r["task"] == sc.OLD_TASK for r in sc.read_rows(root))
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root), old=sc.old_rows_expected(mode) if mode != "error" else set())
    assert not [f for f in sc.all_files(root) if f.startswith("_temporary")]


def test_a_compaction_by_the_magic_committer_over_its_output_keeps_every_row_once(cloud, bucket):
    """(From the attack on the feature, held.) Three magic jobs, then a compaction that is a magic job itself."""
    from airflow_commit_provider.protocol.maintenance.compaction import compact

    root = cloud.root(bucket, "compact")
    for j in range(3):
        c = make(root, job=f"load{j}", mode="append")
        c.setup_job()
        for t in range(sc.TASKS):
            run_task_attempt(c, t, 1, lambda w, t=t, j=j: w.write(sc.task_table(t + 10 * j, 1)))
        c.commit_job(sc.TASKS)
    rows_before = sorted((r["task"], r["row"]) for r in sc.read_rows(root))
    n_before = len(sc.visible_files(root))
    comp = make_committer(root, "compaction", algorithm="magic", mode="append", partition_by=["day"])
    out = compact(comp, 1)
    assert out["state"] == "committed", out
    rows_after = sorted((r["task"], r["row"]) for r in sc.read_rows(root))
    assert rows_after == rows_before
    assert len(sc.visible_files(root)) < n_before
    assert not [f for f in sc.all_files(root) if f.startswith("_temporary")]
