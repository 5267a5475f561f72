"""Many shards per task instance (``operators/shards.py``) in real worker processes.

- a task instance killed (SIGKILL, ``os._exit``) after some of its shards committed: its retry calls the user code
  of the other shards only, and the job commits every row exactly once;
- a zombie try paused (SIGSTOP) at a fault point inside one shard, resumed (SIGCONT) after its retry committed every
  shard (before and after the job commit): fenced shard by shard, it commits nothing and its rows are nowhere;
- a shard's ordinary failure does not stop the others; the retry runs only the failed one; a bad specification of
  any shard is raised as itself (the operator fails such a try without retries);
- the numbering: shard ``s`` of task instance ``i`` is protocol task ``i * N + s``;
- the shard cells of the fault matrix (local disk, SIGKILL) and a few random schedules (``tests/schedules.py``).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from airflow_commit_provider.operators.shards import (ShardsFailed, run_shards, run_shards_together, shard_tasks,
                                                        task_instance_of)
from airflow_commit_provider.protocol import InvalidOutputSpec, faults, read_success_marker
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE

from . import scenario as sc
from . import shard_scenario as ss

SHARDS = 4
INSTANCES = 2


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def cfg(request, tmp_path):
    return {"root": str(tmp_path / "out"), "work": str(tmp_path / "work"), "algorithm": request.param,
            "mode": "overwrite", "shards": SHARDS, "instances": INSTANCES, "shard_threads": 1}


def setup(cfg: dict) -> None:
    os.makedirs(cfg["work"], exist_ok=True)
    sc.committer(cfg).setup_job()


def commit_and_check(cfg: dict) -> dict:
    manifest = sc.committer(cfg).commit_job(INSTANCES * SHARDS)
    sc.assert_exactly_once(sc.read_rows(cfg["root"]), tasks=INSTANCES * SHARDS)
    assert read_success_marker(cfg["root"], verify_files=True)["totals"]["tasks"] == INSTANCES * SHARDS
    return manifest


@pytest.mark.parametrize("point", ss.SHARD_POINTS)
def test_crash_matrix_of_a_sharded_task_instance(cfg, point):
    """The shard cells of ``python -m tests.fault_matrix`` on the local disk, SIGKILL (the command adds ``exit``
    and S3)."""
    assert ss.crash_cell({**cfg, "mode": "overwrite"}, point, "kill") == "pass"


def test_random_schedules_of_sharded_task_instances(tmp_path):
    """``COMMIT_SHARD_SCHEDULES`` (default 3, ~20 s) of ``python -m tests.schedules --shards N``'s schedules."""
    from . import shard_schedules as sh

    count = int(os.environ.get("COMMIT_SHARD_SCHEDULES", "3"))
    first = int(os.environ.get("COMMIT_SCHEDULES_SEED", "0"))
    for seed in range(first, first + count):
        violation, schedule = sh.run_schedule(seed, str(tmp_path))
        assert violation is None, f"seed {seed} {schedule.cfg}: {violation}\n" + "\n".join(schedule.steps)


def test_numbering():
    assert list(shard_tasks(3, 10)) == list(range(30, 40))
    assert task_instance_of(37, 10) == (3, 7) and task_instance_of(0, 1) == (0, 0)


@pytest.mark.parametrize("kill", ["kill", "exit"])
def test_a_killed_task_instance_is_retried_only_for_its_uncommitted_shards(cfg, kill):
    setup(cfg)
    ss.run_instance(cfg, 0, 1)
    proc = ss.spawn(cfg, 1, 1, f"commit_task.after_record={kill}@2")   # instance 1 dies after 2 shard commits
    assert proc.returncode == (-signal.SIGKILL if kill == "kill" else FAULT_EXIT_CODE), proc.stderr
    committed = ss.committed_tasks(cfg)
    assert committed == {0, 1, 2, 3, 4, 5}, "instance 0 and the first two shards of instance 1"
    before = sc.calls(cfg)
    result = ss.run_instance(cfg, 1, 2)
    ran = sc.calls(cfg) - before
    assert ran == {6: 1, 7: 1}, "the retry runs the user code of the uncommitted shards only"
    assert result["ran_shards"] == [2, 3] and result["statuses"] == {"already_committed": 2, "committed": 2}
    rows = sc.read_rows(cfg["root"]) if cfg["algorithm"] == 1 else None
    assert rows in (None, [])
    manifest = commit_and_check(cfg)
    by_task = {r["task"]: r["attempt"] for r in sc.read_rows(cfg["root"])}
    assert [by_task[t] for t in range(8)] == [1, 1, 1, 1, 1, 1, 2, 2]
    assert manifest["totals"]["tasks"] == 8


