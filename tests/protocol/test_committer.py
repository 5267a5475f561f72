"""The committer's contract, in-process, on the local disk and on fsspec's memory file system."""

from __future__ import annotations

import logging

import json
import uuid

import fsspec
import pytest

from airflow_commit_provider.protocol import (
    CommitDenied,
    FileOutputCommitter,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    JobConfigMismatch,
    JobIncomplete,
    TaskAttemptWriter,
    read_success_marker,
    run_task_attempt,
)

from . import scenario as sc


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    if request.param == "local":
        yield str(tmp_path / "out")
        return
    path = f"memory://test-{uuid.uuid4().hex}/out"
    yield path
    fsspec.filesystem("memory").rm(path.split("://")[1].split("/")[0], recursive=True)


def make(root, job="job", **kw):
    kw.setdefault("mode", "append")
    kw.setdefault("partition_by", ["day"])
    return FileOutputCommitter(root, job, **kw)


def write_attempt(c, task, attempt):
    ta = c.setup_task(task, attempt)
    with TaskAttemptWriter(c.store, ta, partition_by=c.partition_by) as w:
        w.write(sc.task_table(task, attempt))
    return ta, w.rows


def produce(task, attempt):
    return lambda w: w.write(sc.task_table(task, attempt))


@pytest.mark.parametrize("algorithm", [1, 2])
def test_commit_read_back(root, algorithm):
    c = make(root, algorithm=algorithm)
    c.setup_job()
    for t in range(sc.TASKS):
        assert run_task_attempt(c, t, 1, produce(t, 1)).status == "committed"
    manifest = c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
    assert manifest["totals"] == {"files": 8, "bytes": manifest["totals"]["bytes"], "rows": 24, "tasks": 4,
                                  "partitions": 2}
    assert read_success_marker(root, verify_files=True)["job_uuid"] == manifest["job_uuid"]
    assert manifest["diagnostics"]["visibility"] == ("job-commit" if algorithm == 1 else "task-commit")
    assert bool(manifest["diagnostics"]["warnings"]) == (algorithm == 2)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_winner_idempotent_loser_denied_and_cleaned(root, algorithm):
    c = make(root, algorithm=algorithm)
    c.setup_job()
    a, rows_a = write_attempt(c, 0, 1)
    first = c.commit_task(a, rows_a)
    b, rows_b = write_attempt(c, 0, 2)  # a zombie's successor that started after try 1 had committed
    assert c.commit_task(a, rows_a) == first, "the winner asking again gets the same record"
    assert not c.needs_task_commit(a)
    with pytest.raises(CommitDenied) as denied:
        c.commit_task(b, rows_b)
    assert denied.value.winner["attempt"] == 1 and not denied.value.attempt_failed
    assert not c.store.exists(b.work_dir), "a denied attempt's files are removed"
    c.commit_job(1)
    assert {r["attempt"] for r in sc.read_rows(root)} == {1}


def test_failed_attempt_cannot_commit_later(root):
    c = make(root)
    c.setup_job()
    a, rows = write_attempt(c, 0, 1)
    assert c.abort_task(a) is True
    assert not c.store.exists(a.work_dir)
    with pytest.raises(CommitDenied) as denied:
        c.commit_task(a, rows)
    assert denied.value.attempt_failed and denied.value.winner is None
    # another attempt of the task still commits
    assert run_task_attempt(c, 0, 2, produce(0, 2)).status == "committed"


def test_abort_after_commit_started_keeps_the_commit(root):
    c = make(root)
    c.setup_job()
    a, rows = write_attempt(c, 0, 1)
    c.commit_task(a, rows)
    assert c.abort_task(a) is False
    c.commit_job(1)
    assert len(sc.read_rows(root)) == sc.ROWS


def test_recovery_does_not_run_the_task_again(root):
    c = make(root)
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    assert c.setup_job().app_attempt == 1
    calls = []
    outcome = run_task_attempt(c, 0, 2, lambda w: calls.append(1))
    assert outcome.status == "recovered" and outcome.record["recovered_from_app"] == 0 and not calls
    run_task_attempt(c, 1, 2, produce(1, 2))
    assert c.setup_job().app_attempt == 2  # recovered twice: the pointer still leads to app 0's data
    manifest = c.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)
    assert {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]} == {0: 0, 1: 1}


