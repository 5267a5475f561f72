"""``airflow-commit`` on a local target, run as a person runs it: a process of its own, its output and exit code.

Each test builds real job states with the protocol (a committed job, a failed run's kept tasks, a job still
running) and checks what the command says of them against the storage, and that what it does leaves every other
job as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt


def cli(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "airflow_commit_provider.cli", *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
    return done


def as_json(*args: str, expect: int = 0):
    return json.loads(cli(*args, "--json", expect=expect).stdout)


def write(committer: FileOutputCommitter, task: int, value: int) -> None:
    run_task_attempt(committer, task, attempt=1, produce=lambda w: w.write(pa.table({"x": [value]})))


def listing(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def target(tmp_path) -> Path:
    """``committed`` (3 rows), ``failed`` (its teardown kept task 0) and ``running`` (task 1 committed) jobs."""
    root = tmp_path / "events"
    done = FileOutputCommitter(str(root), "committed", algorithm=1, mode="append")
    done.setup_job()
    for t in range(3):
        write(done, t, t)
    done.commit_job(expected_tasks=3)
    failed = FileOutputCommitter(str(root), "failed", algorithm=1, mode="append")
    failed.setup_job()
    write(failed, 0, 10)
    failed.setup_task(1, 1)   # a try that died before its commit
    assert failed.abort_job(keep_committed=True)["kept_committed_tasks"] == [0]
    running = FileOutputCommitter(str(root), "running", algorithm=1, mode="append")
    running.setup_job()
    write(running, 1, 20)
    return root


def test_inspect_shows_each_job_with_what_a_clear_would_recover(target):
    found = as_json("inspect", str(target))
    jobs = {j["job_id"]: j for j in found["jobs"]}
    assert {k: j["state"] for k, j in jobs.items()} == {"committed": "committed", "failed": "failed",
                                                       "running": "running"}
    assert jobs["failed"]["recoverable_tasks"] == [0] and jobs["running"]["recoverable_tasks"] == [1]
    assert jobs["failed"]["tasks"]["failed_attempts"] == 1, "the dead try was recorded failed by the teardown"
    assert [j for j, d in jobs.items() if d["collectable"]] == ["failed"]
    assert jobs["committed"]["last_commit"]["rows"] == 3
    assert found["markers"] == [{"path": "_SUCCESS", "job_id": "committed", "generation": 0, "files": 3, "rows": 3,
                                 "valid": True, "problem": None,
                                 "finished": jobs["committed"]["last_commit"]["finished"]}]
    text = cli("inspect", str(target)).stdout
    assert "job failed: failed" in text and f"airflow-commit gc {target} --apply" in text


def test_verify_tells_a_true_marker_from_a_false_one(target, tmp_path):
    assert as_json("verify", str(target))["ok"] is True
    pq.write_table(pa.table({"x": [99]}), target / "part-stranger.parquet")   # written outside the protocol
    result = as_json("verify", str(target), expect=1)
    assert not result["ok"] and "part-stranger.parquet" in result["markers"][0]["problem"]
    assert "INVALID" in cli("verify", str(target), expect=1).stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no _SUCCESS" in cli("verify", str(empty), expect=1).stdout


def test_verify_checks_each_partition_marker(tmp_path):
    root = tmp_path / "daily"
    job = FileOutputCommitter(str(root), "days", algorithm=1, mode="dynamic", partition_by=["day"])
    job.setup_job()
    for t, day in enumerate(["2024-01-01", "2024-01-02"]):
        run_task_attempt(job, t, attempt=1, produce=lambda w, day=day: w.write(pa.table({"x": [1], "day": [day]})))
    job.commit_job(expected_tasks=2)
    result = as_json("verify", str(root))
    assert result["ok"] and sorted(m["path"] for m in result["markers"]) == [
        "_SUCCESS", "day=2024-01-01/_SUCCESS", "day=2024-01-02/_SUCCESS"]
    next(p for p in (root / "day=2024-01-02").iterdir() if p.suffix == ".parquet").unlink()
    bad = {m["path"]: m["problem"] for m in as_json("verify", str(root), expect=1)["markers"] if not m["valid"]}
    assert sorted(bad) == ["_SUCCESS", "day=2024-01-02/_SUCCESS"], "the other day's marker still tells the truth"
    assert "no such file" in bad["day=2024-01-02/_SUCCESS"]


def test_gc_is_a_dry_run_until_applied_and_never_touches_a_running_job(target):
    before = listing(target)
    plan = as_json("gc", str(target))
    assert [(p["job_id"], p["state"]) for p in plan] == [("failed", "failed")]
    assert listing(target) == before, "the dry run changed the target"
    applied = as_json("gc", str(target), "--apply")
    assert applied[0]["result"]["aborted"] is True
    assert not (target / "_temporary" / "failed").exists()
    assert {k: v for k, v in listing(target).items() if "_temporary/running" in k} == \
        {k: v for k, v in before.items() if "_temporary/running" in k}, "gc touched the running job"
    assert as_json("verify", str(target))["ok"], "the committed output is as it was"
    # the running job goes on as if nothing happened, and commits what it wrote
    running = FileOutputCommitter(str(target), "running", algorithm=1, mode="append")
    running.commit_job(expected_tasks=[1])
    assert sorted(pq.read_table(target).column("x").to_pylist()) == [0, 1, 2, 20]


def test_abort_keeps_committed_tasks_for_a_clear_and_purge_removes_them(target):
    assert as_json("abort", str(target), "--job", "running")["kept_committed_tasks"] == [1]
    again = FileOutputCommitter(str(target), "running", algorithm=1, mode="append")
    again.setup_job()   # a clear of the run: the next application attempt
    assert again.recover_task(1) is not None, "the task committed before the abort is recovered"
    cli("abort", str(target), "--job", "running", "--purge")
    assert not (target / "_temporary" / "running").exists()
    assert sorted(pq.read_table(target).column("x").to_pylist()) == [0, 1, 2]


def test_abort_says_what_it_kept(target):
    """Found from outside (session 19): ``abort --job`` of a v2 job said its committed tasks were kept for a clear
    when its teardown had withdrawn them (v2's commits are visible: a teardown keeps none)."""
    assert cli("abort", str(target), "--job", "running").stdout.strip() == \
        "job running: aborted (1 committed task(s) kept for a clear of the run: 1)"
    v2 = FileOutputCommitter(str(target), "v2job", algorithm=2, mode="append")
    v2.setup_job()
    write(v2, 0, 30)
    assert cli("abort", str(target), "--job", "v2job").stdout.strip() == \
        "job v2job: aborted (no committed task kept: a clear of the run runs every task again)"


def test_refusals_name_the_problem_and_the_way_on(target):
    done = cli("abort", str(target), "--job", "nosuchjob", expect=2)
    assert "no job 'nosuchjob'" in done.stderr and "airflow-commit inspect" in done.stderr
    assert as_json("abort", str(target), "--job", "committed")["aborted"] is False
    assert cli("inspect", str(target / "nothing-here")).stdout.splitlines()[1].startswith("  no _SUCCESS")


def test_a_purged_jobs_late_try_leaves_an_orphan_that_inspect_names_and_gc_removes(target):
    """A try still running when its job was purged records its fate after the purge, re-creating part of the job's
    directory without a job record: ``inspect`` called it unreadable, sending the reader to ``inspect`` again, and
    ``gc`` could not remove it (seen in a deployment). It is ``orphaned``, says why, and ``gc --apply`` removes it
    alone."""
    late = FileOutputCommitter(str(target), "late", algorithm=1, mode="append")
    late.setup_job()
    attempt = late.setup_task(0, 1)   # a try writing when the job is purged
    cli("abort", str(target), "--job", "late", "--purge")
    late.abort_task(attempt)          # its fate, recorded after the purge
    assert (target / "_temporary" / "late").is_dir()
    jobs = {j["job_id"]: j for j in as_json("inspect", str(target))["jobs"]}
    assert jobs["late"]["state"] == "orphaned" and jobs["late"]["collectable"], jobs["late"]
    assert "purged" in cli("inspect", str(target)).stdout
    before = {k: v for k, v in listing(target).items() if "/late/" not in k}
    assert [(p["job_id"], p["state"]) for p in as_json("gc", str(target))] == [("failed", "failed"),
                                                                              ("late", "orphaned")]
    as_json("gc", str(target), "--apply")
    assert not (target / "_temporary" / "late").exists()
    after = listing(target)
    assert {k: v for k, v in after.items() if "_temporary/running" in k} == \
        {k: v for k, v in before.items() if "_temporary/running" in k}, "gc touched the running job"


def test_tasks_a_job_commit_refused_are_not_shown_recoverable(tmp_path):
    """A job commit refused two tasks' files for good (two schemas): a clear of the run runs them again, so
    ``inspect`` does not list them as what a clear recovers (it said "committed tasks 2 (a clear of the run
    recovers them)")."""
    root = tmp_path / "events"
    job = FileOutputCommitter(str(root), "mixed", algorithm=1, mode="append")
    job.setup_job()
    run_task_attempt(job, 0, attempt=1, produce=lambda w: w.write(pa.table({"x": [1]})))
    run_task_attempt(job, 1, attempt=1, produce=lambda w: w.write(pa.table({"x": [2], "note": ["bug"]})))
    with pytest.raises(Exception, match="different schemas"):
        job.commit_job(expected_tasks=2)
    job.abort_job(keep_committed=True)
    [found] = as_json("inspect", str(root))["jobs"]
    assert (found["tasks"]["committed"], found["tasks"]["refused"], found["recoverable_tasks"]) == ([0, 1], [0, 1], [])
    assert "2 of them refused by a job commit (a clear runs them again); a clear of the run recovers 0" in \
        cli("inspect", str(root)).stdout


def test_abort_of_a_dag_runs_job_when_airflow_cannot_be_asked_is_refused_until_forced(tmp_path):
    """A running job that names its DAG run, where Airflow's metadata database cannot be reached: nothing tells a
    live run from a dead one, so the abort is refused with the reason and the ``--force`` line, which works."""
    import os

    root = tmp_path / "events"
    job = FileOutputCommitter(str(root), "dag__run__stage", algorithm=1, mode="append",
                              labels={"dag_id": "dag", "run_id": "run"})
    job.setup_job()
    write(job, 0, 1)
    env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/no-such-dir/airflow.db"}
    done = subprocess.run([sys.executable, "-m", "airflow_commit_provider.cli", "abort", str(root), "--job",
                           "dag__run__stage", "--purge"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2, done
    assert "belongs to dag dag run run" in done.stderr and "cannot be asked" in done.stderr, done.stderr
    forced = done.stderr.rsplit("run: ", 1)[1].strip().split()
    assert forced[:2] == ["airflow-commit", "abort"] and forced[-1] == "--force", forced
    assert (root / "_temporary" / "dag__run__stage").is_dir(), "the refusal changed nothing"
    again = subprocess.run([sys.executable, "-m", "airflow_commit_provider.cli", *forced[1:]], capture_output=True,
                           text=True, timeout=300, env=env)
    assert again.returncode == 0 and "purged" in again.stdout, again
    assert not (root / "_temporary").exists()


def test_no_marker_is_explained_with_what_writes_one(tmp_path):
    """Found from outside (session 19): with a job commit stopped after its plan, ``verify`` said that no job had
    committed there (one had) and ``inspect`` listed the job ``committing`` without saying what finishes it."""
    from airflow_commit_provider.protocol import faults

    root = tmp_path / "out"
    assert "no job of this provider has committed there" in cli("verify", str(root), expect=1).stdout
    first = FileOutputCommitter(str(root), "first", algorithm=1, mode="append")
    first.setup_job()
    write(first, 0, 1)
    first.commit_job(1)
    second = FileOutputCommitter(str(root), "second", algorithm=1, mode="append")
    second.setup_job()
    write(second, 0, 2)
    faults.arm("commit_job.after_commit_log", "raise")   # killed between its commit log and its markers
    with pytest.raises(faults.InjectedFault):
        second.commit_job(1)
    faults.disarm()
    said = cli("verify", str(root), expect=1).stdout
    assert "a job commit under way withdrew it" in said and "a retry of that job's commit task" in said, said
    assert "its job commit fixed its plan and has not finished: a retry of its commit task" in \
        cli("inspect", str(root)).stdout
    second.commit_job(1)   # what it said: the commit task's retry
    assert as_json("verify", str(root))["ok"]
    (root / "_SUCCESS").unlink()   # some change since withdrew it
    assert "job second committed there last (generation 0" in cli("verify", str(root), expect=1).stdout