@pytest.mark.parametrize("wake", ["before_job_commit", "after_job_commit"])
def test_a_zombie_try_is_fenced_shard_by_shard(cfg, wake):
    setup(cfg)
    ss.run_instance(cfg, 0, 1)
    # try 1 of instance 1 pauses after shard 1 wrote its file, before its task commit: shard 0 is committed
    zombie = ss.spawn(cfg, 1, 1, "commit_task.before_record=stop@2", wait=False)
    try:
        _wait_stopped(zombie.pid)
        assert ss.committed_tasks(cfg) == {0, 1, 2, 3, 4}
        before = sc.calls(cfg)
        result = ss.run_instance(cfg, 1, 2)   # the retry: the scheduler declared try 1 a zombie
        assert sc.calls(cfg) - before == {5: 1, 6: 1, 7: 1}
        assert result["ran_shards"] == [1, 2, 3]
        if wake == "after_job_commit":
            commit_and_check(cfg)
        calls_before_wake = sc.calls(cfg)
        os.kill(zombie.pid, signal.SIGCONT)
        out, _ = zombie.communicate(timeout=60)
    finally:
        if zombie.poll() is None:
            zombie.kill()
    report = json.loads(out.splitlines()[-1])
    assert sc.calls(cfg) == calls_before_wake, "the zombie calls no user code once woken"
    if wake == "before_job_commit":
        # woken, the zombie's shard 1 is denied (recorded failed by the retry); the rest find their tasks committed
        if report["ok"]:
            statuses = {s["task"]: s["status"] for s in report["result"]["shards"]}
            assert statuses[5] == "denied" and "committed" not in statuses.values(), report
        else:
            assert "CommitDenied" in report["error"], report
    else:
        # after the job commit every shard is told what the job committed, and what the zombie wrote is gone
        assert report["ok"], report
        statuses = {s["task"]: s["status"] for s in report["result"]["shards"]}
        # shard 0 (task 4) it committed itself before it paused; the others the job committed from the retry
        assert statuses == {4: "committed", 5: "already_committed", 6: "already_committed",
                            7: "already_committed"}, report
        assert not os.path.exists(os.path.join(cfg["root"], "_temporary")), "the zombie left nothing behind"
    if wake == "before_job_commit":
        commit_and_check(cfg)
    rows = sc.read_rows(cfg["root"])
    sc.assert_exactly_once(rows, tasks=INSTANCES * SHARDS)
    assert {r["attempt"] for r in rows if r["task"] >= 5} == {2}, "no row of the zombie's shards"


