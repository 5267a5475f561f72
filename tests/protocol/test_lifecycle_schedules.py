"""Random schedules over the whole Airflow lifecycle (tests/protocol/lifecycle.py), and every violation they found.

CI runs ``COMMIT_SCHEDULES`` schedules (default 100) per algorithm on the memory store and half as many on the
local disk, ``COMMIT_SCHEDULE_STEPS`` (default 40) steps each, seeds from ``COMMIT_SCHEDULES_SEED`` (default 0):
about 30 s. The long run is ``python -m tests.schedules`` (see there). A failure prints its seed and the shrunk
schedule as a plain test, ready to paste below.

The regression tests are the minimal schedules the harness found, one per violation, named after the broken rule,
with the commit where each was found and fixed. One still open would be ``xfail(strict=True)`` (when its fix lands
it XPASSes, which fails, and the marker goes), and a random schedule that hits a known open bug (see
:data:`lifecycle.KNOWN_OPEN`) ends its test as xfail naming it; any other violation fails the test.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import (
    CommitDenied,
    FileOutputCommitter,
    TaskAttemptWriter,
    run_task_attempt,
)

from . import lifecycle as lc
from .lifecycle import Config, Lifecycle

COUNT = int(os.environ.get("COMMIT_SCHEDULES", "100"))
#: schedules per table format (a Delta schedule of 25 steps takes ~1 s, an Iceberg one ~2 s)
TABLE_COUNT = int(os.environ.get("COMMIT_TABLE_SCHEDULES", "8"))
TABLE_STEPS = int(os.environ.get("COMMIT_TABLE_SCHEDULE_STEPS", "25"))
STEPS = int(os.environ.get("COMMIT_SCHEDULE_STEPS", "40"))
SEED = int(os.environ.get("COMMIT_SCHEDULES_SEED", "0"))


def run_random(store: str, count: int, **overrides: object) -> None:
    tally = lc.run_many(store, count, first_seed=SEED, steps=STEPS, known=lc.known_open, **overrides)
    print(f"{store} {overrides}: {tally.schedules} schedules, {tally.steps} steps")
    assert not tally.failures, lc.describe(tally.failures[0], shrink_it=False)
    if tally.known:
        bugs = sorted({bug for _, bug in tally.known})
        pytest.xfail(f"{len(tally.known)} schedule(s) hit known open bug(s) {bugs}, first seed "
                     f"{tally.known[0][0].seed}")


@pytest.mark.parametrize("algorithm", [1, 2])
def test_random_schedules_memory(algorithm: int) -> None:
    run_random("memory", COUNT, algorithm=algorithm)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_random_schedules_local(algorithm: int) -> None:
    run_random("local", max(1, COUNT // 2), algorithm=algorithm)


@pytest.mark.parametrize("audit", ["checks", "data", "approval"])
def test_random_schedules_audited(audit: str) -> None:
    """An audited stage (a third of every random run's schedules are too): a failed audit refuses the tasks it
    blames for recovery, the job commit refuses every verdict but a passing one of exactly its commits (approved,
    with an approval), and the data callable reads exactly the commits the job commit would publish."""
    run_random("memory", max(1, COUNT // 4), audit=audit)


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_random_schedules_table(table_format: str) -> None:
    """The lifecycle against a Delta or Iceberg table: the format's reader sees the committed state exactly."""
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[table_format])
    tally = lc.run_many(table_format, TABLE_COUNT, first_seed=SEED, steps=TABLE_STEPS, known=lc.known_open)
    print(f"{table_format}: {tally.schedules} schedules, {tally.steps} steps")
    assert not tally.failures, lc.describe(tally.failures[0], shrink_it=False)


# ------------------------------------------------------------------------------------------------------------------
# Found by the table schedules on Delta, fixed on the branch that added them (issue 24).
def test_delta_dynamic_replaces_a_partition_whose_value_is_escaped() -> None:
    """A dynamic overwrite of p='x/y' (directory p=x%2Fy) kept the old rows there: Delta's log holds the path
    URI-encoded once more, so the partition never matched the one written."""
    pytest.importorskip("deltalake")
    h = Lifecycle(Config(store="delta", algorithm=1, mode="dynamic", tasks=1, partition_by=("p",),
                         values=lc.ESCAPED_VALUES))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[["x/y"]])
        h.write(n=1)
        h.close(n=1)
        h.commit(n=1)
        h.commit_job()
    finally:
        h.dispose()


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_table_mode_error_clear_after_success_replaces_its_own_rows(table_format: str) -> None:
    """Mode error: a clear after success (the next generation) was refused because the table held the job's own
    rows, which it replaces."""
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[table_format])
    h = Lifecycle(Config(store=table_format, algorithm=1, mode="error", tasks=1, partition_by=(), old_data=False))
    try:
        h.setup()
        h.start(n=7, task=0, parts=[[]])
        h.write(n=7)
        h.close(n=7)
        h.commit(n=7)
        h.commit_job()
        h.setup()
    finally:
        h.dispose()