def test_job_commit_names_missing_tasks_and_changes_nothing(root):
    c = make(root)
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    run_task_attempt(c, 2, 1, produce(2, 1))
    before = sc.all_files(root)
    with pytest.raises(JobIncomplete) as exc:
        c.commit_job(5)
    assert exc.value.missing == [1, 3, 4] and "1, 3, 4" in str(exc.value)
    # nothing changed but the failed commit's summary beside the job's records (issue 21), shown by status()
    assert sorted(set(sc.all_files(root)) - set(before)) == [c.layout.commit_failure]
    assert set(before) <= set(sc.all_files(root))
    failure = c.status()["commit_failure"]
    assert failure["stage"] == "recovery" and failure["error"] == "JobIncomplete" and "1, 3, 4" in failure["message"]
    assert "recovery" in failure["durations"]
    run_task_attempt(c, 1, 1, produce(1, 1))
    run_task_attempt(c, 3, 1, produce(3, 1))
    run_task_attempt(c, 4, 1, produce(4, 1))
    c.commit_job(5)
    assert "commit_failure" not in c.status() and not any("_commit_failure" in f for f in sc.all_files(root))


def test_a_failed_stage_is_logged_with_its_error_and_time(root, caplog):
    """Every stage, task side included, is timed and logged by one base, in success and in failure."""
    c = make(root)
    c.setup_job()
    with caplog.at_level(logging.INFO, logger="airflow_commit_provider.protocol.timing"):
        run_task_attempt(c, 0, 1, produce(0, 1))
        with pytest.raises(JobIncomplete):
            c.commit_job(2)
    lines = [r.getMessage() for r in caplog.records]
    for stage in ("setup_task", "write", "commit_task"):
        assert any(f"task 0 attempt 1: {stage}: " in line and " ms" in line for line in lines), (stage, lines)
    failed = [r for r in caplog.records if "recovery failed after" in r.getMessage()]
    assert failed and failed[0].levelno == logging.WARNING and "JobIncomplete" in failed[0].getMessage()


def test_zero_tasks_commit_an_empty_output(root):
    c = make(root)
    c.setup_job()
    manifest = c.commit_job(0)
    assert manifest["totals"]["files"] == 0 and manifest["totals"]["rows"] == 0
    assert read_success_marker(root)["files"] == []
    assert sc.visible_files(root) == []


def test_error_mode_refuses_non_empty_target_and_writes_nothing(tmp_path):
    root = str(tmp_path / "out")
    sc.write_old_data(root)
    before = sc.all_files(root)
    with pytest.raises(InvalidOutputSpec, match="already holds 2 data file"):
        make(root, mode="error").setup_job()
    assert sc.all_files(root) == before


def test_error_mode_on_empty_target(root):
    c = make(root, mode="error")
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    c.commit_job(1)
    assert len(sc.read_rows(root)) == sc.ROWS


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("mode", ["append", "overwrite", "dynamic"])
def test_modes_against_old_data(root, mode, algorithm):
    sc.write_old_data(root)
    c = make(root, mode=mode, algorithm=algorithm)
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, produce(t, 1))
    if mode != "append":
        assert len(sc.visible_files(root)) >= 2, "old data stays until job commit"
    c.commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root), old=sc.old_rows_expected(mode))
    if mode == "dynamic":
        for day in ("d0", "d1"):
            assert read_success_marker(f"{root}/day={day}", verify_files=True)["partition"] == f"day={day}"


@pytest.mark.parametrize("old_data,renamed", [(False, 2), (True, 1)])
def test_v1_renames_new_partition_directories_whole(tmp_path, old_data, renamed):
    """v1 on a local disk: a partition the output does not have yet appears in one directory rename (both tasks'
    files at once); one it has already (day=d0 of the old data) is merged file by file next to the old files."""
    root = str(tmp_path / "out")
    if old_data:
        sc.write_old_data(root)
    c = make(root, algorithm=1)
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, produce(t, 1))
    manifest = c.commit_job(sc.TASKS)
    assert manifest["diagnostics"]["directories_renamed"] == renamed
    sc.assert_exactly_once(sc.read_rows(root), old=sc.old_rows_expected("append") if old_data else None)
    assert read_success_marker(root, verify_files=True)["totals"]["files"] == 2 * sc.TASKS
    assert not (tmp_path / "out" / "_temporary").exists()


def test_v1_never_renames_a_directory_holding_a_stray_file(tmp_path):
    """A file in the committed directory that no planned task record lists (here planted by hand) keeps its
    partition from being renamed whole: the planned files are moved one by one and the stray stays hidden."""
    import pyarrow.parquet as pq

    root = str(tmp_path / "out")
    c = make(root, algorithm=1)
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, produce(t, 1))
    stray = tmp_path / "out" / c.layout.committed_dir(c.job.current_app_attempt()) / "day=d1" / "stray.parquet"
    pq.write_table(sc.task_table(77, 1).drop_columns(["day"]), str(stray))
    manifest = c.commit_job(sc.TASKS)
    assert manifest["diagnostics"]["directories_renamed"] == 1  # day=d0 only
    sc.assert_exactly_once(sc.read_rows(root))
    assert "day=d1/stray.parquet" not in sc.visible_files(root)


