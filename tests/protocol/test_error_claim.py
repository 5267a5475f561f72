"""Mode ``error`` is a claim on the target: the first job to commit into it owns it, every other job is refused.

Before, ``error`` was a check (the target holds no data) followed by the act: two jobs checking at the same moment
both committed, and a job resuming a plan fixed before the other one committed never checked again (12 rows from
two jobs in the crash scenario below). Concurrency runs in real OS processes (multiprocessing's spawn context),
lined up on a barrier; crashes are fault points armed in the child (action ``exit``: ``os._exit``).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from typing import Any

import pytest

from airflow_commit_provider.protocol import (
    CommitProtocolError,
    FileOutputCommitter,
    InvalidOutputSpec,
    faults,
    read_success_marker,
    run_task_attempt,
)
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE

from . import scenario as sc

CLAIM = os.path.join("_commits", "_error_claim.json")
#: races of N_JOBS processes, each on its own empty target
RACES = int(os.environ.get("ERROR_CLAIM_RACES", "10"))
N_JOBS = 4


def make(root: str, job: str, **kw: Any) -> FileOutputCommitter:
    return FileOutputCommitter(root, job, algorithm=kw.pop("algorithm", 1), mode="error", partition_by=["day"],
                               commit_threads=1, **kw)


def write_task(c: FileOutputCommitter, task: int = 0, attempt: int = 1) -> None:
    run_task_attempt(c, task, attempt, lambda w: w.write(sc.task_table(task, attempt)))


def _job_rows(root: str) -> list[tuple]:
    return sorted((r["task"], r["row"], r["attempt"]) for r in sc.read_rows(root))


def _claimer(root: str) -> str:
    with open(os.path.join(root, CLAIM), "rb") as fh:
        return json.loads(fh.read())["job_id"]


# ------------------------------------------------------------------------------------------- a real process
def _child(root: str, job: str, op: str, fault: str | None, queue: Any) -> None:
    if fault:
        faults.arm(fault, "exit")
    c = make(root, job)
    try:
        if op == "setup":
            c.setup_job()
        elif op == "write":
            write_task(c)
        else:
            c.commit_job(1)
        queue.put(("ok", ""))
    except CommitProtocolError as exc:
        queue.put((type(exc).__name__, str(exc)))


def in_process(root: str, job: str, op: str, fault: str | None = None) -> tuple[int | None, tuple[str, str] | None]:
    """Run one protocol call of *job* in its own OS process: its exit code and its outcome (``("ok", "")`` or the
    protocol error's type and message; ``None`` when it died)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(root, job, op, fault, queue))
    proc.start()
    proc.join(timeout=120)
    return proc.exitcode, (queue.get(timeout=10) if proc.exitcode == 0 else None)


def test_a_crashed_claimer_resumes_and_the_other_job_is_refused(tmp_path):
    """Job A's commit dies right after its plan (nothing visible yet), job B then commits into the still empty
    target, A's retry resumes its plan. Before the claim both committed: 12 rows from two jobs in mode ``error``.
    Now B is refused naming A, A's resume commits, and only A's rows are there."""
    root = str(tmp_path / "out")
    for job in ("job-a", "job-b"):   # both set up and written while the target is empty and unclaimed
        assert in_process(root, job, "setup") == (0, ("ok", ""))
        assert in_process(root, job, "write") == (0, ("ok", ""))
    code, _ = in_process(root, "job-a", "commit", fault="commit_job.after_plan")
    assert code == FAULT_EXIT_CODE
    assert sc.visible_files(root) == []
    code, outcome = in_process(root, "job-b", "commit")
    assert code == 0 and outcome is not None
    assert outcome[0] == "InvalidOutputSpec" and "job-a" in outcome[1], outcome
    assert sc.visible_files(root) == [], "the refused job made something visible"
    assert in_process(root, "job-a", "commit") == (0, ("ok", ""))
    assert _job_rows(root) == sorted((0, i, 1) for i in range(sc.ROWS))
    assert read_success_marker(root, verify_files=True)["job_id"] == "job-a"
    # a third job is refused at setup already, naming the claimer; the refused B aborts without touching A's claim
    with pytest.raises(InvalidOutputSpec, match="job-a"):
        make(root, "job-c").setup_job()
    assert make(root, "job-b").abort_job()["aborted"] is True
    assert _claimer(root) == "job-a"
    assert _job_rows(root) == sorted((0, i, 1) for i in range(sc.ROWS))


def test_a_plan_without_claim_is_refused_when_another_job_claimed(tmp_path):
    """A commit plan fixed without a claim (by a release before this one) is checked again when it resumes,
    before its first visible change: once another job owns the target, the resume is refused naming that job and
    makes nothing visible."""
    root = str(tmp_path / "out")
    a, b = make(root, "job-a"), make(root, "job-b")
    for c in (a, b):
        c.setup_job()
        write_task(c)
    sc.crash_after_plan(a)
    os.remove(os.path.join(root, CLAIM))   # the plan as an earlier release left it: no claim
    b.commit_job(1)
    before = sc.all_files(root)
    with pytest.raises(InvalidOutputSpec, match="job-b"):
        a.commit_job(1)
    assert sc.all_files(root) == before
    assert {r["attempt"] for r in sc.read_rows(root)} == {1} and len(sc.read_rows(root)) == sc.ROWS
    assert read_success_marker(root, verify_files=True)["job_id"] == "job-b"


# ---------------------------------------------------------------------------------- N jobs race, repeatedly
def _racer(roots: list[str], job: str, barrier: Any, queue: Any) -> None:
    for i, root in enumerate(roots):
        c = make(root, job)
        c.setup_job()
        write_task(c)
        barrier.wait(timeout=120)   # every job of this race is set up and written: now they all commit
        try:
            c.commit_job(1)
            queue.put((i, job, "committed", ""))
        except InvalidOutputSpec as exc:
            queue.put((i, job, "refused", str(exc)))


def test_concurrent_error_jobs_exactly_one_commits_every_time(tmp_path):
    """N_JOBS processes commit into one empty target at the same moment, RACES times: exactly one commits each
    time, every other one is refused naming it (before any visible change), and the target holds the winner's
    rows only, under a true ``_SUCCESS``. Before the claim, several jobs committed in some races."""
    roots = [str(tmp_path / f"out{i}") for i in range(RACES)]
    jobs = [f"job-{k}" for k in range(N_JOBS)]
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(N_JOBS), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(roots, job, barrier, queue)) for job in jobs]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=300) for _ in range(RACES * N_JOBS)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    wins: dict[str, int] = {}
    for i, root in enumerate(roots):
        race = [o for o in outcomes if o[0] == i]
        winners = [job for _, job, what, _ in race if what == "committed"]
        assert len(winners) == 1, f"race {i}: {race}"
        winner = winners[0]
        wins[winner] = wins.get(winner, 0) + 1
        for _, job, what, message in race:
            if job != winner:
                assert what == "refused" and winner in message, f"race {i}: {job} was not told {winner} won: {race}"
        assert _claimer(root) == winner
        assert _job_rows(root) == sorted((0, i, 1) for i in range(sc.ROWS)), f"race {i}: rows of several jobs"
        manifest = read_success_marker(root, verify_files=True)
        assert manifest["job_id"] == winner and manifest["retained"] == []
        for job in jobs:   # the losers are not committing (no plan): their teardown removes everything of theirs
            if job != winner:
                assert make(root, job).status()["state"] == "running"
                assert make(root, job).abort_job()["aborted"] is True
        assert not os.path.exists(os.path.join(root, "_temporary"))
        assert _claimer(root) == winner
    print(f"wins by job over {RACES} races: {wins}")


