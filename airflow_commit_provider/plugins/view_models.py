"""The Commit status view's response models: the typed JSON its React app renders (``plugins/ui/src/api.ts``
mirrors them). Built by :mod:`.read_model`, served by :mod:`.app`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..protocol.jobcommit.names import COMMIT_STAGES
from .advice import Action
from .audit_view import AuditView

#: ``purged``: the run's setup ran, and no record of its job is left; ``refused``: its setup was refused for good
StageState = Literal["purged", "refused", "running", "committing", "committed", "failed", "unreadable"]
TaskStatus = Literal["committed", "recovered", "kept", "withdrawn", "committing", "running", "retrying", "failed",
                     "unfinished", "waiting", "refused"]


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
    #: attempts whose claim to commit holds while no record of the task exists yet (status ``committing``): not
    #: denied, whatever ``status()`` lists them as
    committing_attempts: list[str] = Field(default_factory=list)


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
    #: what gets the stage out of its state (:mod:`.advice`), and how, in sentences
    action: Action = "none"
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
    #: the stage's audit (``commit_stage(audit=...)``) and its approval, once it ran (:mod:`.audit_view`)
    audit: AuditView | None = None


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
