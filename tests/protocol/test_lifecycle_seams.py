"""Exactly-once at the seams of Airflow's lifecycle (issue 11): each test is a sequence that broke in practice.

- a zombie try that commits after the failed run's teardown removed its files (silent row loss);
- a commit whose writer-reported files are not in the attempt directory;
- a try killed with SIGKILL that nobody recorded;
- ``_SUCCESS`` markers that describe another directory: a dynamic re-run writing fewer partitions, an overwrite or
  dynamic commit in flight (or crashed) while the previous job's marker still reads as valid, a commit retry that
  wrote its marker back over a newer job's withdrawal.

The same sequences run on S3 (moto's server) in tests/s3/test_s3_seams.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import fsspec
import pytest

from airflow_commit_provider.protocol import (
    CommitDenied,
    FileOutputCommitter,
    TaskAttemptWriter,
    faults,
    make_committer,
    read_success_marker,
    run_task_attempt,
)
from airflow_commit_provider.protocol.publish.base import stored_paths

from . import scenario as sc

COMMIT_POINTS = [p for p in faults.POINTS if p.startswith("commit_job.")]


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    if request.param == "local":
        yield str(tmp_path / "out")
        return
    path = f"memory://seams-{uuid.uuid4().hex}/out"
    yield path
    fsspec.filesystem("memory").rm(path.split("://")[1].split("/")[0], recursive=True)


def produce(task, attempt):
    return lambda w: w.write(sc.task_table(task, attempt))


def zombie_after_teardown(c, tasks=4):
    """The issue's sequence up to the zombie's late commit; returns the CommitDenied it must get."""
    c.setup_job()
    for t in range(tasks - 1):
        run_task_attempt(c, t, 1, produce(t, 1))
    ta = c.setup_task(tasks - 1, 1)                      # try 1 of the last task: becomes a zombie
    w = TaskAttemptWriter(c, ta, partition_by=c.partition_by)
    w.write(sc.task_table(tasks - 1, 1))
    w.close()
    c.abort_job(keep_committed=True)                    # the failed run's teardown
    with pytest.raises(CommitDenied) as denied:
        c.commit_task(ta, w.rows, sizes=w.sizes)         # the zombie wakes up and commits late
    return denied.value


@pytest.mark.parametrize("algorithm", [1, 2])
def test_zombie_after_teardown_cannot_commit_and_loses_no_row(root, algorithm):
    c = make_committer(root, "j", algorithm=algorithm, mode="append", partition_by=["day"])
    denied = zombie_after_teardown(c)
    assert denied.attempt_failed and denied.winner is None
    c.setup_job()                                       # the user clears the run
    statuses = [run_task_attempt(c, t, 2, produce(t, 2)).status for t in range(sc.TASKS)]
    assert statuses[-1] == "committed", "the zombie's task is run again, not recovered from an empty record"
    assert statuses[:-1] == (["recovered"] * 3 if algorithm == 1 else ["committed"] * 3)
    manifest = c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
    assert manifest["totals"]["rows"] == sc.TASKS * sc.ROWS
    history = {t["task"]: t for t in manifest["tasks"]}
    assert "0.1" in history[sc.TASKS - 1]["failed_attempts"], "the teardown recorded the zombie's try as failed"


def test_commit_refused_when_a_reported_file_is_gone(root):
    c = FileOutputCommitter(root, "j", mode="append", partition_by=["day"])
    c.setup_job()
    ta = c.setup_task(0, 1)
    with TaskAttemptWriter(c, ta, partition_by=c.partition_by) as w:
        w.write(sc.task_table(0, 1))
    gone = sorted(w.rows)[0]
    stored = stored_paths(rel for rel, _ in c.store.list_files(ta.work_dir))   # flat on a local disk
    c.store.delete_file(f"{ta.work_dir}/{stored[gone]}")   # removed by someone outside the attempt
    with pytest.raises(CommitDenied, match="missing") as denied:
        c.commit_task(ta, w.rows, sizes=w.sizes)
    assert denied.value.attempt_failed
    assert c.recover_task(0) is None, "no record was written"
    assert run_task_attempt(c, 0, 2, produce(0, 2)).status == "committed"
    c.commit_job(1)
    sc.assert_exactly_once(sc.read_rows(root), tasks=1)


def test_commit_refused_when_a_reported_size_differs(root):
    c = FileOutputCommitter(root, "j", mode="append", partition_by=["day"])
    c.setup_job()
    ta = c.setup_task(0, 1)
    with TaskAttemptWriter(c, ta, partition_by=c.partition_by) as w:
        w.write(sc.task_table(0, 1))
    sizes = {rel: size + 1 for rel, size in w.sizes.items()}
    with pytest.raises(CommitDenied, match="bytes, not"):
        c.commit_task(ta, w.rows, sizes=sizes)


def test_a_new_try_records_the_killed_one(root):
    """A try killed before it could abort (SIGKILL, lost worker) is recorded failed by the next try, and its files
    go: ``_SUCCESS`` and the status view then show it."""
    c = FileOutputCommitter(root, "j", mode="append", partition_by=["day"])
    c.setup_job()
    killed = c.setup_task(0, 1)
    with TaskAttemptWriter(c, killed, partition_by=c.partition_by) as w:
        w.write(sc.task_table(0, 1))
    assert c.status()["tasks"][0]["unfinished_attempts"] == ["0.1"]
    assert run_task_attempt(c, 0, 2, produce(0, 2)).status == "committed"
    assert not c.store.exists(killed.work_dir), "the killed try's files were removed"
    assert c.status()["tasks"][0]["failed_attempts"] == ["0.1"]
    with pytest.raises(CommitDenied):
        c.commit_task(killed, w.rows, sizes=w.sizes)    # if it was a zombie after all, it cannot commit now
    manifest = c.commit_job(1)
    assert manifest["tasks"][0]["failed_attempts"] == ["0.1"]
    assert read_success_marker(root)["tasks"][0]["failed_attempts"] == ["0.1"]


def test_a_killed_try_is_recorded_with_a_real_sigkill(tmp_path):
    """The same with a real process killed by SIGKILL in the middle of writing, then the task's next try."""
    from .test_crash_matrix import spawn

    cfg = {"root": str(tmp_path / "out"), "work": str(tmp_path / "work"), "algorithm": 1, "mode": "append"}
    sc.committer(cfg).setup_job()
    proc = spawn("task", {**cfg, "task": 0, "attempt": 1}, "writer.after_file=kill@1")
    assert proc.returncode == -9, proc.stderr
    assert sc.run_task(cfg, 0, 2)["status"] == "committed"
    manifest = sc.committer(cfg).commit_job(1)
    assert manifest["tasks"][0]["failed_attempts"] == ["0.1"]
    sc.assert_exactly_once(sc.read_rows(cfg["root"]), tasks=1)


