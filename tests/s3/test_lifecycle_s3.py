"""The lifecycle schedules of tests/protocol/lifecycle.py on S3: moto's server over HTTP on 127.0.0.1, v1, v2, magic.

CI runs ``COMMIT_S3_SCHEDULES`` schedules (default 3) of ``COMMIT_S3_SCHEDULE_STEPS`` steps (default 20) per
algorithm, ~20 s; the long run is ``python -m tests.schedules --s3 1000``. A step costs ~90 ms here, most of it the
committer's own requests (moto answers one in ~5 ms).
"""

from __future__ import annotations

import os

import pytest

from ..protocol import lifecycle as lc
from ..protocol.lifecycle import Config, Lifecycle

COUNT = int(os.environ.get("COMMIT_S3_SCHEDULES", "3"))
STEPS = int(os.environ.get("COMMIT_S3_SCHEDULE_STEPS", "20"))
SEED = int(os.environ.get("COMMIT_SCHEDULES_SEED", "0"))


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
def test_random_schedules_s3(bucket: str, algorithm: int | str) -> None:
    tally = lc.run_many("s3", COUNT, first_seed=SEED, steps=STEPS, bucket=bucket, known=lc.known_open,
                        algorithm=algorithm)
    print(f"s3 {algorithm}: {tally.schedules} schedules, {tally.steps} steps")
    assert not tally.failures, lc.describe(tally.failures[0], bucket=bucket, shrink_it=False)
    if tally.known:
        pytest.xfail(f"{len(tally.known)} schedule(s) hit known open bug(s) {sorted({b for _, b in tally.known})}")


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
def test_zombie_after_teardown_and_dynamic_rerun_s3(bucket: str, algorithm: int | str) -> None:
    """The seams on S3 in one schedule: a zombie still writing when the teardown came commits after it (denied as
    failed), the cleared run recovers and commits; a re-run writes fewer partitions (their markers go) and its job
    commit dies after the withdrawal and mid-move, then resumes."""
    h = Lifecycle(Config(store="s3", algorithm=algorithm, mode="dynamic", tasks=2, partition_by=("p",),
                         values=lc.ESCAPED_VALUES), bucket=bucket)
    try:
        h.setup()
        h.start(n=1, task=0, parts=[["a%b"], ["s p"]])
        h.write(n=1)
        h.close(n=1)
        h.commit(n=1)
        h.start(n=2, task=1, parts=[["x/y"]])
        h.write(n=2)
        h.teardown()
        h.close(n=2)
        h.commit(n=2)                      # the zombie: recorded failed by the teardown
        h.setup()                          # the user clears the run
        h.start(n=3, task=0, parts=[["a%b"]])   # recovered (v1, magic) or runs again (v2)
        h.write(n=3)
        h.close(n=3)
        h.commit(n=3)
        h.start(n=4, task=1, parts=[["x/y"]])
        h.write(n=4)
        h.close(n=4)
        h.commit(n=4)
        h.commit_job()
        h.setup()                          # a clear after success: a new generation
        h.start(n=5, task=0, parts=[["ü€"]])
        h.write(n=5)
        h.close(n=5)
        h.commit(n=5)
        h.start(n=6, task=1, parts=[["ü€"]])
        h.write(n=6)
        h.close(n=6)
        h.commit(n=6)
        h.commit_job(point="commit_job.mid_move", nth=1)
        h.commit_job()
    finally:
        h.dispose()


# Found by the harness at 3f3371f, fixed in 2127eed.
@pytest.mark.parametrize("algorithm", [1, "magic"])
def test_stale_winner_asking_again_keeps_the_committed_data_s3(bucket: str, algorithm: int | str) -> None:
    """On S3 a v1 task's committed data stays in its attempt directory, and a magic task's is its pending uploads:
    the denial of the same try asking again after a clear removes them (v1) or aborts them (magic)."""
    h = Lifecycle(Config(store="s3", algorithm=algorithm, mode="append", tasks=1, partition_by=(), old_data=False),
                  bucket=bucket)
    try:
        h.setup()
        h.start(n=4, task=0, parts=[[]])
        h.write(n=4)
        h.close(n=4)
        h.commit(n=4)
        h.setup()
        h.recommit(n=4)
        h.commit_job()
    finally:
        h.dispose()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_paused_magic_commit_survives_the_teardown_s3(bucket: str) -> None:
    """A magic try stops right after claiming its commit (SIGSTOP at commit_task.after_claim, a real process); the
    failed run's teardown leaves it alone, pending uploads included; it wakes and its commit counts; the cleared
    run recovers it and commits. (Found from outside and fixed in e99579f: the teardown aborted its uploads.)"""
    from ..protocol.test_lifecycle_processes import ProcessLifecycle

    h = ProcessLifecycle(Config(store="s3", algorithm="magic", mode="append", tasks=1, partition_by=(),
                                old_data=False), bucket=bucket)
    try:
        h.setup()
        h.start(n=1, task=0, parts=[[]])
        h.write(n=1)
        h.close(n=1)
        h.pause_next("commit_task.after_claim@1")
        h.commit(n=1)
        h.teardown()
        h.resume(1)
        h.setup()
        h.start(n=2, task=0, parts=[[]])
        h.commit_job()
        assert h.events["resumed commit paused at commit_task.after_claim"] == 1
        assert h.events["start: recovered"] == 1
    finally:
        h.dispose()
