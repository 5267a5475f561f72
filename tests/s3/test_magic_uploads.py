"""The magic committer's uploads without ``.pending`` descriptions: who finds an attempt's uploads, and when.

The committer that set up an attempt holds its uploads in memory; a party that does not (a newer try fencing a
killed or paused one, the job commit, the teardown) finds them in S3's list of pending uploads. Each case here
runs the attempt in a real worker process, stopped or killed at a fault point with one file closed and the next
one open (an upload no description anywhere names), on moto's server over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import boto3
import pytest

from airflow_commit_provider.protocol import CommitDenied, CommitProtocolError, TaskAttemptWriter, faults
from airflow_commit_provider.protocol import make_committer
from airflow_commit_provider.protocol import run_task_attempt

from ..protocol import scenario as sc

PART = 5 * 2**20

#: try *attempt* of task 0: two partitions, so closing the writer closes one file while the other is still open
_TRY = textwrap.dedent("""
    import sys
    from airflow_commit_provider.protocol import make_committer, run_task_attempt
    from tests.protocol import scenario as sc
    root, attempt = sys.argv[1], int(sys.argv[2])
    c = make_committer(root, "job", algorithm="magic", mode="append", partition_by=["day"], part_size=5 * 2**20)
    try:
        out = run_task_attempt(c, 0, attempt, lambda w: w.write(sc.task_table(0, attempt)))
        print("outcome", out.status)
    except Exception as exc:
        print("raised", type(exc).__name__, exc)
""")


#: the failed run's teardown, in its own process (it stops itself at a fault point the test arms)
_TEARDOWN = textwrap.dedent("""
    import sys
    from airflow_commit_provider.protocol import make_committer
    c = make_committer(sys.argv[1], "job", algorithm="magic", mode="append", partition_by=["day"],
                       part_size=5 * 2**20)
    print("teardown", c.abort_job(keep_committed=True)["state"])