# ---------------------------------------------------------------------------------------------- markers (I9)
def two_partitions(task, attempt):
    return sc.task_table(task, attempt)                 # days d0 and d1


def one_partition(task, attempt):
    table = sc.task_table(task, attempt)
    return table.filter([d == "d1" for d in table.column("day").to_pylist()])


@pytest.mark.parametrize("algorithm", [1, 2])
def test_dynamic_rerun_writing_fewer_partitions_withdraws_their_markers(root, algorithm):
    c = make_committer(root, "daily", algorithm=algorithm, mode="dynamic", partition_by=["day"])
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(two_partitions(0, 1)))
    c.commit_job(1)
    assert sc.marker_dirs(root) == ["", "day=d0", "day=d1"]
    c.setup_job()                                       # the run is cleared after success: a new generation
    run_task_attempt(c, 0, 2, lambda w: w.write(one_partition(0, 2)))
    c.commit_job(1)
    assert sc.marker_dirs(root) == ["", "day=d1"], "day=d0 lost its files, so it loses its marker"
    assert [f for f in sc.visible_files(root) if f.startswith("day=d0")] == []
    fs, path = sc._fs(root)
    assert not fs.exists(f"{path}/day=d0"), "the emptied partition directory is removed"
    assert sc.assert_markers_tell_truth(root) == 2
    assert read_success_marker(f"{root}/day=d1", verify_files=True)["totals"]["rows"] == sc.ROWS // 2