def _wait_stopped(pid: int, timeout: float = 60) -> None:
    """Until the process is stopped (SIGSTOP by its own fault point): its state in /proc is 'T'."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never reached its fault point")


def test_a_failed_shard_does_not_stop_the_others_and_alone_is_retried(cfg):
    setup(cfg)
    cfg = {**cfg, "fail_tasks": [1], "fail_attempts": [1], "shard_threads": 2}
    with pytest.raises(ShardsFailed, match=r"1 of 4 shards failed \(tasks 1\)") as failed:
        ss.run_instance(cfg, 0, 1)
    assert isinstance(failed.value.__cause__, RuntimeError) and sorted(failed.value.failed) == [1]
    assert ss.committed_tasks(cfg) == {0, 2, 3}
    before = sc.calls(cfg)
    ss.run_instance(cfg, 0, 2)
    assert sc.calls(cfg) - before == {1: 1}
    ss.run_instance(cfg, 1, 1)
    commit_and_check(cfg)


def test_a_bad_specification_of_one_shard_is_raised_as_itself(cfg):
    setup(cfg)

    def produce(shard, task, writer):
        if shard == 2:
            raise InvalidOutputSpec("no such column")
        if shard == 3:
            raise RuntimeError("transient")
        writer.write(sc.task_table(task, 1))

    with pytest.raises(InvalidOutputSpec, match="no such column"):
        run_shards(lambda: sc.committer(cfg), 0, SHARDS, 1, produce, fatal=(InvalidOutputSpec,))


def test_shards_in_a_pool_run_at_once(cfg):
    """With shard_threads=4 the four shards of a task instance are in their user code at the same moment (each
    waits for all of them at a barrier, which would time out if they ran one after another)."""
    import threading

    setup(cfg)
    barrier = threading.Barrier(SHARDS, timeout=30)

    def produce(shard, task, writer):
        barrier.wait()
        writer.write(sc.task_table(task, 1))

    result = run_shards(lambda: sc.committer(cfg), 0, SHARDS, 1, produce, threads=SHARDS).to_dict()
    assert result["statuses"] == {"committed": SHARDS}
    faults.disarm()


# ---------------------------------------------------------------- shard_commit="together": one task per instance
def together(cfg: dict, **more) -> dict:
    return {**cfg, "shard_commit": "together", "shard_threads": SHARDS, **more}


def commit_together(cfg: dict) -> dict:
    """The job commit of a stage whose shards committed together: one protocol task per task instance, and every
    shard's rows (the ``task`` column is the shard's ``task_number``) once."""
    manifest = sc.committer(cfg).commit_job(INSTANCES)
    sc.assert_exactly_once(sc.read_rows(cfg["root"]), tasks=INSTANCES * SHARDS)
    assert read_success_marker(cfg["root"], verify_files=True)["totals"]["tasks"] == INSTANCES
    return manifest


def test_shards_committed_together_are_one_task_whose_files_each_shard_wrote(cfg):
    """Four shards in a pool of four (each waits at a barrier for the others: they write side by side), one task
    commit per task instance: one record holding every shard's file, names ``part-<instance>-<uuid>-s<shard>-c000``
    (the task's own prefix, which recovery and cleanup find a task's files by), and the job commit takes each row
    once."""
    import threading

    cfg = together(cfg)
    setup(cfg)
    barrier = threading.Barrier(SHARDS, timeout=30)

    def produce(shard, task, writer):
        barrier.wait()
        writer.write(sc.task_table(task, 1))

    outcome = run_shards_together(sc.committer(cfg), 1, SHARDS, 1, produce, threads=SHARDS)
    assert (outcome.status, outcome.task, outcome.files) == ("committed", 1, 2 * SHARDS)   # a file per day
    record = sc.committer(cfg).recover_task(1)
    names = sorted(f["path"].rsplit("/", 1)[-1] for f in record["files"])
    assert sorted({n.split("-")[-2] for n in names}) == [f"s{s:03d}" for s in range(SHARDS)], names
    assert len({n.rsplit("-s", 1)[0] for n in names}) == 1 and names[0].startswith("part-00001-")
    ss.run_instance(cfg, 0, 1)
    commit_together(cfg)


def test_a_failed_shard_fails_the_whole_try_and_its_retry_writes_every_shard_again(cfg):
    """Shard 1 of instance 0 fails its first try: the try commits nothing (its other shards' files are removed
    with the attempt), the error is raised as itself, and the retry writes all four shards and commits them once."""
    cfg = together(cfg, fail_tasks=[1], fail_attempts=[1])
    setup(cfg)
    with pytest.raises(RuntimeError, match="user code of task 1 attempt 1 failed"):
        ss.run_instance(cfg, 0, 1)
    assert ss.committed_tasks({**cfg, "shards": 1}) == set()
    assert not [f for f in sc.all_files(cfg["root"]) if f.endswith(".parquet") and "/1/" in f.replace("_", "/")]
    before = sc.calls(cfg)
    result = ss.run_instance(cfg, 0, 2)
    assert sc.calls(cfg) - before == {t: 1 for t in range(SHARDS)}
    assert (result["status"], result["files"]) == ("committed", 2 * SHARDS)
    ss.run_instance(cfg, 1, 1)
    commit_together(cfg)
    by_task = {r["task"]: r["attempt"] for r in sc.read_rows(cfg["root"])}
    assert by_task == {**{t: 2 for t in range(SHARDS)}, **{t: 1 for t in range(SHARDS, 2 * SHARDS)}}


@pytest.mark.parametrize("kill", ["kill", "exit"])
def test_a_task_instance_killed_between_its_shards_files_is_written_whole_by_its_retry(cfg, kill):
    """A worker process killed after its shards wrote 3 files (SIGKILL, ``os._exit``), before its one task commit:
    nothing of it is committed; the retry recovers nothing, writes every shard again and the job commit holds each
    row once, none of the killed try's."""
    cfg = together(cfg, shard_threads=1)
    setup(cfg)
    proc = ss.spawn(cfg, 0, 1, f"writer.after_file={kill}@3")
    assert proc.returncode == (-signal.SIGKILL if kill == "kill" else FAULT_EXIT_CODE), proc.stderr
    assert ss.committed_tasks({**cfg, "shards": 1}) == set()
    before = sc.calls(cfg)
    ss.run_instance(cfg, 0, 2)
    assert sc.calls(cfg) - before == {t: 1 for t in range(SHARDS)}
    ss.run_instance(cfg, 1, 1)
    commit_together(cfg)
    assert {r["attempt"] for r in sc.read_rows(cfg["root"]) if r["task"] < SHARDS} == {2}
    assert not os.path.exists(os.path.join(cfg["root"], "_temporary"))