""")


def make(root: str):
    return make_committer(root, "job", algorithm="magic", mode="append", partition_by=["day"], part_size=PART)


def job_uploads(bucket: str, job_uuid: str) -> list[str]:
    resp = boto3.client("s3").list_multipart_uploads(Bucket=bucket)
    return sorted(u["UploadId"] for u in resp.get("Uploads", []) if job_uuid in u["Key"])


def start_try(root: str, attempt: int, fault: str) -> subprocess.Popen:
    return start(_TRY, fault, root, str(attempt))


def start(script: str, fault: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, faults.ENV_VAR: fault, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_stopped(proc: subprocess.Popen) -> None:
    """Until the worker has stopped itself (SIGSTOP at its fault point) or ended; bounded, not a timed assertion."""
    import time

    for _ in range(60000):
        with open(f"/proc/{proc.pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] in "TZ":
                return
        time.sleep(0.01)
    raise AssertionError("the worker never reached its fault point")


def killed_after_one_file(root: str) -> None:
    proc = start_try(root, 1, "writer.after_file=kill")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]


def test_a_killed_attempts_uploads_are_aborted_by_the_newer_tries_fencing(bucket):
    """Try 1 is killed with one file closed and one open: two pending uploads, which try 2's set-up (another
    process: it holds neither) aborts when it fences try 1, before writing anything itself. Before, the open one
    had no ``.pending`` and stayed until the job commit."""
    root = f"s3://{bucket}/killed"
    c = make(root)
    c.setup_job()
    uuid = c.job_record().job_uuid
    killed_after_one_file(root)
    assert len(job_uploads(bucket, uuid)) == 2
    ta = make(root).setup_task(0, 2)
    assert job_uploads(bucket, uuid) == [], "the fenced try's uploads, closed and open, are aborted"
    c2 = make(root)
    c2.abort_task(ta)
    assert run_task_attempt(c2, 0, 3, lambda w: w.write(sc.task_table(0, 3))).status == "committed"
    for t in range(1, sc.TASKS):
        run_task_attempt(c2, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    c2.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
    assert {r["attempt"] for r in sc.read_rows(root) if r["task"] == 0} == {3}
    assert job_uploads(bucket, uuid) == []


def test_a_killed_attempts_uploads_in_an_earlier_application_attempt_are_aborted_by_the_job_commit(bucket):
    """Killed in application attempt 0, the try is not fenced by the next application attempt's try (fencing is
    per application attempt) and its uploads stay pending -- until the job commit aborts every upload of the job
    that no record lists."""
    root = f"s3://{bucket}/killed-app"
    c = make(root)
    c.setup_job()
    uuid = c.job_record().job_uuid
    killed_after_one_file(root)
    killed = job_uploads(bucket, uuid)
    assert len(killed) == 2
    c.setup_job()   # the clear: application attempt 1
    for t in range(sc.TASKS):
        assert run_task_attempt(c, t, 2, lambda w, t=t: w.write(sc.task_table(t, 2))).status == "committed"
    assert set(killed) <= set(job_uploads(bucket, uuid)), "no fencing across application attempts"
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
    assert job_uploads(bucket, uuid) == []


def test_a_zombie_magic_attempt_is_fenced(bucket):
    """Try 1 stops itself (a zombie) with one file closed and one open; try 2 runs and commits, fencing it (its
    uploads aborted); then try 1 wakes, finishes its files and cannot commit. Exactly try 2's rows, nothing left
    pending."""
    root = f"s3://{bucket}/zombie"
    c = make(root)
    c.setup_job()
    uuid = c.job_record().job_uuid
    zombie = start_try(root, 1, "writer.after_file=stop")
    try:
        wait_stopped(zombie)
        assert len(job_uploads(bucket, uuid)) == 2
        out = run_task_attempt(c, 0, 2, lambda w: w.write(sc.task_table(0, 2)))
        assert out.status == "committed"
        assert set(job_uploads(bucket, uuid)) == {f["upload_id"] for f in out.record["files"]}, \
            "only the winner's uploads are pending"
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    said, err = zombie.communicate(timeout=300)
    assert zombie.returncode == 0, err[-2000:]
    assert "outcome committed" not in said, said
    assert set(job_uploads(bucket, uuid)) == {f["upload_id"] for f in out.record["files"]}
    for t in range(1, sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    c.commit_job(sc.TASKS)
    rows = sc.read_rows(root)
    sc.assert_exactly_once(rows)
    assert {r["attempt"] for r in rows if r["task"] == 0} == {2}
    assert job_uploads(bucket, uuid) == []


def test_a_sweep_leaves_an_attempt_that_may_still_commit_alone(bucket):
    """A newer try's fencing must not abort the uploads of an attempt that has no fate yet: here try 3 fences
    try 1 while try 2 (which started after try 3 listed the task's tries, so try 3 did not fence it) has
    uploaded; try 2's uploads stay, and it commits."""
    root = f"s3://{bucket}/late"
    c = make(root)
    c.setup_job()
    uuid = c.job_record().job_uuid
    killed_after_one_file(root)                          # try 1: killed, two uploads
    late = make(root)
    fencer = make(root)
    faults.arm("setup_task.after_dir", "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            fencer.setup_task(0, 3)                      # try 3 fences try 1 (and sweeps) ...
    finally:
        faults.disarm()
    assert job_uploads(bucket, uuid) == []
    ta2 = late.setup_task(0, 2)                          # ... a late try 2, unfenced, uploads ...
    w = TaskAttemptWriter(late, ta2, partition_by=["day"])
    w.write(sc.task_table(0, 2))
    w.close()
    mine = job_uploads(bucket, uuid)
    assert len(mine) == 2
    fencer.attempts.sweep_uploads(uuid, 0, fencer=(0, 3))   # ... and a sweep now must leave them alone
    assert job_uploads(bucket, uuid) == mine
    assert late.commit_task(ta2, w.rows, sizes=w.sizes)["attempt"] == 2


def test_commit_in_a_committer_that_did_not_set_up_the_attempt_is_refused_before_anything_is_recorded(bucket):
    """Its uploads' part ETags are in the memory of the committer that wrote them: another committer cannot
    build the record and says so, recording nothing; the right one then commits."""
    root = f"s3://{bucket}/other"
    c = make(root)
    c.setup_job()
    ta = c.setup_task(0, 1)
    with TaskAttemptWriter(c, ta, partition_by=["day"]) as w:
        w.write(sc.task_table(0, 1))
    with pytest.raises(CommitProtocolError, match="not set up by this committer"):
        make(root).commit_task(ta, w.rows, sizes=w.sizes)
    assert c.job.ledger.fate(0, 0, 1) is None and c.job.task_record(0, 0, ta.job_uuid) is None
    assert c.commit_task(ta, w.rows, sizes=w.sizes)["attempt"] == 1


def test_an_earlier_releases_pending_descriptions_are_still_read(bucket):
    """An attempt of an earlier release described its uploads in ``.pending`` files in its directory: a
    committer that did not write it commits from them, and a discard aborts what they name."""
    root = f"s3://{bucket}/legacy"
    c = make(root)
    c.setup_job()
    atts = []
    for task in (0, 1):
        ta = c.setup_task(task, 1)
        with TaskAttemptWriter(c, ta, partition_by=["day"]) as w:
            w.write(sc.task_table(task, 1))
        for doc in c.job.publisher._written[ta.work_dir].values():   # what an earlier release wrote per file
            c.store.write_bytes(f"{ta.work_dir}/{doc['path']}.pending", json.dumps(doc).encode())
        atts.append((ta, w))
    other = make(root)
    ta, w = atts[0]
    assert other.commit_task(ta, w.rows, sizes=w.sizes)["attempt"] == 1
    ta, w = atts[1]
    uploads = {d["upload_id"] for d in c.job.publisher._written[ta.work_dir].values()}
    assert uploads <= set(job_uploads(bucket, ta.job_uuid))
    assert other.abort_task(ta)
    assert not uploads & set(job_uploads(bucket, ta.job_uuid))


@pytest.mark.parametrize("point,winner", [("abort_job.mid_delete", 2), ("abort_job.after_read", 3)])
def test_a_try_set_up_while_the_teardown_runs_is_denied_or_counts(bucket, point, winner):
    """The failed run's teardown stops at *point*; a try 2 of task 0 is set up now (a late or cleared try) and
    uploads its files; then the teardown goes on. Try 2 then asks to commit: either its commit is refused and
    nothing of it is left pending, or its rows are in the output exactly once -- never a record naming uploads
    the teardown aborted.

    ``mid_delete``: the teardown has read the traces (it saw task 0's killed try 1 only, and recorded it failed),
    so try 2 is not fenced and commits (winner 2). Before, the teardown listed the pending uploads only now and
    aborted try 2's, its commit was accepted all the same, and every job commit after it failed with
    CorruptRecord once its plan was fixed -- tasks 1-3's files already visible, no ``_SUCCESS``, the teardown
    refusing to abort a job "committing", a clear not helping: stuck for good, task 0's rows lost.
    ``after_read``: the teardown reads the traces after try 2's set-up, so try 2 is recorded failed; its commit
    is denied and a try 3 commits (winner 3)."""
    root = f"s3://{bucket}/late-teardown"
    c = make(root)
    c.setup_job()
    uuid = c.job_record().job_uuid
    for t in range(1, sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    killed_after_one_file(root)                          # task 0's try 1: killed, two uploads; the run fails
    teardown = start(_TEARDOWN, f"{point}=stop", root)
    try:
        wait_stopped(teardown)
        late = make(root)
        ta = late.setup_task(0, 2)
        w = TaskAttemptWriter(late, ta, partition_by=["day"])
        w.write(sc.task_table(0, 2))
        w.close()
        mine = {d["upload_id"] for d in late.job.publisher._written[ta.work_dir].values()}
        assert mine <= set(job_uploads(bucket, uuid))
    finally:
        os.kill(teardown.pid, signal.SIGCONT)
    said, err = teardown.communicate(timeout=300)
    assert teardown.returncode == 0 and "teardown aborted" in said, err[-2000:]
    try:
        late.commit_task(ta, w.rows, sizes=w.sizes)
        committed = 2
    except CommitDenied as denied:
        assert denied.attempt_failed
        assert not mine & set(job_uploads(bucket, uuid)), "a denied try leaves no upload pending"
        committed = 3
        assert run_task_attempt(c, 0, 3, lambda w: w.write(sc.task_table(0, 3))).status == "committed"
    assert committed == winner
    c.commit_job(sc.TASKS)
    rows = sc.read_rows(root)
    sc.assert_exactly_once(rows)
    assert {r["attempt"] for r in rows if r["task"] == 0} == {winner}
    assert job_uploads(bucket, uuid) == []


@pytest.mark.parametrize("clash", ["three tasks", "a visible file"])
def test_the_uploads_of_commits_refused_for_their_names_are_aborted_by_the_teardown(bucket, clash):
    """Found from outside (session 19): the teardown after a job commit refused file names kept the refused
    commits' uploads pending (they are claimed, so no fencing aborts them; chosen names carry no generation, so no
    listing finds them), after the clear's commit too; and with three tasks on one name only two were refused."""
    client = boto3.client("s3")
    root = f"s3://{bucket}/out"
    if clash == "a visible file":
        client.put_object(Bucket=bucket, Key="out/taken.txt", Body=b"someone else's")
    names = ["same.txt"] * 3 if clash == "three tasks" else ["taken.txt", "mine-1.txt", "mine-2.txt"]

    def named(name: str, body: str):
        def produce(w):
            with w.open_file(name) as fh:
                fh.write(body.encode())
        return produce

    c = make(root)
    c.setup_job()
    for t in range(3):
        run_task_attempt(c, t, 1, named(names[t], f"old-{t}"))
    with pytest.raises(CommitProtocolError, match="recorded as refused"):
        c.commit_job(3)
    c.abort_job(keep_committed=True)
    c.setup_job()
    statuses = [run_task_attempt(c, t, 2, named(f"fixed-{t}.txt", f"new-{t}")).status for t in range(3)]
    assert statuses == (["committed"] * 3 if clash == "three tasks" else ["committed", "recovered", "recovered"])
    c.commit_job(3)
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads"), "a refused commit's upload is pending"
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="out/")["Contents"]
                  if "/_" not in o["Key"] and not o["Key"].endswith("/"))
    expected = ["out/fixed-0.txt", "out/fixed-1.txt", "out/fixed-2.txt"] if clash == "three tasks" else \
        ["out/fixed-0.txt", "out/mine-1.txt", "out/mine-2.txt", "out/taken.txt"]
    assert keys == expected
    if clash == "a visible file":
        assert client.get_object(Bucket=bucket, Key="out/taken.txt")["Body"].read() == b"someone else's"


#: try *attempt* of task instance 0 whose 4 shards commit together, 4 threads, killed at its fault point
_TOGETHER_TRY = textwrap.dedent("""
    import sys
    from airflow_commit_provider.operators.shards import run_shards_together
    from airflow_commit_provider.protocol import make_committer
    from tests.protocol import scenario as sc
    root, attempt = sys.argv[1], int(sys.argv[2])
    c = make_committer(root, "job", algorithm="magic", mode="append", partition_by=["day"], part_size=5 * 2**20)
    out = run_shards_together(c, 0, 4, attempt, lambda s, task, w: w.write(sc.task_table(task, attempt)), threads=4)
    print("outcome", out.status)
""")


def test_shards_committed_together_on_magic_leave_no_upload_of_a_failed_or_killed_try(bucket):
    """``shard_commit="together"`` on S3's magic committer, 4 shards in 4 threads each with its own uploads:

    - try 1 is killed (SIGKILL) after its shards closed 3 files: their uploads stay pending, found by the task's
      name prefix (every shard's names begin with it) and aborted by try 2's fencing;
    - try 2 fails in shard 2 (a transient error): its own abort takes every shard's uploads;
    - try 3 commits the four shards in one record; the job commit completes them, and nothing is left pending."""
    from airflow_commit_provider.operators.shards import run_shards_together

    root = f"s3://{bucket}/together"
    c = make(root)
    c.setup_job()
    uuid = c.job_record().job_uuid
    proc = start(_TOGETHER_TRY, "writer.after_file=kill@3", root, "1")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    assert len(job_uploads(bucket, uuid)) >= 3

    def produce(attempt, failing=None):
        def one(shard, task, writer):
            writer.write(sc.task_table(task, attempt))
            if shard == failing:
                raise RuntimeError(f"shard {shard} failed")
        return one

    with pytest.raises(RuntimeError, match="shard 2 failed"):
        run_shards_together(make(root), 0, 4, 2, produce(2, failing=2), threads=4)
    assert job_uploads(bucket, uuid) == [], "the killed try's uploads (fenced) and the failed try's (aborted)"
    out = run_shards_together(make(root), 0, 4, 3, produce(3), threads=4)
    assert (out.status, out.files) == ("committed", 8)
    make(root).commit_job(1)
    rows = sc.read_rows(root)
    sc.assert_exactly_once(rows, tasks=4)
    assert {r["attempt"] for r in rows} == {3}
    assert job_uploads(bucket, uuid) == []


def test_two_shards_opening_one_name_together_are_refused_before_a_second_upload_starts(bucket):
    """Two shards committed together open one explicit name at once (4 tries in a row, two threads each). Before,
    both started an upload and the magic committer's record of the name kept the second: the first stayed pending
    for ever (its name carries no generation, so no sweep matched it). Now the second open is refused
    (``InvalidOutputSpec``, not retried) before it starts anything, the try's abort takes the first, and nothing
    is pending."""
    import threading

    from airflow_commit_provider.operators.shards import run_shards_together
    from airflow_commit_provider.protocol import InvalidOutputSpec

    root = f"s3://{bucket}/clash"
    make(root).setup_job()
    for attempt in range(1, 5):
        both = threading.Barrier(2, timeout=30)

        def produce(shard, task, writer):
            both.wait()   # the two open the name at the same moment
            with writer.open_file("same.dat") as fh:
                fh.write(b"x" * 1000)

        with pytest.raises(InvalidOutputSpec, match=r"'same.dat' was already opened by another part \(shard\)"):
            run_shards_together(make(root), 0, 2, attempt, produce, threads=2)
    resp = boto3.client("s3").list_multipart_uploads(Bucket=bucket)
    assert resp.get("Uploads", []) == [], "no upload of the refused tries is left pending"