def committed_previous_job(root, mode, algorithm=1):
    prev = make_committer(root, "previous", algorithm=algorithm, mode="append", partition_by=["day"])
    prev.setup_job()
    for t in range(2):
        run_task_attempt(prev, t, 1, produce(t + 10, 1))
    prev.commit_job(2)
    return prev


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("mode", ["overwrite", "dynamic", "append"])
@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_no_marker_lies_at_any_crash_point(root, point, mode, algorithm):
    """A job commit killed at every point over a target whose previous job left valid markers: whenever a marker
    reads as valid it lists exactly the visible files under it, and the resumed commit leaves consistent markers."""
    committed_previous_job(root, mode)
    assert sc.assert_markers_tell_truth(root) == 1
    c = make_committer(root, "next", algorithm=algorithm, mode=mode, partition_by=["day"])
    c.setup_job()
    for t in range(2):
        run_task_attempt(c, t, 1, produce(t, 1))
        sc.assert_markers_tell_truth(root)              # v2: each task commit changes the visible files
    faults.arm(point, "raise", 1)
    try:
        c.commit_job(2)
    except faults.InjectedFault:
        pass
    faults.disarm()
    sc.assert_markers_tell_truth(root)
    c.commit_job(2)
    assert sc.assert_markers_tell_truth(root) >= 1
    rows = sc.read_rows(root)
    sc.check_no_duplicates(rows)
    assert read_success_marker(root, verify_files=True)["job_id"] == "next"


def test_overwrite_v2_withdraws_the_old_marker_before_its_first_task_commit(root):
    committed_previous_job(root, "overwrite")
    c = make_committer(root, "next", algorithm=2, mode="overwrite", partition_by=["day"])
    c.setup_job()
    assert sc.marker_dirs(root) == [""], "setting up changes nothing visible"
    run_task_attempt(c, 0, 1, produce(0, 1))
    assert sc.marker_dirs(root) == [], "the old marker went before the new files became visible"


def test_retried_commit_of_an_older_job_does_not_put_its_marker_back(root):
    """Job A committed; job B's overwrite withdrew A's marker and died before publishing; A's commit task is
    retried (Airflow retries a commit whose process died after the commit): A must not write its marker back
    over a directory B is changing."""
    a = committed_previous_job(root, "overwrite")
    b = make_committer(root, "next", algorithm=1, mode="overwrite", partition_by=["day"])
    b.setup_job()
    run_task_attempt(b, 0, 1, produce(0, 1))
    faults.arm("commit_job.after_withdraw", "raise", 1)
    with pytest.raises(faults.InjectedFault):
        b.commit_job(1)
    faults.disarm()
    assert a.commit_job(2)["job_id"] == "previous", "the retry reports A's committed manifest"
    assert sc.marker_dirs(root) == []


def test_append_marker_lists_what_it_kept(root):
    committed_previous_job(root, "append")
    c = FileOutputCommitter(root, "next", mode="append", partition_by=["day"])
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    manifest = c.commit_job(1)
    marker = read_success_marker(root, verify_files=True)
    assert len(marker["retained"]) == 4 and marker["totals"]["files"] == 2
    assert manifest["diagnostics"]["retained_files"] == 4
    assert {f["path"] for f in marker["files"]} | {f["path"] for f in marker["retained"]} \
        == set(sc.visible_files(root))


def test_verify_files_refuses_an_unlisted_file(root):
    c = FileOutputCommitter(root, "j", mode="append", partition_by=["day"])
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    c.commit_job(1)
    fs, path = sc._fs(root)
    fs.pipe_file(f"{path}/day=d0/stranger.parquet", b"x")
    with pytest.raises(Exception, match="does not describe its directory"):
        read_success_marker(root, verify_files=True)