def test_v1_stray_in_a_nested_partition_keeps_only_that_branch_on_the_file_path(tmp_path):
    """Two partition levels, a stray in a=1/b=2: a=1 cannot be renamed whole, so its clean sibling a=1/b=3 is
    renamed into a freshly created a=1, a=2 whole, and a=1/b=2 goes file by file without the stray."""
    root = str(tmp_path / "out")
    c = make(root, algorithm=1, partition_by=())
    c.setup_job()
    parts = [{"a": 1, "b": 2}, {"a": 1, "b": 3}, {"a": 2, "b": 2}]

    def write(task):
        def produce(w):
            for part in parts:
                with w.open_file(partition=part, extension="dat") as fh:
                    fh.write(f"{task} {part}".encode())
        return produce

    for t in range(2):
        run_task_attempt(c, t, 1, write(t))
    stray = tmp_path / "out" / c.layout.committed_dir(c.job.current_app_attempt()) / "a=1" / "b=2" / "stray.dat"
    stray.write_bytes(b"not planned")
    manifest = c.commit_job(2)
    assert manifest["diagnostics"]["directories_renamed"] == 2  # a=1/b=3 and a=2
    visible = sc.visible_files(root)
    assert visible == sorted(f["path"] for f in manifest["files"]) and len(visible) == 6
    assert not any(p.endswith("stray.dat") for p in visible)


@pytest.mark.parametrize("mode", ["append", "overwrite", "dynamic", "error"])
def test_rerun_after_commit_replaces_the_jobs_own_output(root, mode):
    """A clear of a DAG run whose job committed recomputes; re-running never duplicates, even in append."""
    other = make(root, job="other-job")
    other.setup_job()
    run_task_attempt(other, 0, 1, lambda w: w.write(sc.task_table(50, 1)))
    other.commit_job(1)
    c = make(root, mode=mode if mode != "error" else "append")
    for generation, attempt in ((0, 1), (1, 2)):
        ctx = c.setup_job()
        assert ctx.generation == generation
        for t in range(sc.TASKS):
            run_task_attempt(c, t, attempt, produce(t, attempt))
        c.commit_job(sc.TASKS)
    rows = [r for r in sc.read_rows(root) if r["task"] != 50]
    sc.assert_exactly_once(rows)
    assert {r["attempt"] for r in rows} == {2}, "the new generation replaced the old one"
    other_rows = [r for r in sc.read_rows(root) if r["task"] == 50]
    assert len(other_rows) == (0 if mode in ("overwrite", "dynamic") else sc.ROWS)  # same partitions
    log = json.loads(c.store.read_bytes("_commits/job.json"))
    assert log["generation"] == 1 and len(log["history"]) == 1


def test_zombie_of_older_application_attempt_is_ignored(root):
    c = make(root)
    c.setup_job()
    zombie, zombie_rows = write_attempt(c, 0, 1)  # app 0, never commits in time
    c.setup_job()  # the DAG run is cleared: app 1
    run_task_attempt(c, 0, 2, produce(0, 2))
    with pytest.raises(CommitDenied, match="application attempt 0"):  # the zombie wakes up and asks to commit
        c.commit_task(zombie, zombie_rows)
    assert not c.store.exists(zombie.work_dir)
    c.commit_job(1)
    assert {r["attempt"] for r in sc.read_rows(root)} == {2}
    with pytest.raises(JobAlreadyCommitted):  # a zombie after cleanup cannot start
        c.setup_task(0, 3)
    assert run_task_attempt(c, 0, 3, produce(0, 3)).status == "already_committed"
    assert {r["attempt"] for r in sc.read_rows(root)} == {2}