# ------------------------------------------------------------------------------------------------------------------
# The sequence that broke in practice (issue 11), in the protocol's own words. Found at 8dc47df, fixed in cd5887d.
def tbl(task: int, rows: int = 10) -> pa.Table:
    return pa.table({"task": pa.array([task] * rows, pa.int32()), "row": pa.array(range(rows), pa.int32())})


def test_zombie_after_teardown_cannot_commit_an_empty_record(tmp_path) -> None:
    import pyarrow.dataset as ds

    root = str(tmp_path / "out")
    c = FileOutputCommitter(root, "j", algorithm=1, mode="append")
    c.setup_job()
    for t in range(3):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(tbl(t)))
    ta = c.setup_task(3, 1)
    w = TaskAttemptWriter(c, ta)
    w.write(tbl(3))
    w.close()                                   # try 1 of task 3: a zombie
    c.abort_job(keep_committed=True)            # the failed run's teardown
    sizes = getattr(w, "sizes", None)
    with pytest.raises(CommitDenied) as denied:  # the zombie commits late
        c.commit_task(ta, w.rows, **({"sizes": sizes} if sizes is not None else {}))
    assert denied.value.winner is None and denied.value.attempt_failed
    c.setup_job()                               # the user clears the run
    statuses = [run_task_attempt(c, t, 2, lambda w, t=t: w.write(tbl(t))).status for t in range(4)]
    assert statuses == ["recovered"] * 3 + ["committed"]
    c.commit_job(4)
    assert ds.dataset(root, format="parquet").to_table().num_rows == 40


# ------------------------------------------------------------------------------------------------------------------
# Minimal schedules found by the harness at 8dc47df (before the issue-11 core fixes), all fixed in cd5887d.
def test_teardown_records_an_unclosed_try_failed() -> None:
    """The brief's bug in its smallest form (v2): a try still writing when the teardown removed its directory
    committed an empty record (0 files) once it closed."""
    h = Lifecycle(Config(store="memory", algorithm=2, mode="append", tasks=1, partition_by=(), old_data=False))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[[]])
        h.write(n=1)
        h.teardown(purge=False)
        h.close(n=1)
        h.commit(n=1)
    finally:
        h.dispose()


def test_a_newer_try_records_the_older_one_failed() -> None:
    """setup_task of try 6 must record try 1 (same task, same application attempt, not committed) failed: its late
    commit is denied as failed, not as a loser to try 6."""
    h = Lifecycle(Config(store="memory", algorithm=1, mode="overwrite", tasks=1, partition_by=(), old_data=False))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[[]])
        h.write(n=1)
        h.start(n=6, task=0, parts=[[]])
        h.write(n=6)
        h.close(n=6)
        h.commit(n=6)
        h.close(n=1)
        h.commit(n=1)
    finally:
        h.dispose()


def test_v2_teardown_then_the_winner_asks_again() -> None:
    """A v2 teardown removed try 5's record and visible files; try 5 asking again (allowed to a winner) then
    committed an empty record, which the next try would have recovered."""
    h = Lifecycle(Config(store="memory", algorithm=2, mode="append", tasks=1, partition_by=(), old_data=False))
    try:
        h.setup()
        h.start(n=5, task=0, parts=[[]])
        h.write(n=5)
        h.close(n=5)
        h.commit(n=5)
        h.teardown(purge=False)
        h.recommit(n=5)
    finally:
        h.dispose()


@pytest.mark.parametrize("algorithm", [1, 2])
def test_append_marker_lists_the_files_it_keeps(algorithm: int) -> None:
    """I9: in append mode the root _SUCCESS listed only the job's files, not the old ones still visible."""
    h = Lifecycle(Config(store="memory", algorithm=algorithm, mode="append", tasks=1, partition_by=()))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[[]])
        h.write(n=1)
        h.close(n=1)
        h.commit(n=1)
        h.commit_job()
    finally:
        h.dispose()