def test_v2_abort_removes_the_directories_it_empties(root):
    c = make_committer(root, "j", algorithm=2, mode="append", partition_by=["day"])
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    assert sc.visible_files(root)
    c.abort_job(keep_committed=True)
    assert sc.visible_files(root) == []
    fs, path = sc._fs(root)
    assert [p for p in fs.ls(path, detail=False) if not p.rstrip("/").rsplit("/", 1)[-1].startswith("_")] == []
    c.setup_job()
    assert run_task_attempt(c, 0, 2, produce(0, 2)).status == "committed", "a v2 commit is never recovered"
    c.commit_job(1)
    sc.assert_exactly_once(sc.read_rows(root), tasks=1)


def test_v2_strays_of_the_generation_are_swept_at_job_commit(root):
    """A v2 abort that died between a record's removal and its files' leaves visible files no record lists; the
    next commit of the generation removes them."""
    c = make_committer(root, "j", algorithm=2, mode="append", partition_by=["day"])
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    job = c.job_record()
    c.store.delete_file(c.layout.task_record(0, 0))      # the abort's first step, then it died
    c.setup_job()
    assert run_task_attempt(c, 0, 2, lambda w: w.write(one_partition(0, 2))).status == "committed"
    manifest = c.commit_job(1)
    assert manifest["deleted"]["files"] >= 1
    rows = sc.read_rows(root)
    assert {r["attempt"] for r in rows} == {2} and len(rows) == sc.ROWS // 2
    assert all(job.job_uuid in f for f in sc.visible_files(root))
    sc.assert_markers_tell_truth(root)



@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_v2_task_commit_never_replaces_a_visible_file(root, mode):
    """v2 publishes at task commit: a user-chosen file name equal to a visible file would replace it there and then
    (append: the earlier job's rows silently lost; overwrite then abort: old data gone though nothing committed).
    The commit is refused instead, the attempt recorded failed, nothing visible changed."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_commit_provider.protocol import InvalidOutputSpec

    def named_attempt(c, rows):
        ta = c.setup_task(0, 1)
        w = TaskAttemptWriter(c, ta)
        buf = io.BytesIO()
        pq.write_table(pa.table({"task": [0] * rows, "row": list(range(rows)), "attempt": [1] * rows}), buf)
        with w.open_file("data.parquet") as fh:
            fh.write(buf.getvalue())
        w.close()
        return ta, w

    first = make_committer(root, "first", algorithm=2, mode="append")
    first.setup_job()
    ta, w = named_attempt(first, 100)
    first.commit_task(ta, w.rows)
    first.commit_job(1)
    second = make_committer(root, "second", algorithm=2, mode=mode)
    second.setup_job()
    ta, w = named_attempt(second, 5)
    with pytest.raises(InvalidOutputSpec, match="would replace 1 visible file"):
        second.commit_task(ta, w.rows)
    assert len(sc.read_rows(root)) == 100, "the earlier job's rows are intact"
    assert second.abort_job()["aborted"]
    assert len(sc.read_rows(root)) == 100
    assert sc.assert_markers_tell_truth(root) == 1


def _paused_teardown(root, algorithm, purge):
    """A worker process that runs the failed run's teardown and stops itself (SIGSTOP) right after reading the
    job: a zombie teardown. Returns the process; the caller moves the lifecycle on, then resumes it."""
    import multiprocessing as mp

    def teardown():
        faults.arm("abort_job.after_read", "stop")
        make_committer(root, "j", algorithm=algorithm, mode="append", partition_by=["day"]).abort_job(
            keep_committed=not purge)

    proc = mp.get_context("fork").Process(target=teardown)
    proc.start()
    return proc


def _wait_stopped(pid):
    import time

    for _ in range(30000):  # the child reaches the point in about a second; bounded, not a timed assertion
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] in "TZ":   # stopped, or ended (the caller's checks say why)
                return
        time.sleep(0.01)
    raise AssertionError("the teardown never reached abort_job.after_read")


@pytest.mark.parametrize("algorithm,purge", [(2, False), (2, True), (1, True), (1, False)])
def test_a_zombie_teardown_waking_after_the_clear_stands_down(tmp_path, algorithm, purge):
    """The teardown reads the job, then is paused; the user clears the run, the tasks are recovered (or re-run)
    and the job commits; then the teardown wakes. It must not act on what it read (v2: delete the committed
    output; purge: delete the job record under a commit): it sees the job moved on and stands down."""
    import os
    import signal

    root = str(tmp_path / "out")
    c = make_committer(root, "j", algorithm=algorithm, mode="append", partition_by=["day"])
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, produce(t, 1))
    proc = _paused_teardown(root, algorithm, purge)
    _wait_stopped(proc.pid)
    c.setup_job()                                        # the clear
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 2, produce(t, 2))
    c.commit_job(sc.TASKS)
    os.kill(proc.pid, signal.SIGCONT)
    proc.join(60)
    assert proc.exitcode == 0
    sc.assert_exactly_once(sc.read_rows(root))
    assert read_success_marker(root, verify_files=True)["totals"]["rows"] == sc.TASKS * sc.ROWS


#: the failed run's teardown of job "j" in its own process (a Python started afresh: no state shared with the
#: test); it stops itself (SIGSTOP) at the fault point ``COMMIT_PROVIDER_FAULTS`` arms, and prints its state
_TEARDOWN = textwrap.dedent("""
    import sys
    from airflow_commit_provider.protocol import make_committer
    root, algorithm = sys.argv[1], sys.argv[2]
    algorithm = int(algorithm) if algorithm.isdigit() else algorithm
    extra = {"part_size": 5 * 2**20} if algorithm == "magic" else {}
    c = make_committer(root, "j", algorithm=algorithm, mode="append", partition_by=["day"], **extra)
    print("teardown", c.abort_job(keep_committed=True)["state"])