def test_a_committed_task_instance_is_recovered_whole_by_the_next_application_attempt(cfg):
    """The run cleared after instance 0 committed (a new application attempt): instance 0 is recovered, no shard
    of it runs again; instance 1 runs; each row once."""
    cfg = together(cfg)
    setup(cfg)
    ss.run_instance(cfg, 0, 1)
    setup(cfg)   # the clear: application attempt 1
    before = sc.calls(cfg)
    assert ss.run_instance(cfg, 0, 2)["status"] == "recovered"
    ss.run_instance(cfg, 1, 2)
    assert sc.calls(cfg) - before == {t: 1 for t in range(SHARDS, 2 * SHARDS)}
    commit_together(cfg)


@pytest.mark.parametrize("clash", ["name", "schema"])
def test_shards_that_clash_are_refused_before_anything_commits(cfg, clash):
    """Two shards of one task that wrote one name (one overwrote the other's file), or Parquet of two schemas,
    make the try fail with InvalidOutputSpec naming it; nothing is committed."""
    import pyarrow as pa

    cfg = together(cfg, shard_threads=1)
    setup(cfg)

    def produce(shard, task, writer):
        if clash == "name":
            with writer.open_file("same.dat") as fh:
                fh.write(b"x")
        else:
            writer.write(pa.table({"x": [1] if shard else ["a"], "day": ["d0"]}))

    match = r"already opened by another part \(shard\)" if clash == "name" else "wrote different schemas"
    with pytest.raises(InvalidOutputSpec, match=match):
        run_shards_together(sc.committer(cfg), 0, SHARDS, 1, produce, threads=1)
    assert ss.committed_tasks({**cfg, "shards": 1}) == set()


class _Interrupted(BaseException):
    """What Airflow's timeout is: a BaseException raised in the task's main thread by a signal handler."""


def test_an_interruption_abandons_the_shards_and_aborts_only_once_they_stopped(cfg):
    """Airflow's timeout fires in the main thread while shard 0 keeps writing (a new one-row file per write):
    the writer is abandoned, so the shard's next write raises; the interruption is raised only once no shard
    thread runs, after the attempt's abort, so nothing a shard wrote is left under ``_temporary`` (before, the
    abort ran while the shard went on writing, and its files outlived the job commit). The retry commits."""


    cfg = together(cfg, shard_threads=2)
    setup(cfg)
    stopped, running = [], set()

    def produce(shard, task, writer):
        running.add(shard)
        try:
            write(shard, task, writer)
        finally:
            running.discard(shard)

    def write(shard, task, writer):
        writer.write(sc.task_table(task, 1).slice(0, 1))
        if shard == 1:
            return
        _timeout_now()   # while this shard goes on writing
        _write_until_abandoned(writer, task, shard, stopped, 10_000)

    def run():
        with pytest.raises(_Interrupted):
            run_shards_together(sc.committer(cfg), 0, 2, 1, produce, threads=2, max_rows_per_file=1)
        assert running == set(), "no shard still runs when the interruption is raised"

    _interrupting(run)
    assert stopped == [0], "the abandoned writer stopped the shard at its next write"
    assert not [f for f in sc.all_files(cfg["root"]) if f.endswith(".parquet")], "nothing of the try is left"
    ss.run_instance({**cfg, "shards": SHARDS}, 0, 2)
    ss.run_instance({**cfg, "shards": SHARDS}, 1, 1)
    commit_together(cfg)
    assert not os.path.exists(os.path.join(cfg["root"], "_temporary"))