@pytest.mark.parametrize("mode, point", [("append", "commit_job.mid_delete"), ("error", "commit_job.after_moves")])
def test_rerun_withdraws_the_marker_before_moving(mode: str, point: str) -> None:
    """I9: a re-run's job commit (a new generation) that died after its first move left the previous generation's
    _SUCCESS in place, describing files that were no longer (only) there."""
    h = Lifecycle(Config(store="memory", algorithm=1, mode=mode, tasks=1, partition_by=(), old_data=False))
    try:
        h.setup()
        h.start(n=2, task=0, parts=[[]])
        h.write(n=2)
        h.close(n=2)
        h.commit(n=2)
        h.commit_job()
        h.setup()
        h.start(n=4, task=0, parts=[[]])
        h.write(n=4)
        h.close(n=4)
        h.commit(n=4)
        h.commit_job(point=point, nth=1)
        h.commit_job()
    finally:
        h.dispose()


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_v2_rerun_task_commit_withdraws_the_marker(mode: str) -> None:
    """I9, v2: the re-run's task commit made its file visible under the previous generation's root _SUCCESS."""
    h = Lifecycle(Config(store="memory", algorithm=2, mode=mode, tasks=1, partition_by=(), old_data=False))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[[]])
        h.write(n=1)
        h.close(n=1)
        h.commit(n=1)
        h.commit_job()
        h.setup()
        h.start(n=9, task=0, parts=[[]])
        h.write(n=9)
        h.close(n=9)
        h.commit(n=9)
    finally:
        h.dispose()


def test_v2_dynamic_rerun_task_commit_withdraws_the_partition_marker() -> None:
    """I9, v2 dynamic: the re-run's task commit added a file to p='s p' under that partition's _SUCCESS."""
    h = Lifecycle(Config(store="memory", algorithm=2, mode="dynamic", tasks=1, partition_by=("p",), old_data=False,
                         values=lc.ESCAPED_VALUES))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[["a%b"], ["s p"]])
        h.write(n=1)
        h.close(n=1)
        h.commit(n=1)
        h.commit_job()
        h.setup()
        h.start(n=7, task=0, parts=[["s p"]])
        h.write(n=7)
        h.close(n=7)
        h.commit(n=7)
    finally:
        h.dispose()


@pytest.mark.parametrize("algorithm", [1, 2])
def test_dynamic_rerun_with_fewer_partitions_removes_their_markers(algorithm: int) -> None:
    """I9, dynamic: the re-run wrote only p='ü€'; it deleted the previous generation's files of p='s p' but left
    that partition's _SUCCESS listing them."""
    h = Lifecycle(Config(store="memory", algorithm=algorithm, mode="dynamic", tasks=1, partition_by=("p",),
                         old_data=False, values=lc.ESCAPED_VALUES))
    try:
        h.setup()
        h.start(n=4, task=0, parts=[["s p"]])
        h.write(n=4)
        h.close(n=4)
        h.commit(n=4)
        h.commit_job()
        h.setup()
        h.start(n=24, task=0, parts=[["ü€"]])
        h.write(n=24)
        h.close(n=24)
        h.commit(n=24)
        h.commit_job()
    finally:
        h.dispose()


# ------------------------------------------------------------------------------------------------------------------
# Found by the harness at 3f3371f, fixed in 2127eed (the v2 teardown removes adopting records too; a stale winner's
# denial never removes a committed attempt's directory).
@pytest.mark.parametrize("clear", ["start", "commit_job"])
def test_v2_teardown_removes_adopted_records_too(clear: str) -> None:
    """v2: try 4 committed in application attempt 0; a clear (attempt 1) adopted it (a recovering try, or a job
    commit's recovery that then failed); the teardown withdrew try 4's commit (record, visible files) but left
    attempt 1's adopted record pointing at it. Recovery then returns a commit whose files are gone: in append mode
    job commit fails for ever (CorruptRecord: committed v2 files missing), whatever is retried or cleared."""
    h = Lifecycle(Config(store="memory", algorithm=2, mode="append", tasks=1, partition_by=(), old_data=False))
    try:
        h.setup()
        h.start(n=4, task=0, parts=[[]])
        h.write(n=4)
        h.close(n=4)
        h.commit(n=4)
        h.setup()
        if clear == "start":
            h.start(n=8, task=0, parts=[[]])             # recovered
        else:
            h.commit_job(point="commit_job.after_recovery", nth=1)
        h.teardown(purge=False)
        h.start(n=10, task=0, parts=[[]])                # must run, not recover a withdrawn commit
        h.write(n=10)
        h.close(n=10)
        h.commit(n=10)
        h.commit_job()
    finally:
        h.dispose()