""")


def zombie_teardown_woken_after(c, move_on, dies: bool = False) -> str | None:
    """Application attempt 0 of job "j" commits all tasks but the last, and fails; its teardown, in its own
    process, stops past its last look at the job (``abort_job.after_uploads``), just before it writes its abort
    record; *move_on* runs (the lifecycle goes on without it); then the teardown wakes. Returns its state; with
    *dies*, it is killed (SIGKILL) right after the write (``abort_job.after_delete``) and returns nothing."""
    c.setup_job()
    for t in range(sc.TASKS - 1):
        run_task_attempt(c, t, 1, produce(t, 1))
    armed = "abort_job.after_uploads=stop" + (",abort_job.after_delete=kill" if dies else "")
    env = {**os.environ, faults.ENV_VAR: armed, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}
    teardown = subprocess.Popen([sys.executable, "-c", _TEARDOWN, c.store.url(), str(c.algorithm)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_stopped(teardown.pid)
        move_on()
    finally:
        os.kill(teardown.pid, signal.SIGCONT)
    said, err = teardown.communicate(timeout=300)
    if dies:
        assert teardown.returncode == -signal.SIGKILL, err[-2000:]
        return None
    assert teardown.returncode == 0 and said.startswith("teardown "), err[-2000:]
    return said.split()[1]


def clear(c):
    """The user clears the run: a new application attempt, every task recovered or run again."""
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 2, produce(t, 2))


def commit(c):
    clear(c)
    c.commit_job(sc.TASKS)


def purge_and_set_up(c):
    """Hadoop's abortJob by hand (the command the teardown's hint gives), then the run is cleared: a new
    generation, in application attempt 0 again (the purge removed every application attempt directory)."""
    assert c.abort_job()["aborted"]
    assert c.setup_job().app_attempt == 0


def temporary_files(c) -> list[str]:
    """The files under ``_temporary``; ``["_temporary/"]`` when it holds only directories (a local disk)."""
    fs, path = sc._fs(c.store.url())
    files = [p for p in sc.all_files(c.store.url()) if p.split("/")[0] == "_temporary"]
    return files or (["_temporary/"] if fs.exists(f"{path}/_temporary") else [])


#: what the lifecycle does while the teardown is paused: a clear (a newer application attempt), a clear and its job
#: commit (``_temporary/<job>`` removed), a purge and a new generation set up in the same application attempt number
MOVE_ON = {"clear": clear, "commit": commit, "purge_and_set_up": purge_and_set_up}


def check_zombie_teardown_left_nothing(c, moved_on: str) -> None:
    """After a teardown woken late (:func:`zombie_teardown_woken_after`): the status tells the live job, not the
    zombie's; the job then commits; nothing of either is left under ``_temporary``; every row once."""
    status = c.status()
    if moved_on == "commit":
        assert status["state"] == "committed"
        assert temporary_files(c) == [], "the zombie's abort record was left in the committed output"
        c.setup_job()                                    # a clear after success: the next generation
        status = c.status()
    assert status["state"] == "running" and status["aborted"] is None, \
        f"a live job reported aborted by a zombie teardown of {moved_on!r}: {status['aborted']}"
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 3, produce(t, 3))
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(c.store.url()))
    assert temporary_files(c) == []


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("moved_on", sorted(MOVE_ON))
def test_a_zombie_teardown_writing_its_record_late_leaves_no_stale_abort(tmp_path, algorithm, moved_on):
    """The teardown passed its last check that the job is still the one it read, then was paused; the run was
    cleared (and committed, or purged and set up again) meanwhile. Its abort record, written now, describes a run
    that no longer exists: it must neither be left in the output (re-creating ``_temporary/<job>``) nor make the
    status of the job that lives on say ``failed``."""
    root = str(tmp_path / "out")
    c = make_committer(root, "j", algorithm=algorithm, mode="append", partition_by=["day"])
    assert zombie_teardown_woken_after(c, lambda: MOVE_ON[moved_on](c)) == "superseded"
    check_zombie_teardown_left_nothing(c, moved_on)


