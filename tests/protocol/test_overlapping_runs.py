"""Two runs of one job (issue 31): the protocol driven as the operators drive it, each run's committer working for
its DAG run (``CommitConfig.owner``), the scheduler's answer about the other run given as ``run_finished``.

Overlap is refused or serialised, never interleaved (DESIGN.md, section 10): a setup refuses while another run
owns the job's current application attempt and has not ended; a run that ended is taken over (its commits
recovered); a run's late tasks never work in another run's attempt. Every test ends with a run that commits alone,
its rows read back with pyarrow exactly once.
"""

from __future__ import annotations

import os

import pytest

from airflow_commit_provider.protocol import GenerationPurged, OverlappingRun, RunOwner, make_committer, run_task_attempt

from . import scenario as sc

A = RunOwner("daily", "scheduled__2024-05-01", 0)
B = RunOwner("daily", "manual__2024-05-02", 0)


def committer(root: str, owner: RunOwner | None, mode: str, algorithm: int | str = 1):
    kw = {"part_size": 5 * 2**20} if algorithm == "magic" else {}
    return make_committer(root, sc.JOB, algorithm=algorithm, mode=mode, partition_by=["day"], owner=owner, **kw)


def write(c, task: int, attempt: int, calls: list[tuple[int, int]]) -> dict:
    def produce(writer) -> None:
        calls.append((task, attempt))
        writer.write(sc.task_table(task, attempt))

    return run_task_attempt(c, task, attempt, produce).to_dict()


def job_files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_setup_refuses_while_the_run_owning_the_job_has_not_ended(tmp_path, mode):
    root = str(tmp_path / "out")
    a, b, calls = committer(root, A, mode), committer(root, B, mode), []
    a.setup_job()
    write(a, 0, 1, calls)
    before = job_files(root)
    for verdict, says in ((False, "has not finished"), (None, "could not be read")):
        with pytest.raises(OverlappingRun, match="being written by DAG run 'scheduled__2024-05-01'") as exc:
            b.setup_job(run_finished=lambda other, v=verdict: v)
        assert says in str(exc.value) and "max_active_runs=1" in str(exc.value) and exc.value.owner == A
    assert job_files(root) == before, "a refused setup changes nothing"
    assert b.status()["owner"] == A.to_dict(), "the job's status names the run to wait for"
    write(a, 1, 1, calls)   # A goes on undisturbed in its own attempt
    a.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)
    assert calls == [(0, 1), (1, 1)]


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_run_that_ended_is_taken_over_and_its_late_tasks_write_nothing(tmp_path, mode):
    """Before the rule, A's late write of task 1 took "the newest" attempt, B's, with B's try number: it
    committed into B's attempt, and B's own try of task 1 then reported A's rows as its own."""
    take_over(str(tmp_path / "out"), mode)


def take_over(root: str, mode: str, algorithm: int | str = 1) -> None:
    """A commits task 0 and ends (marked failed) without its teardown; B's setup takes the job over; A's late
    write, commit and teardown refuse or stand down; B recovers A's task 0, runs task 1 and commits."""
    a, b, calls = committer(root, A, mode, algorithm), committer(root, B, mode, algorithm), []
    a.setup_job()
    write(a, 0, 1, calls)
    asked: list[RunOwner] = []
    job = b.setup_job(run_finished=lambda other: asked.append(other) or True)   # A was marked failed meanwhile
    assert asked == [A] and job.app_attempt == 1
    with pytest.raises(OverlappingRun, match="owned by DAG run 'manual__2024-05-02'.*this write is refused"):
        write(a, 1, 1, calls)
    with pytest.raises(OverlappingRun, match="this job commit is refused"):
        a.commit_job(2)
    assert a.abort_job(keep_committed=True)["state"] == "superseded", "A's teardown leaves B's attempt alone"
    assert write(b, 0, 1, calls)["status"] == "recovered", "what A committed is recovered, not recomputed"
    assert write(b, 1, 1, calls)["status"] == "committed"
    manifest = b.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)
    assert calls == [(0, 1), (1, 1)] and manifest["app_attempt"] == 1


def test_the_job_records_decide_when_the_scheduler_cannot(tmp_path):
    """A's teardown recorded its abort: A has ended, whatever the scheduler (not) says."""
    root = str(tmp_path / "out")
    a, b, calls = committer(root, A, "append"), committer(root, B, "append"), []
    a.setup_job()
    write(a, 0, 1, calls)
    assert a.abort_job(keep_committed=True)["aborted"]
    b.setup_job(run_finished=lambda other: None)
    write(b, 0, 2, calls)
    write(b, 1, 2, calls)
    b.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)