def test_stale_winner_asking_again_keeps_the_committed_data() -> None:
    """memory (and S3) v1, magic: the committed data of a v1 task stays in the attempt's directory (no rename on
    these stores). Try 4 committed in application attempt 0, the run was cleared (attempt 1), and try 4 asked again
    (commit_task promises a winner its record). It is now a zombie of an older attempt, denied, and the denial
    removes "its files": the committed data that attempt 1 recovers. Job commit then fails for ever
    (CorruptRecord: the data was deleted outside the protocol)."""
    h = Lifecycle(Config(store="memory", algorithm=1, mode="append", tasks=1, partition_by=(), old_data=False))
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


# ------------------------------------------------------------------------------------------------------------------
# Found at 34b2158 by the SIGKILL schedules (python -m tests.schedules --processes, seeds 164 and 230); fixed by
# TaskAttempts.withdrawn_files (issue 19). The same with real processes and every kill point between the record and
# the files: test_lifecycle_processes.py::test_a_v2_teardown_killed_between_a_record_and_its_files_needs_one_clear.
def test_v2_teardown_killed_between_record_and_files_does_not_block_the_rerun(tmp_path) -> None:
    """v2: the failed run's teardown dies after removing task 0's record but before its visible files. The user
    clears the run once: every try of task 0 used to be refused as a clobber ("would replace 1 visible file"),
    because the stray carries the name every try of the task writes in this generation, until another teardown
    swept it. Now the try recognises the files of its own task's withdrawn commit, commits over them, and the job
    commits with that try's rows only."""
    import pyarrow.dataset as ds

    from airflow_commit_provider.protocol import faults

    root = str(tmp_path / "out")
    c = FileOutputCommitter(root, "j", algorithm=2, mode="append")
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(tbl(0).append_column("attempt", pa.array([1] * 10, pa.int32()))))

    faults.arm("abort_job.after_task_record")                      # the teardown dies between record and files
    try:
        with pytest.raises(faults.InjectedFault):
            c.abort_job(keep_committed=True)
    finally:
        faults.disarm()
    c.setup_job()                                                    # the user clears the run
    outcome = run_task_attempt(c, 0, 2, lambda w: w.write(tbl(0).append_column("attempt",
                                                                               pa.array([2] * 10, pa.int32()))))
    assert outcome.status == "committed"
    c.commit_job(1)
    table = ds.dataset(root, format="parquet").to_table()
    assert table.num_rows == 10 and set(table.column("attempt").to_pylist()) == {2}


# ------------------------------------------------------------------------------------------------------------------
# Found by the audited schedules (issue 35), fixed on the branch that added them.
def test_v2_task_an_audit_refused_runs_again_in_the_next_application_attempt() -> None:
    """Algorithm 2 published task 0's files at its task commit; the audit failed and refused that commit for
    recovery; the next application attempt ran the task again, and its commit was refused ("would replace 1
    visible file(s)": the same names, task and generation), on every clear: the stage was stuck unless a teardown
    withdrew the files first. A commit recovery declines as refused is now superseded, as one made for other
    inputs: the new try replaces its files."""
    h = Lifecycle(Config(store="memory", algorithm=2, mode="append", tasks=1, partition_by=(), old_data=False,
                         audit="checks"))
    try:
        h.setup()
        h.start(n=5, task=0, parts=[[]])   # try 5 writes ok = -1 (lifecycle.is_bad)
        h.write(n=5)
        h.close(n=5)
        h.commit(n=5)
        h.audit()
        assert h.job.refused == {0: lc.Rec(5, 0)}
        h.setup()
        h.start(n=15, task=0, parts=[[]])
        h.write(n=15)
        h.close(n=15)
        h.commit(n=15)
        assert h.tries[15].stage == "committed"
        h.audit()
        h.commit_job()
        assert h.events["commit_job: committed"] == 1 and h.S == h.rows_of([lc.Rec(15, 1)])
    finally:
        h.dispose()