@pytest.mark.parametrize("moved_on", ["clear", "purge_and_set_up"])
def test_a_late_abort_record_left_by_a_killed_teardown_misleads_no_one(tmp_path, moved_on):
    """Killed right after its late write, the teardown cannot take its record back: the record stays, in the old
    application attempt (a clear) or in the one the new generation reuses (a purge and a new set-up), but it is
    named after its own generation, so the live job's status does not read it, and its commit sweeps it."""
    root = str(tmp_path / "out")
    c = make_committer(root, "j", mode="append", partition_by=["day"])
    zombie_teardown_woken_after(c, lambda: MOVE_ON[moved_on](c), dies=True)
    assert any("/_aborted_" in p for p in temporary_files(c)), "the killed teardown's record is there"
    check_zombie_teardown_left_nothing(c, moved_on)


def killed_late_teardown_after_commit(c) -> None:
    """:func:`zombie_teardown_woken_after`, woken after the job committed and killed right after its late write:
    the one thing left under ``_temporary`` is its record, in the job directory it made again."""
    zombie_teardown_woken_after(c, lambda: commit(c), dies=True)
    left = temporary_files(c)
    assert len(left) == 1 and left[0].startswith("_temporary/j/0/_aborted_"), left
    assert c.status()["state"] == "committed"


def swept_by_the_next(c, sweeper: str) -> None:
    """After :func:`killed_late_teardown_after_commit`: the job's next teardown (a failed run's, or the purge by
    hand) or its next set-up (a clear after success: a new generation) removes the record and what it made; the
    next generation then runs clean."""
    if sweeper == "abort":
        assert c.abort_job(keep_committed=True)["state"] == "committed"
        assert temporary_files(c) == []
        c.setup_job()
    else:
        assert c.setup_job().generation == 1
        assert not [p for p in temporary_files(c) if "/_aborted_" in p]
    check_zombie_teardown_left_nothing(c, "next generation")


@pytest.mark.parametrize("sweeper", ["abort", "setup"])
def test_the_next_setup_or_abort_sweeps_a_late_abort_record_after_the_commit(tmp_path, sweeper):
    """A teardown's record that a kill left in the committed job's re-made directory goes at the job's next
    teardown or set-up."""
    c = make_committer(str(tmp_path / "out"), "j", mode="append", partition_by=["day"])
    killed_late_teardown_after_commit(c)
    swept_by_the_next(c, sweeper)