@pytest.mark.parametrize("fails", [False, True], ids=["asks-to-commit", "its-code-fails"])
@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_zombie_woken_after_the_job_committed_leaves_nothing_behind(root, algorithm, fails):
    """A try set up before its job committed and cleaned up writes on when it wakes (its writes re-create the
    job's directories), then asks to commit, or its own code fails (it is aborted): what it wrote is removed,
    with the directories it re-created, and it records nothing there (a claim in a committed job's re-created
    directories is hidden garbage nothing would remove). Asking, it is told what was committed; the output is
    unchanged either way."""
    c = make(root, algorithm=algorithm)
    c.setup_job()
    zombie = FileOutputCommitter(root, "job", mode="append", partition_by=["day"], algorithm=algorithm)

    def wake_after_the_commit(w):
        # the try was set up; meanwhile its retry committed the task and the job committed and cleaned up
        assert run_task_attempt(c, 0, 2, produce(0, 2)).status == "committed"
        c.commit_job(1)
        assert not c.store.exists("_temporary")
        w.write(sc.task_table(0, 1))   # the zombie writes on
        if fails:
            raise ValueError("the zombie's code fails")

    if fails:
        with pytest.raises(ValueError, match="the zombie's code fails"):
            run_task_attempt(zombie, 0, 1, wake_after_the_commit)
    else:
        out = run_task_attempt(zombie, 0, 1, wake_after_the_commit)
        assert out.status == "already_committed" and out.record["attempt"] == 2 and out.ran_callable
    assert not c.store.exists("_temporary"), c.store.list_files("_temporary")
    committed = sorted(f["path"] for f in read_success_marker(root)["files"])
    assert sorted(sc.visible_files(root)) == committed, "nothing of the zombie became visible"
    assert {r["attempt"] for r in sc.read_rows(root)} == {2}


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_zombie_woken_after_the_job_committed_never_touches_the_next_generation(tmp_path, algorithm):
    """A zombie of a committed generation leaves (its files and the directories it re-created go) while the next
    generation is set up and running: set up just after the zombie found the job committed and before it left.
    Nothing of the new generation goes (its application attempt, records, a running attempt's files), and the
    new generation commits exactly its own rows."""
    from airflow_commit_provider.protocol.stores import LocalStore

    root = str(tmp_path / "out")
    c = make(root, algorithm=algorithm)
    c.setup_job()
    seen: dict = {}

    class NextGenerationStore(LocalStore):
        """Sets up the next generation when the zombie reads the commit log (it has found no job record)."""

        def read_bytes(self, rel):
            data = super().read_bytes(rel)
            if rel == c.layout.commit_log and not seen:
                g2 = make(root, algorithm=algorithm)
                seen["uuid"] = g2.setup_job().job_uuid
                assert run_task_attempt(g2, 1, 1, produce(1, 1)).status == "committed"
                seen["g2"], seen["running"] = g2, write_attempt(g2, 0, 1)
                # all but the zombie's own files (in its generation's first application attempt)
                seen["files"] = {f for f in sc.all_files(root) if not f.startswith(c.layout.attempt_dir(0, 0, 1))}
            return data

    zombie = make(NextGenerationStore(root, durable=False), algorithm=algorithm)

    def wake_after_the_commit(w):
        assert run_task_attempt(c, 0, 2, produce(0, 2)).status == "committed"
        c.commit_job(1)
        w.write(sc.task_table(0, 1))

    out = run_task_attempt(zombie, 0, 1, wake_after_the_commit)
    assert out.status == "already_committed" and out.record["attempt"] == 2
    assert seen["files"] <= set(sc.all_files(root)), seen["files"] - set(sc.all_files(root))
    g2, (ta, rows) = seen["g2"], seen["running"]
    assert ta.app_attempt > 0, "the new generation starts after the committed one's application attempts"
    g2.commit_task(ta, rows)
    assert g2.commit_job(2)["job_uuid"] == seen["uuid"]
    assert sorted((r["task"], r["attempt"]) for r in sc.read_rows(root)) == sorted(
        [(0, 1)] * sc.ROWS + [(1, 1)] * sc.ROWS), "the new generation's rows, once each"
    assert not c.store.exists("_temporary"), c.store.list_files("_temporary")


def test_commit_job_twice_is_idempotent(root):
    c = make(root)
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    first = c.commit_job(1)
    again = c.commit_job(1)
    assert again["job_uuid"] == first["job_uuid"] and again["files"] == first["files"]
    assert len(sc.read_rows(root)) == sc.ROWS


def test_config_mismatch_is_refused(root):
    make(root, algorithm=1).setup_job()
    with pytest.raises(JobConfigMismatch, match="algorithm"):
        make(root, algorithm=2).setup_task(0, 1)


def test_abort_job_refuses_once_commit_started(root):

    c = make(root, mode="overwrite")
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    sc.crash_after_plan(c)
    assert c.abort_job()["state"] == "committing"
    c.commit_job(1)
    assert len(sc.read_rows(root)) == sc.ROWS


