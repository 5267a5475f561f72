"""What the Commit status view advises for a stage, in one place: each state and error classified once into an
action, and the sentences that say how to take it.

An action is given only where following it works (``tests/airflow/test_view_truth.py`` follows each and shows the
next run succeeds): a job commit that failed on an error the operators fail fast on
(:func:`~..operators.failures.is_deterministic`: a schema mismatch, a bad specification) fails the same way on a
clear of the run or of the commit task, so the view says so and names the fix and the command that drops the job
instead of advising a clear.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..operators.failures import is_deterministic
from ..operators.hints import abort_command
from .airflow_state import TaskInstanceRow
from .audit_view import AuditView

Action = Literal["none", "wait", "clear_failed_tasks", "clear_run", "clear_commit_task", "new_job", "fix_setup",
                 "check_storage"]
#: Statuses of a task that is done: its output is decided (published, or kept for recovery).
DONE = ("committed", "recovered", "kept")


@dataclass(frozen=True)
class Advice:
    """The one action that gets the stage out of its state, and the sentences the view shows."""

    action: Action
    steps: list[str] = field(default_factory=list)


def _numbers(ns: Sequence[int]) -> str:
    ns = sorted(ns)
    if len(ns) == 1:
        return f"task {ns[0]}"
    if len(ns) > 12:
        return f"{len(ns)} tasks"
    return "tasks " + ", ".join(map(str, ns[:-1])) + f" and {ns[-1]}"


def _instances(ns: Sequence[int], shards: int) -> str:
    """With *shards* per write task instance, which ones hold tasks *ns* (what Airflow's grid shows and "clear"
    acts on: shard ``s`` of map index ``i`` is task ``i * shards + s``); nothing with one task per instance."""
    if shards <= 1:
        return ""
    idx = sorted({n // shards for n in ns})
    if len(idx) > 12:
        return f" (in {len(idx)} write task instances)"
    names = [f"[{i}]" for i in idx]
    return f" (write task instance{'s' if len(idx) > 1 else ''} " + (
        names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}") + ")"


def deterministic_failure(job: Mapping[str, Any], conn_id: str | None) -> Advice | None:
    """The advice for a job whose last commit failed on an error no retry or clear cures, else ``None``."""
    failure = job.get("commit_failure")
    if job.get("state") == "committed" or not isinstance(failure, Mapping) or not is_deterministic(
            failure.get("error")):
        return None
    command = abort_command(str(job.get("output")), str(job.get("job_id")), conn_id)
    return Advice("new_job", [
        f"The job commit failed on {failure.get('error')} at its {failure.get('stage')} stage: the same input fails "
        "the same way, so clearing the run or the commit task as it is cannot help.",
        "Fix the cause first (the error says what: the code's schema, the table's, the stage's settings); then "
        "clear the whole DAG run: the tasks the commit refused run again with the fixed code. Or drop this job and "
        f"its files with `{command}` and start a new run."])


def replaced(job: Mapping[str, Any]) -> str:
    """What became of a run's generation that a later run of its ``job_key`` took over: the target holds the
    later run's rows only once that run's generation committed."""
    mine = f"This run's generation {job.get('generation')} of job {job.get('job_id')}"
    newer, now = job["replaced_by"], job.get("replacing_state")
    if job.get("state") != "committed":
        return (f"{mine} was purged (nothing of it is left); {newer} of the same job_key is the job's current "
                f"generation ({now}): its Commit status shows its tasks.")
    if now == "committed":
        return (f"{mine} committed, then was replaced by {newer} (the same job_key): the target holds that run's "
                "rows now; its Commit status shows its tasks.")
    return (f"{mine} committed; {newer} of the same job_key has started the job's next generation ({now}). Until "
            "that one commits, the target holds this run's rows; its commit replaces them. Its Commit status shows "
            "its tasks.")


def advise(job: Mapping[str, Any], statuses: Sequence[tuple[int, str]], commit_ti: TaskInstanceRow | None,
           conn_id: str | None = None, shards: int = 1, audit: AuditView | None = None) -> Advice:
    """The stage's action, from its job state (``committer.status()`` as the view reads it), its tasks' statuses
    (``(task, status)``, *shards* per write task instance), the commit task's Airflow state and the stage's *audit*
    (as the view shows it: an approval it waits for is what the stage waits on)."""
    state = job.get("state")
    if job.get("replaced_by"):
        return Advice("none", [replaced(job)])
    stuck = deterministic_failure(job, conn_id)
    if stuck is not None:
        return stuck
    app = job.get("app_attempt")
    done = [n for n, s in statuses if s in DONE]
    todo = [n for n, s in statuses if s not in DONE]
    if state == "committed":
        return Advice("none", [
            "Nothing to do: the data is published and _SUCCESS is written. Clearing this run recomputes the stage as "
            "a new generation whose commit replaces this job's files (never duplicates them)."])
    if state == "committing":
        steps = ["The job commit has started (its plan is fixed) and rolls forward only: the teardown will not "
                 "abort it."]
        if commit_ti is not None and commit_ti.state in ("failed", "upstream_failed", "up_for_retry"):
            return Advice("clear_commit_task", [*steps, "Retry or clear the commit task: it resumes the commit "
                                                        "from its plan; no write runs again."])
        return Advice("wait", steps)
    if state == "failed":
        if str(job.get("algorithm")) == "2":
            removed = (job.get("aborted") or {}).get("visible_files_removed")
            return Advice("clear_run", [
                f"The failed run's teardown removed this job's visible files ({removed}); v2 cannot keep committed "
                f"tasks. Clear the DAG run: setup opens application attempt {(app or 0) + 1} and every task runs "
                "again."])
        if done and todo:
            return Advice("clear_run", [
                f"Clear the DAG run (or the stage's setup task with its downstream tasks): setup opens application "
                f"attempt {(app or 0) + 1}; {_numbers(done)} will be recovered (your code is not called), "
                f"{_numbers(todo)} will run."])
        return Advice("clear_run", [
            f"Clear the DAG run: setup opens application attempt {(app or 0) + 1} and "
            f"{'every task runs again' if not done else 'every task is recovered; only the commit runs'}."])
    if state == "running":
        failed = [n for n, s in statuses if s == "failed"]
        retrying = [n for n, s in statuses if s == "retrying"]
        steps = []
        if retrying:
            steps.append(f"Airflow retries {_numbers(retrying)}{_instances(retrying, shards)} by itself: the next "
                         f"try first records the failed one failed, then writes and commits in application attempt "
                         f"{app}.")
        if failed:
            keep = f"; {_numbers(done)} stay committed and are not run again" if done else ""
            steps.append(f"{_numbers(failed).capitalize()}{_instances(failed, shards)} failed with no try left. "
                         "\"Clear only failed tasks\" "
                         f"re-runs {'it' if len(failed) == 1 else 'them'} in application attempt {app}{keep}; once "
                         "the teardown has run, clear the whole run instead (committed tasks are recovered).")
            return Advice("clear_failed_tasks", steps)
        if not steps and not todo and audit is not None and audit.approval is not None \
                and audit.approval.state == "waiting":
            steps.append("The audit passed; the commit waits for a person's approval in the run's Required actions "
                         "until its deadline (see Approval): Approve publishes, Reject or no answer publishes "
                         "nothing.")
        if not steps:
            steps.append(f"Writing: {len(done):,} of {len(statuses):,} task(s) committed." if statuses else "Writing.")
        return Advice("wait", steps)
    if state == "unreadable":
        return Advice("check_storage", [
            "The storage could not be read from the api-server: check the connection and that the api-server has "
            "this package and the storage's credentials."])
    if state == "refused":
        return Advice("fix_setup", [
            "The stage's setup was refused for good (its error is below; no retry or clear cures it as it is): fix "
            "what it names, then clear the run (or trigger a new one); nothing of the stage was written and its "
            "write tasks never ran."])
    if state == "purged":
        return Advice("clear_run", [
            "Nothing of this run's job is left in the target: it was purged (by the teardown of a stage with "
            "purge_on_failure, `airflow-commit abort --purge` or `airflow-commit gc --apply`). Clear the whole DAG "
            "run (or trigger a new one): its setup starts the job again and every task runs."])
    return Advice("none")