def test_the_advice_abort_the_other_runs_job_gets_out(tmp_path, capsys):
    """A's workers are gone for good but its run is still "running": the refusal's way out is the command line's
    purge of the job with --force (an abort that works for no run; without it the command refuses a job whose run
    it cannot see ended); B's setup then starts the job afresh, and A's late tasks write nothing."""
    from airflow_commit_provider.cli import main

    root = str(tmp_path / "out")
    a, b, calls = committer(root, A, "overwrite"), committer(root, B, "overwrite"), []
    a.setup_job()
    write(a, 0, 1, calls)
    with pytest.raises(OverlappingRun, match="abort_job\\(\\) of a committer built without an owner"):
        b.setup_job(run_finished=lambda other: False)
    assert main(["inspect", root]) == 0   # which run owns the job, to wait for or to give up on
    assert "application attempt 0 owned by dag daily run scheduled__2024-05-01 (clear 0)" in capsys.readouterr().out
    # A's run is "running" (or cannot be asked here): the command refuses it, and --force is the way given
    assert main(["abort", root, "--job", sc.JOB, "--purge"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["abort", root, "--job", sc.JOB, "--purge", "--force"]) == 0
    b.setup_job(run_finished=lambda other: False)
    with pytest.raises(OverlappingRun):
        write(a, 1, 1, calls)
    write(b, 0, 1, calls)
    write(b, 1, 1, calls)
    b.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)
    assert a.abort_job(keep_committed=True)["state"] == "committed"


def test_a_clear_of_the_same_run_continues_its_job_and_an_unowned_attempt_is_anyones(tmp_path):
    root = str(tmp_path / "out")
    calls: list[tuple[int, int]] = []
    legacy = committer(root, None, "append")   # set up by an earlier release: its marker names no owner
    legacy.setup_job()
    write(legacy, 0, 1, calls)

    def never(other: RunOwner) -> bool:
        raise AssertionError(f"asked about {other}")

    a = committer(root, A, "append")
    assert a.setup_job(run_finished=never).app_attempt == 1
    cleared = committer(root, RunOwner(A.dag_id, A.run_id, 1), "append")
    assert cleared.setup_job(run_finished=never).app_attempt == 2
    write(a, 1, 3, calls)   # a try of the first clear, after the second clear's setup: the same run's attempt
    assert write(cleared, 0, 2, calls)["status"] == "recovered"
    cleared.commit_job(2)
    sc.assert_exactly_once(sc.read_rows(root), tasks=2)


def test_an_owner_that_is_not_one_is_refused_by_name(tmp_path):
    from airflow_commit_provider.protocol import CommitConfig, CorruptRecord, InvalidOutputSpec

    with pytest.raises(InvalidOutputSpec, match="run_id must be a non-empty string"):
        RunOwner("daily", "")
    with pytest.raises(InvalidOutputSpec, match="clear_number must be a non-negative integer"):
        RunOwner("daily", "r", -1)
    with pytest.raises(InvalidOutputSpec, match="owner must be a RunOwner"):
        CommitConfig(owner="scheduled__2024-05-01")
    root = str(tmp_path / "out")
    committer(root, A, "append").setup_job()
    marker = os.path.join(root, "_temporary", sc.JOB, "0", "_app.json")
    with open(marker) as fh:
        text = fh.read()
    with open(marker, "w") as fh:
        fh.write(text.replace('"dag_id"', '"dag"'))
    with pytest.raises(CorruptRecord, match="_app.json: owner is not a DAG run"):
        write(committer(root, B, "append"), 0, 1, [])