def test_a_failed_shard_stops_the_shards_not_started_whichever_finishes_first(cfg):
    """Shard 1 fails at once while shard 0 is still writing (it waits until shard 1 has failed): the shards not
    started yet (2 and 3, with two threads) never start, although shard 0 ends after shard 1 failed. A
    deterministic error of one shard is raised over another's transient one (no retry could cure the try)."""
    import threading

    cfg = together(cfg, shard_threads=2)
    setup(cfg)
    ran, failed = [], threading.Event()

    def produce(shard, task, writer):
        ran.append(shard)
        if shard == 1:
            failed.set()
            raise RuntimeError("transient")
        assert failed.wait(30)
        if shard == 0:
            raise InvalidOutputSpec("a bad specification")

    with pytest.raises(InvalidOutputSpec, match="a bad specification"):
        run_shards_together(sc.committer(cfg), 0, SHARDS, 1, produce, threads=2, fatal=(InvalidOutputSpec,))
    assert sorted(ran) == [0, 1], "shards 2 and 3 were never started"


def _interrupting(test):
    """Run *test* with SIGUSR1 raising :class:`_Interrupted` in the main thread (Airflow's timeout)."""
    import signal

    def interrupt(signum, frame):
        raise _Interrupted("timed out")

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        return test()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _write_until_abandoned(writer, task: int, shard: int, stopped: list, most: int) -> None:
    """One-row writes, at most *most*, until the writer is abandoned: then *shard* goes into *stopped*."""
    from airflow_commit_provider.protocol.tasks.writer import AttemptAbandoned

    try:
        for _ in range(most):
            writer.write(sc.task_table(task, 1).slice(0, 1))
    except AttemptAbandoned:
        stopped.append(shard)
        raise


def _timeout_now() -> None:
    """Airflow's timeout, now: to the main thread itself, whose wait a signal to the process may not interrupt
    when the kernel hands it to another thread."""
    import signal
    import threading

    signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)


def test_a_shard_streaming_into_a_raw_file_stops_at_its_next_write_after_an_interruption(cfg):
    """A shard writing a file of its own (``open_file``) chunk by chunk: once interrupted, its next ``write``
    raises, so the interruption ends the try at once and nothing of it is left."""
    from airflow_commit_provider.protocol.tasks.writer import AttemptAbandoned

    cfg = together(cfg, shard_threads=2)
    setup(cfg)
    stopped = []

    def produce(shard, task, writer):
        with writer.open_file(extension="bin") as fh:
            fh.write(b"x")
            if shard == 0:
                _timeout_now()
                try:
                    for _ in range(1_000_000):
                        fh.write(b"x" * 100)
                except AttemptAbandoned:
                    stopped.append(shard)
                    raise

    def run():
        with pytest.raises(_Interrupted):
            run_shards_together(sc.committer(cfg), 0, 2, 1, produce, threads=2)

    _interrupting(run)
    assert stopped == [0]
    assert not [f for f in sc.all_files(cfg["root"]) if f.endswith(".bin")], "nothing of the try is left"


def test_an_interruption_waits_for_a_stuck_shard_only_its_grace(cfg):
    """A shard stuck in its own code (it never calls the writer) cannot be stopped: the interruption is raised
    once the grace has run out, with the shard still running, so Airflow's timeout still ends the try."""
    import threading

    cfg = together(cfg, shard_threads=2)
    setup(cfg)
    release, raised = threading.Event(), []

    def produce(shard, task, writer):
        if shard == 0:
            _timeout_now()
            assert release.wait(60)
        else:
            writer.write(sc.task_table(task, 1))

    def run():
        with pytest.raises(_Interrupted):
            run_shards_together(sc.committer(cfg), 0, 2, 1, produce, threads=2, interrupt_grace=0.5)
        raised.append(not release.is_set())

    try:
        _interrupting(run)
    finally:
        release.set()
    assert raised == [True], "raised while the stuck shard still ran"


def test_a_failed_shard_abandons_the_running_ones_and_its_own_error_fails_the_try(cfg):
    """Shard 1 fails while shard 0 writes on: the writer is abandoned, so shard 0 stops at its next write instead
    of running to its end, and the try fails with shard 1's error, not with the abandonment it caused."""
    import threading


    cfg = together(cfg, shard_threads=2)
    setup(cfg)
    started, stopped = threading.Event(), []

    def produce(shard, task, writer):
        if shard == 1:
            assert started.wait(30)
            raise RuntimeError("shard 1 failed")
        started.set()
        _write_until_abandoned(writer, task, shard, stopped, 100_000)

    with pytest.raises(RuntimeError, match="shard 1 failed"):
        run_shards_together(sc.committer(cfg), 0, 2, 1, produce, threads=2, max_rows_per_file=1000)
    assert stopped == [0]