# ------------------------------------------------------------------------------ abandoned claimers, re-runs
def _take_claim_without_plan(c: FileOutputCommitter) -> None:
    """The state a job commit leaves when it dies between its claim and its plan record: the claim is taken
    (by the claim's own method, as FixPlan takes it) and no plan exists."""
    job = c.job_record()
    assert job is not None
    c.job.target_claim.take(job)
    assert c.job.commit_plan(job) is None


@pytest.mark.parametrize("keep_committed", [False, True], ids=["purge", "teardown"])
def test_abort_of_a_claimer_that_never_committed_frees_the_target(tmp_path, keep_committed):
    """A job that holds the claim and never committed (its commit died between claim and plan) blocks every other
    job in mode ``error`` until its abort, the purge or the failed run's teardown, frees the target; another job
    then commits there, and the first job's cleared run is refused naming it."""
    root = str(tmp_path / "out")
    a, b = make(root, "job-a"), make(root, "job-b")
    a.setup_job()
    write_task(a)
    _take_claim_without_plan(a)
    with pytest.raises(InvalidOutputSpec, match="job-a"):
        b.setup_job()
    assert a.abort_job(keep_committed=keep_committed)["aborted"] is True
    assert not os.path.exists(os.path.join(root, CLAIM))
    b.setup_job()
    write_task(b, attempt=2)
    b.commit_job(1)
    assert _claimer(root) == "job-b"
    assert _job_rows(root) == sorted((0, i, 2) for i in range(sc.ROWS))
    if keep_committed:   # A's run, cleared after its teardown kept its task: refused at setup
        with pytest.raises(InvalidOutputSpec, match="job-b"):
            a.setup_job()


def test_a_committed_claimer_keeps_the_target_through_a_later_abort(tmp_path):
    """A committed job keeps the target (its data is there): the purge of its next generation does not free it."""
    root = str(tmp_path / "out")
    a = make(root, "job-a")
    a.setup_job()
    write_task(a)
    a.commit_job(1)
    a.setup_job()            # the DAG run cleared: a new generation, aborted before it commits
    assert a.abort_job()["aborted"] is True
    assert a.abort_job()["state"] == "committed"
    assert _claimer(root) == "job-a"
    with pytest.raises(InvalidOutputSpec, match="job-a"):
        make(root, "job-b").setup_job()


@pytest.mark.parametrize("algorithm", [1, 2])
def test_the_next_generation_of_the_claimer_replaces_its_own_data(tmp_path, algorithm):
    """The claim is the job id's, not the generation's: a re-run of the same DAG run (a new generation after the
    commit) commits over its own data, and its generation's rows replace the earlier ones."""
    root = str(tmp_path / "out")
    c = make(root, "job-a", algorithm=algorithm)
    c.setup_job()
    write_task(c, attempt=1)
    c.commit_job(1)
    ctx = c.setup_job()
    assert ctx.generation == 1
    write_task(c, attempt=2)
    assert c.commit_job(1)["generation"] == 1
    assert _job_rows(root) == sorted((0, i, 2) for i in range(sc.ROWS))
    assert _claimer(root) == "job-a"
    assert read_success_marker(root, verify_files=True)["job_id"] == "job-a"
