"""The lifecycle seams of tests/protocol/test_lifecycle_seams.py on S3 (moto's server over HTTP): v1, v2, magic."""

from __future__ import annotations

import pytest

from airflow_commit_provider.protocol import faults, make_committer, read_success_marker, run_task_attempt

from ..protocol import scenario as sc
from ..protocol.test_lifecycle_seams import (
    MOVE_ON,
    check_zombie_teardown_left_nothing,
    committed_previous_job,
    killed_late_teardown_after_commit,
    one_partition,
    produce,
    swept_by_the_next,
    two_partitions,
    zombie_after_teardown,
    zombie_teardown_woken_after,
)


def make(root, algorithm, job="j", mode="append"):
    extra = {"part_size": 5 * 2**20} if algorithm == "magic" else {}
    return make_committer(root, job, algorithm=algorithm, mode=mode, partition_by=["day"], **extra)


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
def test_s3_zombie_after_teardown_cannot_commit(bucket, algorithm):
    root = f"s3://{bucket}/zombie"
    c = make(root, algorithm)
    denied = zombie_after_teardown(c)
    assert denied.attempt_failed and denied.winner is None
    c.setup_job()
    statuses = [run_task_attempt(c, t, 2, produce(t, 2)).status for t in range(sc.TASKS)]
    assert statuses[-1] == "committed"
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
def test_s3_dynamic_rerun_with_fewer_partitions(bucket, algorithm):
    root = f"s3://{bucket}/daily"
    c = make(root, algorithm, mode="dynamic")
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(two_partitions(0, 1)))
    c.commit_job(1)
    c.setup_job()
    run_task_attempt(c, 0, 2, lambda w: w.write(one_partition(0, 2)))
    c.commit_job(1)
    assert sc.marker_dirs(root) == ["", "day=d1"]
    assert sc.assert_markers_tell_truth(root) == 2


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
@pytest.mark.parametrize("point", ["commit_job.after_withdraw", "commit_job.mid_move", "commit_job.after_deletes"])
def test_s3_overwrite_crash_leaves_no_lying_marker(bucket, point, algorithm):
    root = f"s3://{bucket}/ow"
    committed_previous_job(root, "overwrite")
    c = make(root, algorithm, job="next", mode="overwrite")
    c.setup_job()
    for t in range(2):
        run_task_attempt(c, t, 1, produce(t, 1))
        sc.assert_markers_tell_truth(root)
    faults.arm(point, "raise", 1)
    try:
        c.commit_job(2)
    except faults.InjectedFault:
        pass
    faults.disarm()
    sc.assert_markers_tell_truth(root)
    c.commit_job(2)
    assert read_success_marker(root, verify_files=True)["job_id"] == "next"
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)


def test_s3_client_start_is_not_counted_as_recovery(bucket):
    """Issue 13: on S3 the "recovery" stage took 4.09 s of a 4.67 s job commit with nothing to recover: the
    client's start-up was counted in it. A fresh committer (as the commit task builds one) reports it apart."""
    root = f"s3://{bucket}/clock"
    c = make(root, 1)
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    import s3fs

    fresh_fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
    fresh = make_committer(root, "j", algorithm=1, mode="append", partition_by=["day"], fs=fresh_fs)
    durations = fresh.commit_job(1)["durations"]
    assert "client_start" in durations
    assert durations["total"] == pytest.approx(sum(v for k, v in durations.items()
                                                   if k not in ("total", "client_start", "cleanup_after_success")),
                                               abs=0.05)


def _claimed_zombie(root: str, queue) -> None:
    """Try 1 of task 3: writes, claims its commit, is paused (SIGSTOP) there; reports its outcome when resumed."""
    faults.arm("commit_task.after_claim", "stop")
    c = make(root, "magic")
    try:
        queue.put(run_task_attempt(c, 3, 1, produce(3, 1)).status)
    except Exception as exc:  # reported, so the test can say what happened
        queue.put(f"{type(exc).__name__}: {exc}")


def test_s3_magic_teardown_keeps_the_uploads_of_a_try_that_claimed_its_commit(bucket):
    """A try that claimed its commit is left alone by the teardown (its commit may still finish); its pending
    uploads must be left alone too, or its commit is accepted with uploads that no longer exist and every job
    commit after the clear fails."""
    import multiprocessing as mp
    import os
    import signal

    from ..protocol.test_lifecycle_seams import _wait_stopped

    root = f"s3://{bucket}/claimed"
    c = make(root, "magic")
    c.setup_job()
    for t in range(3):
        run_task_attempt(c, t, 1, produce(t, 1))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    zombie = ctx.Process(target=_claimed_zombie, args=(root, queue))
    zombie.start()
    _wait_stopped(zombie.pid)
    assert c.abort_job(keep_committed=True)["state"] == "aborted"   # the failed run's teardown
    os.kill(zombie.pid, signal.SIGCONT)
    assert queue.get(timeout=120) == "committed", "its claim held: its commit completes after the teardown"
    zombie.join(60)
    c.setup_job()                                                  # the user clears the run
    assert {run_task_attempt(c, t, 2, produce(t, 2)).status for t in range(4)} == {"recovered"}
    c.commit_job(4)
    sc.assert_exactly_once(sc.read_rows(root))
    assert read_success_marker(root, verify_files=True)["totals"]["rows"] == 4 * sc.ROWS


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
@pytest.mark.parametrize("moved_on", sorted(MOVE_ON))
def test_s3_a_zombie_teardown_writing_its_record_late_leaves_no_stale_abort(bucket, algorithm, moved_on):
    """tests/protocol/test_lifecycle_seams.py's sequence on S3: the teardown's late record must not be left under
    the committed output (S3's cleanup deletes the job's keys; a key written after that would stay) nor make the
    live job's status say ``failed``."""
    c = make(f"s3://{bucket}/late-record", algorithm)
    assert zombie_teardown_woken_after(c, lambda: MOVE_ON[moved_on](c)) == "superseded"
    check_zombie_teardown_left_nothing(c, moved_on)


@pytest.mark.parametrize("sweeper", ["abort", "setup"])
def test_s3_the_next_setup_or_abort_sweeps_a_late_abort_record_after_the_commit(bucket, sweeper):
    """On S3 the late record's key stays under the committed output until the job's next teardown or set-up."""
    c = make(f"s3://{bucket}/late-killed", "magic")
    killed_late_teardown_after_commit(c)
    swept_by_the_next(c, sweeper)