@pytest.mark.parametrize("mode", ["append", "overwrite"])
@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("purged_run", ["another run", "a later clear of the same run"])
def test_a_run_whose_generation_was_purged_is_refused_until_a_whole_clear(tmp_path, mode, algorithm, purged_run):
    """A commits generation 0; a newer generation (another run's, or a later clear of A) commits task 0, its commit
    fails, its teardown keeps task 0 and a purge (``gc --apply``) ends it. A clear of that run's failed tasks runs
    its write and its commit again, without its setup: before the purge record, both answered with generation 0's
    output (``already_committed``, generation 0's manifest), and the run succeeded without its data. Both are
    refused now, nothing changes, and a clear of the whole run (its setup included) commits its rows."""
    root = str(tmp_path / "out")
    newer = B if purged_run == "another run" else RunOwner(A.dag_id, A.run_id, 1)
    cleared = RunOwner(newer.dag_id, newer.run_id, newer.clear_number + 1)
    a, calls = committer(root, A, mode, algorithm), []
    a.setup_job()
    for t in range(2):
        write(a, t, 1, calls)
    first = a.commit_job(2)
    n = committer(root, newer, mode, algorithm)
    n.setup_job(run_finished=lambda other: True)
    write(n, 0, 2, calls)
    assert n.abort_job(keep_committed=True)["kept_committed_tasks"] == ([0] if algorithm == 1 else [])
    assert n.abort_job()["purged"]
    before, rows_before = job_files(root), sc.read_rows(root)

    c = committer(root, cleared, mode, algorithm)   # "clear failed tasks": the writes and the commit, no setup
    with pytest.raises(GenerationPurged, match=r"generation 1 \(.*\), which .* set up, was purged .* Clear the whole "
                                               "DAG run"):
        write(c, 1, 3, calls)
    with pytest.raises(GenerationPurged, match="Clear the whole DAG run, its setup task included"):
        c.commit_job(2)
    assert job_files(root) == before and sc.read_rows(root) == rows_before, "a refused try changes nothing"
    assert (1, 3) not in calls
    if purged_run == "another run":   # A's own late try is told, as before, that its generation committed
        assert write(committer(root, A, mode, algorithm), 1, 4, calls)["status"] == "already_committed"

    c.setup_job(run_finished=lambda other: True)   # the whole run cleared: a new generation
    for t in range(2):
        write(c, t, 5, calls)
    manifest = c.commit_job(2)
    assert manifest["generation"] == 1 and manifest["job_uuid"] != first["job_uuid"]
    ours = [r for r in sc.read_rows(root) if r["attempt"] == 5]
    sc.assert_exactly_once(ours, tasks=2)
    assert len(sc.read_rows(root)) == len(ours), "a new generation of the job replaces the job's own earlier one"
    # the purge record stops counting once a generation as new committed: a late try is told it committed
    assert write(committer(root, cleared, mode, algorithm), 0, 6, calls)["status"] == "already_committed"


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_purged_run_stays_refused_whatever_commits_or_purges_come_after(tmp_path, algorithm):
    """Found by attacking the rule above from outside: it compared generation numbers (refused while no generation
    as new had committed), but a purged number is reused, so another run's commit after the purge made the purged
    run's clear succeed with that run's output again; and one record per job let a second purge forget the first's
    run. One record per run now, read by name, deleted only by that run's own next setup."""
    root = str(tmp_path / "out")
    def job(name: str, clear: int = 0):
        return committer(root, RunOwner("daily", f"run_{name}", clear), "overwrite", algorithm)

    calls: list[tuple[int, int]] = []
    a = job("A")
    a.setup_job()
    write(a, 0, 1, calls)
    a.commit_job(1)
    for name in "BC":   # two runs' generations, one after the other, each purged before it committed
        c = job(name)
        c.setup_job(run_finished=lambda other: True)
        write(c, 0, 2, calls)
        c.abort_job(keep_committed=True)
        c.abort_job()
    d = job("D")
    d.setup_job(run_finished=lambda other: True)
    write(d, 0, 3, calls)
    assert d.commit_job(1)["generation"] == 1, "the purged generations' number, reused"
    for name in "BC":
        with pytest.raises(GenerationPurged, match=f"run_{name}"):
            write(job(name, 1), 0, 4, calls)
        with pytest.raises(GenerationPurged):
            job(name, 1).commit_job(1)
    assert write(job("D", 1), 0, 5, calls)["status"] == "already_committed"
    b = job("B", 1)
    b.setup_job(run_finished=lambda other: True)   # B cleared whole: its own record goes, C's stays
    write(b, 0, 6, calls)
    b.commit_job(1)
    assert {r["attempt"] for r in sc.read_rows(root)} == {6}
    with pytest.raises(GenerationPurged, match="run_C"):
        write(job("C", 2), 0, 7, calls)
    assert (0, 4) not in calls and (0, 7) not in calls, "no refused try ran its code"