@pytest.mark.parametrize("algorithm", [1, 2])
def test_abort_job_restores_target(root, algorithm):
    sc.write_old_data(root)
    before = sc.all_files(root)
    c = make(root, algorithm=algorithm)
    c.setup_job()
    for t in range(2):
        run_task_attempt(c, t, 1, produce(t, 1))
    result = c.abort_job()
    assert result["aborted"]
    assert sc.all_files(root) == before
    assert c.abort_job()["state"] == "absent"


def test_write_low_level_files_and_names(root):
    c = make(root, partition_by=())
    c.setup_job()

    def write(w):
        with w.open_file(extension="csv") as fh:
            fh.write(b"a,b\n1,2\n")
        with w.open_file("custom.json", partition={"day": "d1"}) as fh:
            fh.write(b"{}")
        with pytest.raises(InvalidOutputSpec, match="traversal"):
            w.open_file("../escape.txt")

    run_task_attempt(c, 0, 1, write)
    manifest = c.commit_job(1)
    names = sorted(f["path"] for f in manifest["files"])
    assert names[0] == "day=d1/custom.json" and names[1].startswith("part-00000-") and names[1].endswith("-c000.csv")
    assert manifest["totals"]["rows"] is None  # rows of non-Parquet files are unknown


def test_injected_crash_at_every_point_in_process(root):
    """The memory file system cannot be shared with another process, so its crash test raises in-process."""
    from airflow_commit_provider.protocol import faults

    reached = 0
    points = [p for p in faults.POINTS if not p.startswith("abort_job")]
    for point in points:
        sub = f"{root}/{point}"
        cfg = {"root": sub, "work": "", "algorithm": 1, "mode": "overwrite"}
        sc.write_old_data(sub)
        cfg["work"] = _workdir()
        sc.phase_prior(cfg)
        faults.arm(point, "raise", 2 if point.endswith("mid_move") or point == "writer.after_file" else 1)
        try:
            sc.phase_main(cfg, 11)
        except faults.InjectedFault:
            reached += 1
        faults.disarm()
        sc.phase_retry(cfg, 21)
        sc.assert_exactly_once(sc.read_rows(sub), old=set())
    assert reached >= len(points) - 3


def _workdir() -> str:
    import tempfile

    return tempfile.mkdtemp()


@pytest.mark.parametrize("algorithm", [1, 2])
def test_soft_abort_keeps_committed_tasks_for_recovery(root, algorithm):
    c = make(root, algorithm=algorithm)
    c.setup_job()
    run_task_attempt(c, 0, 1, produce(0, 1))
    ta, _rows = write_attempt(c, 1, 1)  # never commits
    result = c.abort_job(keep_committed=True)
    assert result["kept_committed_tasks"] == ([0] if algorithm == 1 else [])
    assert not c.store.exists(ta.work_dir)
    assert sc.visible_files(root) == [], "nothing of a failed job stays visible"
    c.setup_job()  # the failed DAG run is cleared
    calls = []
    outcome = run_task_attempt(c, 0, 2, lambda w: (calls.append(1), w.write(sc.task_table(0, 2))))
    assert outcome.status == ("recovered" if algorithm == 1 else "committed")
    assert len(calls) == (0 if algorithm == 1 else 1)
    run_task_attempt(c, 1, 2, produce(1, 2))
    c.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)


def test_status_follows_the_job_through_its_states(root):
    """What the UI shows: running, failed (soft abort), committing (plan fixed), committed, with attempts."""

    c = make(root)
    assert c.status()["state"] == "absent"
    c.setup_job()

    def fails(w):
        w.write(sc.task_table(0, 1))
        raise RuntimeError("user code failed")

    with pytest.raises(RuntimeError):
        run_task_attempt(c, 0, 1, fails)
    loser, loser_rows = write_attempt(c, 0, 3)
    run_task_attempt(c, 0, 2, produce(0, 2))
    with pytest.raises(CommitDenied):
        c.commit_task(loser, loser_rows)
    status = c.status()
    assert status["state"] == "running"
    task = status["tasks"][0]
    assert (task["attempt"], task["failed_attempts"], task["denied_attempts"]) == (2, ["0.1"], ["0.3"])
    assert c.abort_job(keep_committed=True)["kept_committed_tasks"] == [0]
    assert c.status()["state"] == "failed"
    c.setup_job()
    sc.crash_after_plan(c)
    assert c.status()["state"] == "committing"
    c.commit_job(1)
    done = c.status()
    assert done["state"] == "committed" and done["totals"]["rows"] == sc.ROWS
    assert {"moves", "deletes", "commit_log", "total"} <= set(done["durations"]), \
        "the committed view shows the job-commit stages up to _SUCCESS (cleanup comes after it)"
