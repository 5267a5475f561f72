"""The Commit status view's read model: typed JSON the React app renders, built from the storage's job state
(``committer.status()``) and Airflow's task instances, and nothing else.

A run's model is built once per version (:mod:`.airflow_state` fingerprints the run cheaply): the summary (counts
per status, progress, the job commit's stages) goes to the page first; the task table is served from the same
model, filtered and paged, so a 1,000-task stage never travels whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..protocol.jobcommit.names import COMMIT_STAGES
from .airflow_state import RunSnapshot, TaskInstanceRow

StageState = Literal["absent", "running", "committing", "committed", "failed", "unreadable"]
TaskStatus = Literal["committed", "recovered", "kept", "withdrawn", "running", "retrying", "failed", "unfinished",
                     "waiting"]
#: Statuses of a task that is done: its output is decided (published, or kept for recovery).
DONE = ("committed", "recovered", "kept")
MAX_PAGE = 500


class TaskRow(BaseModel):
    """One task of a stage (a mapped write task instance, or the unmapped write task as task 0; with
    ``shards_per_task=N``, shard ``task % N`` of the write task instance ``task // N``)."""

    task: int
    #: the write task instance (map index; 0 unmapped) that runs the task, and the task's shard in it (``None``
    #: when the stage has one task per task instance)
    map_index: int
    shard: int | None = None
    status: TaskStatus
    why: str
    airflow_state: str | None = None
    try_number: int | None = None
    #: the attempt whose commit is the task's output, ``"<application attempt>.<try>"``: for a recovered task
    #: the attempt that committed (in an earlier application attempt), not the one that adopted it
    committed_attempt: str | None = None
    recovered_from_app: int | None = None
    files: int = 0
    rows: int | None = 0
    bytes: int = 0
    failed_attempts: list[str] = Field(default_factory=list)
    denied_attempts: list[str] = Field(default_factory=list)
    unfinished_attempts: list[str] = Field(default_factory=list)
    #: seconds of the Airflow task instance's latest try (``None`` before it ran)
    duration: float | None = None


class CommitStageTime(BaseModel):
    """One stage of the job commit and how long it took."""

    name: str
    seconds: float


class Totals(BaseModel):
    files: int
    bytes: int
    rows: int | None = None
    tasks: int
    partitions: int | None = None


class CommitFailure(BaseModel):
    """The job's last failed commit, from the summary it left beside the job's records (``_commit_failure.json``)."""

    at: str | None = None
    stage: str | None = None
    error: str | None = None
    message: str | None = None


class Abort(BaseModel):
    """What the failed run's teardown did."""

    at: str | None = None
    kept_tasks: list[int] = Field(default_factory=list)
    visible_files_removed: int = 0


class Stage(BaseModel):
    """One write stage of the run: its job's state and summary (no task rows: see :class:`TaskPage`)."""

    stage: str
    setup_task_id: str
    write_task_id: str | None = None
    job_id: str | None = None
    state: StageState
    error: str | None = None
    job_uuid: str | None = None
    generation: int | None = None
    app_attempt: int | None = None
    committer: str | None = None
    algorithm: str | None = None
    mode: str | None = None
    target: str | None = None
    started: str | None = None
    finished: str | None = None
    tasks_total: int = 0
    tasks_done: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    totals: Totals | None = None
    timeline: list[CommitStageTime] = Field(default_factory=list)
    total_seconds: float | None = None
    aborted: Abort | None = None
    #: the last job commit of this generation that failed (while the job is not committed)
    commit_failure: CommitFailure | None = None
    next_steps: list[str] = Field(default_factory=list)
    #: algorithm v2: task outputs became visible at task commit
    partial_output_visible: bool = False
    files_total: int = 0
    #: protocol tasks (shards) per write task instance
    shards_per_task: int = 1
    #: a table target's committed transaction, in words: ``delta /lake/events version 3``, ``iceberg lake.events
    #: snapshot 4242...``; ``None`` for a directory of files or a job not committed yet
    table: str | None = None
    #: the run and generation that replaced this run's generation of the job (a later run of its ``job_key``):
    #: the stage then shows its own generation's summary, none of the newer one's tasks (:mod:`.generations`)
    replaced_by: str | None = None


class CommitStageName(BaseModel):
    """A job commit stage the view shows (in run order), and what it does."""

    name: str
    help: str


class RunStatus(BaseModel):
    """The view's summary of a DAG run."""

    dag_id: str
    run_id: str
    version: str
    run_state: str | None = None
    #: the run has write stages (setup tasks), whether or not any has run
    has_stages: bool
    #: whether the page should keep checking for changes
    live: bool
    stages: list[Stage]
    #: every job commit stage, in run order: the view's timeline and help name these (the protocol's one list)
    commit_stages: list[CommitStageName] = Field(default_factory=lambda: [
        CommitStageName(name=k, help=v) for k, v in COMMIT_STAGES.items()])


class Version(BaseModel):
    """The cheap check a live page polls: a new ``version`` means "fetch the summary again"."""

    version: str
    live: bool


class TaskPage(BaseModel):
    """One page of a stage's task table."""

    version: str
    setup_task_id: str
    status: TaskStatus | None = None
    total: int
    offset: int
    limit: int
    items: list[TaskRow]


class FileRow(BaseModel):
    path: str
    size: int
    rows: int | None = None
    task: int | None = None


class FilePage(BaseModel):
    """One page of the files a committed stage published (what the "Commit target" link shows)."""

    version: str
    setup_task_id: str
    target: str | None
    total: int
    offset: int
    limit: int
    items: list[FileRow]


# ------------------------------------------------------------------------------------------------ building it
def stage_roles(setup_task_id: str, tis: Sequence[TaskInstanceRow]) -> dict[str, Any]:
    """The stage's task instances by role, for a stage built by ``commit_stage`` (``<group>.setup``,
    ``<group>.write``, ``<group>.commit``, ``<group>.abort``): ``writes`` by task number."""
    group = setup_task_id.rsplit(".", 1)[0] if "." in setup_task_id else ""
    prefix = f"{group}." if group else ""
    roles: dict[str, Any] = {"writes": {}, "write_task_id": None}
    for ti in tis:
        if ti.task_id == f"{prefix}write":
            roles["writes"][max(ti.map_index, 0)] = ti
            roles["write_task_id"] = ti.task_id
        elif ti.task_id in (f"{prefix}commit", f"{prefix}abort"):
            roles[ti.task_id.rsplit(".", 1)[-1]] = ti
    return roles


def committed_attempt(t: Mapping[str, Any]) -> str | None:
    """``"<app>.<try>"`` of the attempt that committed *t* (a task of ``status()``): for a task adopted by a later
    application attempt, the application attempt it committed in (``recovered_from_app``), not the adopter's."""
    if t.get("attempt") is None:
        return None
    if t.get("committed_attempt"):
        return str(t["committed_attempt"])
    app = t["recovered_from_app"] if t.get("recovered_from_app") is not None else t.get("app_attempt")
    return f"{app}.{t['attempt']}"


def _tries(names: Sequence[str]) -> set[int]:
    return {int(n.split(".", 1)[1]) for n in names if "." in str(n) and n.split(".", 1)[1].isdigit()}


def _fenced(failed: Sequence[str]) -> str:
    """Why the task's failed attempts do not count: recorded failed, they can never commit (a killed try is fenced
    that way by the next try, before it writes)."""
    if not failed:
        return ""
    return (f"; {'attempt' if len(failed) == 1 else 'attempts'} {', '.join(failed)} "
            f"{'is' if len(failed) == 1 else 'are'} recorded failed and can never commit, even if still running "
            "(a killed try is fenced so by the next try)")


def _per_task_files(files: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Rows and bytes per task from a committed job's file list (its task entries do not carry them)."""
    out: dict[int, dict[str, Any]] = {}
    for f in files:
        agg = out.setdefault(f.get("task"), {"rows": 0, "bytes": 0})
        agg["bytes"] += f.get("size") or 0
        agg["rows"] = None if agg["rows"] is None or f.get("rows") is None else agg["rows"] + f["rows"]
    return out


def shards_per_task(job: Mapping[str, Any]) -> int:
    """The stage's shards per write task instance, as its job record's labels say (the write operator puts it
    there); 1 for a stage without, or a record that cannot say."""
    n = (job.get("labels") or {}).get("shards_per_task", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def task_rows(job: Mapping[str, Any], writes: Mapping[int, TaskInstanceRow], shards: int = 1) -> list[TaskRow]:
    """Per task number: its status and why, from the storage's records and the Airflow task instance that runs
    it (with *shards* per task instance: task ``i * shards + s`` is shard ``s`` of map index ``i``)."""
    from_files = _per_task_files([f for f in job.get("files") or [] if isinstance(f, dict)])
    kept = set((job.get("aborted") or {}).get("kept_committed_tasks") or [])
    v2 = str(job.get("algorithm")) == "2"
    state = job.get("state")
    tasks = {t["task"]: t for t in job.get("tasks") or []}
    out = []
    for n in sorted(set(tasks) | {i * shards + s for i in writes for s in range(shards)}):
        t = tasks.get(n, {})
        map_index, shard = divmod(n, shards)
        ti = writes.get(map_index)
        ti_state = ti.state if ti else None
        failed = list(t.get("failed_attempts") or [])
        aid = committed_attempt(t)
        if aid is not None and "rows" not in t:
            t = {**t, **from_files.get(n, {"rows": None, "bytes": 0})}
        status: str
        if aid is not None:
            if t.get("recovered_from_app") is not None:
                status, why = "recovered", (f"attempt {aid} committed in application attempt "
                                            f"{t['recovered_from_app']}; application attempt {t.get('app_attempt')} "
                                            "adopted it without running your code")
            elif state == "failed" and n in kept:
                status, why = "kept", (f"attempt {aid} committed; the failed run's teardown kept its files hidden "
                                       "under _temporary, so a clear of the run recovers it instead of running it")
            else:
                status, why = "committed", f"attempt {aid} committed (its commit record is the decision)"
            why += _fenced(failed)
        elif v2 and state == "failed" and ti_state == "success" and ti is not None and ti.try_number in _tries(failed):
            status, why = "withdrawn", ("committed at its task commit (v2: files visible at once), then withdrawn "
                                        "by the abort of the failed run: v2 cannot keep committed tasks")
        elif t.get("unfinished_attempts") and ti_state in ("running", "queued", "scheduled", "deferred",
                                                           "up_for_retry", "restarting", None):
            status, why = "running", "a try is set up and has no fate yet: it is writing"
        elif ti_state in ("failed", "upstream_failed"):
            status, why = "failed", ("the Airflow task failed; no attempt of it committed" if shards == 1 else
                                     "the Airflow task instance failed; no attempt of this shard committed")
        elif ti_state == "up_for_retry":
            status, why = "retrying", "a try failed; Airflow runs the next try, which fences the failed one first"
        elif t.get("unfinished_attempts"):
            status, why = "unfinished", ("set up with no fate: killed, or still running as a zombie; the next try "
                                         "or the teardown records it failed")
        elif failed or t.get("denied_attempts"):
            status, why = "failed", "no attempt committed" + _fenced(failed)
        else:
            status, why = "waiting", "not started yet"
        out.append(TaskRow(task=n, map_index=map_index, shard=shard if shards > 1 else None, status=status, why=why,
                           airflow_state=ti_state,
                           try_number=ti.try_number if ti else None, committed_attempt=aid,
                           recovered_from_app=t.get("recovered_from_app"),
                           files=t.get("files", 0) if aid else 0, rows=t.get("rows") if aid else 0,
                           bytes=t.get("bytes", 0) if aid else 0, failed_attempts=failed,
                           denied_attempts=list(t.get("denied_attempts") or []),
                           unfinished_attempts=list(t.get("unfinished_attempts") or []),
                           duration=ti.duration if ti else None))
    return out


def _numbers(ns: Sequence[int]) -> str:
    ns = sorted(ns)
    if len(ns) == 1:
        return f"task {ns[0]}"
    if len(ns) > 12:
        return f"{len(ns)} tasks"
    return "tasks " + ", ".join(map(str, ns[:-1])) + f" and {ns[-1]}"


def next_steps(job: Mapping[str, Any], rows: Sequence[TaskRow], commit_ti: TaskInstanceRow | None) -> list[str]:
    """What a clear or a retry would do now, in a sentence or two."""
    state = job.get("state")
    if job.get("replaced_by"):
        return [f"This run's generation {job.get('generation')} of job {job.get('job_id')} "
                f"{'committed, then was' if state == 'committed' else 'was'} replaced by {job['replaced_by']} "
                "(the same job_key): the target holds that run's rows now; its Commit status shows its tasks."]
    v2 = str(job.get("algorithm")) == "2"
    app = job.get("app_attempt")
    done = [r.task for r in rows if r.status in DONE]
    todo = [r.task for r in rows if r.status not in DONE]
    if state == "committed":
        return ["Nothing to do: the data is published and _SUCCESS is written. Clearing this run recomputes the "
                "stage as a new generation whose commit replaces this job's files (never duplicates them)."]
    if state == "committing":
        steps = ["The job commit has started (its plan is fixed) and rolls forward only: the teardown will not "
                 "abort it."]
        if commit_ti is not None and commit_ti.state in ("failed", "upstream_failed", "up_for_retry"):
            steps.append("Retry or clear the commit task: it resumes the commit from its plan; no write runs again.")
        return steps
    if state == "failed":
        if v2:
            removed = (job.get("aborted") or {}).get("visible_files_removed")
            return [f"The failed run's teardown removed this job's visible files ({removed}); v2 cannot keep "
                    f"committed tasks. Clear the DAG run: setup opens application attempt {(app or 0) + 1} and "
                    f"every task runs again."]
        if done and todo:
            return [f"Clear the DAG run (or the stage's setup task with its downstream tasks): setup opens "
                    f"application attempt {(app or 0) + 1}; {_numbers(done)} will be recovered (your code is not "
                    f"called), {_numbers(todo)} will run."]
        return [f"Clear the DAG run: setup opens application attempt {(app or 0) + 1} and "
                f"{'every task runs again' if not done else 'every task is recovered; only the commit runs'}."]
    if state == "running":
        failed = [r.task for r in rows if r.status == "failed"]
        retrying = [r.task for r in rows if r.status == "retrying"]
        steps = []
        if retrying:
            steps.append(f"Airflow retries {_numbers(retrying)} by itself: the next try first records the failed "
                         f"one failed, then writes and commits in application attempt {app}.")
        if failed:
            keep = f"; {_numbers(done)} stay committed and are not run again" if done else ""
            steps.append(f"{_numbers(failed).capitalize()} failed. \"Clear only failed tasks\" re-runs "
                         f"{'it' if len(failed) == 1 else 'them'} in application attempt {app}{keep}; once the "
                         f"teardown has run, clear the whole run instead (committed tasks are recovered).")
        if not steps:
            steps.append(f"Writing: {len(done):,} of {len(rows):,} task(s) committed." if rows else "Writing.")
        return steps
    if state == "unreadable":
        return ["The storage could not be read from the api-server: check the connection and that the api-server "
                "has this package and the storage's credentials."]
    if state == "absent":
        return ["The stage's setup has not run yet in this run."]
    return []


def table_text(table: Any) -> str | None:
    """The table version or snapshot a committed job produced, as the view shows it."""
    if not isinstance(table, Mapping) or not table.get("format"):
        return None
    if "version" in table:
        return f"{table['format']} {table.get('table')} version {table['version']}"
    if "snapshot_id" in table:
        return f"{table['format']} {table.get('table')} snapshot {table['snapshot_id']}"
    return f"{table['format']} {table.get('table')} (no transaction: nothing to add)"


def timeline(job: Mapping[str, Any], commit_summary: Mapping[str, Any] | None) -> tuple[list[CommitStageTime],
                                                                                           float | None]:
    """The job commit's stages, from ``_SUCCESS`` (the stages up to its own writing) and the commit task's summary
    (which also has ``markers`` and ``cleanup_after_success``) when it is of the same generation."""
    durations = dict(job.get("durations") or {})
    if commit_summary and commit_summary.get("job_uuid") == job.get("job_uuid"):
        durations.update(commit_summary.get("durations") or {})
    stages = [CommitStageTime(name=k, seconds=float(durations[k])) for k in COMMIT_STAGES
              if isinstance(durations.get(k), (int, float))]
    total = durations.get("total")
    return stages, float(total) if isinstance(total, (int, float)) else None


class StageModel:
    """One stage, read: its summary and every task row (kept on the server; pages are cut from it)."""

    def __init__(self, setup_task_id: str, stage_name: str, job: Mapping[str, Any], snapshot: RunSnapshot,
                 commit_summary: Mapping[str, Any] | None) -> None:
        roles = stage_roles(setup_task_id, snapshot.task_instances)
        shards = shards_per_task(job)
        self.rows = [] if job.get("replaced_by") else task_rows(job, roles["writes"], shards)
        self.files = [f for f in job.get("files") or [] if isinstance(f, dict)]
        counts = Counter(r.status for r in self.rows)
        aborted = job.get("aborted")
        failure = job.get("commit_failure")
        stages, total = timeline(job, commit_summary)
        totals = job.get("totals")
        self.summary = Stage(
            stage=stage_name, setup_task_id=setup_task_id, write_task_id=roles["write_task_id"],
            job_id=job.get("job_id"), state=job.get("state", "unreadable"), error=job.get("error"),
            job_uuid=job.get("job_uuid"), generation=job.get("generation"), app_attempt=job.get("app_attempt"),
            committer=job.get("committer"),
            algorithm=None if job.get("algorithm") is None else str(job.get("algorithm")), mode=job.get("mode"),
            target=job.get("output"), started=job.get("started"), finished=job.get("finished"),
            tasks_total=len(self.rows), tasks_done=sum(counts[s] for s in DONE), counts=dict(counts),
            totals=Totals(**{k: totals.get(k) for k in Totals.model_fields}) if totals else None,
            timeline=stages, total_seconds=total,
            aborted=Abort(at=aborted.get("at"), kept_tasks=list(aborted.get("kept_committed_tasks") or []),
                          visible_files_removed=aborted.get("visible_files_removed") or 0) if aborted else None,
            commit_failure=CommitFailure(**{k: failure.get(k) for k in CommitFailure.model_fields})
            if isinstance(failure, dict) else None,
            next_steps=next_steps(job, self.rows, roles.get("commit")),
            partial_output_visible=str(job.get("algorithm")) == "2", files_total=len(self.files),
            shards_per_task=shards, table=table_text(job.get("table")), replaced_by=job.get("replaced_by"))

    def page(self, version: str, status: str | None, offset: int, limit: int, task: int | None,
             map_index: int | None = None,
             order: Callable[[Sequence[TaskRow]], list[TaskRow]] | None = None) -> TaskPage:
        """The rows of *status* (all: ``None``), of one *task*, or of one write task instance (*map_index*: its
        shards), in *order* (:func:`~.task_order.sort_rows`; task order by default)."""
        rows = [r for r in self.rows if (status is None or r.status == status) and (task is None or r.task == task)
                and (map_index is None or r.map_index == map_index)]
        if order is not None:
            rows = order(rows)
        limit = max(1, min(limit, MAX_PAGE))
        return TaskPage(version=version, setup_task_id=self.summary.setup_task_id, status=status, total=len(rows),
                        offset=offset, limit=limit, items=rows[offset:offset + limit])

    def file_page(self, version: str, offset: int, limit: int) -> FilePage:
        limit = max(1, min(limit, MAX_PAGE))
        return FilePage(version=version, setup_task_id=self.summary.setup_task_id, target=self.summary.target,
                        total=len(self.files), offset=offset, limit=limit,
                        items=[FileRow(path=str(f.get("path")), size=int(f.get("size") or 0), rows=f.get("rows"),
                                       task=f.get("task")) for f in self.files[offset:offset + limit]])


class RunModel:
    """A run, read at one version: the summary and each stage's model."""

    def __init__(self, dag_id: str, run_id: str, version: str, snapshot: RunSnapshot,
                 stages: Sequence[StageModel]) -> None:
        self.stages = {s.summary.setup_task_id: s for s in stages}
        has = bool(snapshot.setup_task_ids) or bool(stages)
        # only a run that is queued or running changes by itself: a finished run (a stage left "running" by a
        # failed run whose teardown did not run, a run without stages) is never polled
        live = has and snapshot.active
        self.live = live
        self.summary = RunStatus(dag_id=dag_id, run_id=run_id, version=version, run_state=snapshot.run_state,
                                 has_stages=has, live=live, stages=[s.summary for s in stages])
