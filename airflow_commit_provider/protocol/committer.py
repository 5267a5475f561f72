"""Hadoop's OutputCommitter in Python, and FileOutputCommitter (algorithms 1 and 2) over any coordinated store.

A Hadoop user should find the operations where they expect them:

=========================  ==========================================================================
``setup_job()``            job record (once per generation), next application attempt, target exists
``setup_task(t, a)``       work directory of task attempt *a* of task *t*
``needs_task_commit(ta)``  ``False`` only when this attempt has already committed
``commit_task(ta)``        the commit decision (exclusive creation of the task commit record), then
                           its effect: v1 moves the files into the application attempt's
                           ``_committed`` directory (local disk), v2 into the output
``abort_task(ta)``         marks the attempt failed (it can never commit later) and deletes its files
``recover_task(t)``        adopts a task committed in an earlier application attempt, no data rewritten
``commit_job(tasks)``      verifies completeness, fixes a plan, moves (in parallel on object stores),
                           replaces old data, writes the commit log and ``_SUCCESS`` (the last write),
                           then deletes ``_temporary/<job>``; resumable
``abort_job()``            removes this job's work (and, for v2, its already visible files)
=========================  ==========================================================================

The committer is a thin facade: it builds the job's configuration (:class:`~.config.CommitConfig`, validated once)
and scope (:class:`~.job.Job`), and each method hands over to the module that owns the step: :mod:`.jobsetup`,
:mod:`.tasks.attempts`, :mod:`.jobcommit`, :mod:`.abort`, :mod:`.status`. Every decision is a record on the store
(:mod:`.records`), so any process can build a committer for a job and act on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from . import jobcommit
from .abort import abort_job
from .config import CommitConfig, check_number
from .errors import JobIncomplete, JobNotSetUp
from .job import Job
from .jobsetup import JobContext, setup_job
from .layout import JobLayout
from .owners import RunFinished
from .records.job import CommitLog, JobRecord
from .status import JobStatus
from .stores import Store, store_for
from .tables.common import TableTarget
from .tasks.attempts import TaskAttempts
from .tasks.context import TaskAttemptContext


class OutputCommitter(ABC):
    """Hadoop's OutputCommitter contract."""

    @abstractmethod
    def setup_job(self, *, replace_files: Iterable[str] = (), replace_first: bool = False,
                  run_finished: RunFinished | None = None) -> JobContext: ...

    @abstractmethod
    def setup_task(self, task: int, attempt: int, *, inputs: str | None = None) -> TaskAttemptContext: ...

    @abstractmethod
    def needs_task_commit(self, ta: TaskAttemptContext) -> bool: ...

    @abstractmethod
    def commit_task(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None = None, *,
                    sizes: Mapping[str, int] | None = None, schema: pa.Schema | None = None) -> dict[str, Any]: ...

    @abstractmethod
    def abort_task(self, ta: TaskAttemptContext) -> bool: ...

    @abstractmethod
    def recover_task(self, task: int, *, inputs: str | None = None) -> dict[str, Any] | None: ...

    def is_recovery_supported(self) -> bool:
        return True

    @abstractmethod
    def commit_job(self, expected_tasks: int | Iterable[int] | None = None) -> dict[str, Any]: ...

    @abstractmethod
    def abort_job(self, *, keep_committed: bool = False) -> dict[str, Any]: ...


class FileOutputCommitter(OutputCommitter):
    """Hadoop's FileOutputCommitter, algorithms 1 and 2 (and S3's magic committer), scoped per job, with recovery
    and resumable job commit.

    :param output: output root: local path, ``memory://...``, ``s3://...`` or a :class:`Store`.
    :param job_id: stable across retries and clears of the job (one write stage of one DAG run).
    :param config: a :class:`~.config.CommitConfig`; or give its fields as keywords (``algorithm``, ``mode``,
        ``partition_by``, ``commit_threads``, ``labels``, ``part_size``, ``durable``, ``names``), validated there.
    :param table: a Delta or Iceberg table (:mod:`.tables`) whose data root is *output*: job commit then publishes
        the files into it with one table transaction (algorithm 1 only; partition columns stay in the files).
    """

    def __init__(self, output: Any, job_id: str, config: CommitConfig | None = None, *, fs: Any = None,
                 storage_options: dict[str, Any] | None = None, table: TableTarget | None = None,
                 **settings: Any) -> None:
        self.config = config if config is not None else CommitConfig(**settings)
        if config is not None and settings:
            raise TypeError(f"give a CommitConfig or its fields, not both (got {sorted(settings)} too)")
        store = store_for(output, fs=fs, storage_options=storage_options, durable=self.config.durable)
        #: the job's scope: every step below hands over to the module that owns it, with this
        self.job = Job(store, job_id, self.config, table)
        self.attempts = TaskAttempts(self.job)

    def twin(self) -> FileOutputCommitter:
        """Another committer of the same job, for another thread (a committer is not shared between threads):
        the same store (and the connection behind it), configuration and table. Built from these three, never
        from fewer: a twin without the table is a committer of another target, which the job refuses."""
        return type(self)(self.store, self.job_id, self.config, table=self.table)

    # ------------------------------------------------------------------ what the job is
    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def table(self) -> TableTarget | None:
        """The table job commit publishes into, or ``None`` for a directory of files."""
        return self.job.table

    @property
    def store(self) -> Store:
        return self.job.store

    @property
    def layout(self) -> JobLayout:
        return self.job.layout

    @property
    def mode(self) -> str:
        return self.job.mode.name

    @property
    def algorithm(self) -> int | str:
        return self.config.algorithm

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.config.partition_by

    @property
    def labels(self) -> dict[str, Any]:
        return dict(self.config.labels)

    @property
    def commit_threads(self) -> int:
        return self.job.commit_threads

    @property
    def committer_name(self) -> str:
        """What the committer is (recorded in the job record and ``_SUCCESS``): FileOutputCommitter, or
        MagicCommitter for the S3 multipart committer."""
        return self.job.publisher.committer_name

    @property
    def algorithm_name(self) -> str:
        return self.job.publisher.label

    def job_record(self) -> JobRecord | None:
        """The current generation's job record, or ``None`` (never set up, or committed and cleaned up)."""
        return self.job.job_record()

    def commit_log(self) -> CommitLog | None:
        """The job's commit log (``_commits/<job>.json``): the last committed generation's manifest."""
        return self.job.commit_log()

    # ------------------------------------------------------------------ job setup
    def setup_job(self, *, replace_files: Iterable[str] = (), replace_first: bool = False,
                  run_finished: RunFinished | None = None) -> JobContext:
        """Allocate the next application attempt; create the job record and the target on the first one.

        *replace_files* (the first call of a generation only): existing files this job's commit replaces
        (a compaction's inputs). They are recorded with their sizes and versions, and job commit refuses
        (:class:`InputsChanged`, before anything visible changes) when one of them is gone or changed since. They
        are deleted after the new files are in place, unless *replace_first*: for a job whose new files hold the
        same rows as the old ones (compaction), the safe order is the reverse -- a reader may briefly miss rows
        (they are committed and will be published by the resume), but never sees one twice.

        Idempotent in effect and never touches committed work: a re-run after a successful commit starts a new
        generation (new job uuid) whose commit will replace the previous generation's files; a re-run while a job
        commit is under way changes nothing, so that the commit can be resumed. In mode ``error`` it refuses at
        once, naming the owner, when another job has claimed the target (:mod:`.targetclaim`).

        With an owner in the configuration (the DAG run, :mod:`.owners`) the application attempt is recorded as
        that run's, and the setup refuses (:class:`OverlappingRun`, before anything changes) when the job's
        current attempt is another run's that has not ended: the job's records say so (its teardown's abort
        record) or *run_finished* (asked about that run: ``True`` ended, ``False`` running, ``None`` unknown).
        """
        return setup_job(self.job, replace_files=replace_files, replace_first=replace_first,
                         run_finished=run_finished)

    # ------------------------------------------------------------------ task attempts (:mod:`.tasks.attempts`)
    def setup_task(self, task: int, attempt: int, *, inputs: str | None = None) -> TaskAttemptContext:
        """Create the work directory of one task attempt in the current application attempt; *inputs* (an opaque
        digest of what the attempt was given) goes into its commit record, for :meth:`recover_task`.

        The attempt leaves a trace first (see :mod:`.attempts`), and every earlier attempt of the task in this
        application attempt that has neither committed nor been recorded failed is recorded failed now and its
        files removed: a new Airflow try means the earlier one was killed or lost, and if it is in fact a zombie
        still running, it can no longer commit. Attempt numbers must grow (Airflow's try numbers do).
        """
        return self.attempts.setup(task, attempt, inputs=inputs)

    def needs_task_commit(self, ta: TaskAttemptContext) -> bool:
        """Every attempt needs a commit record, even with no files (job commit counts tasks, I3); ``False``
        only when this very attempt is already recorded as the task's committer."""
        return self.attempts.needs_commit(ta)

    def commit_task(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None = None, *,
                    sizes: Mapping[str, int] | None = None, schema: pa.Schema | None = None,
                    stats: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Commit one task attempt, or raise :class:`CommitDenied` after removing its files.

        *rows* and *sizes* are what the writer reports (file -> rows, file -> bytes; :class:`TaskAttemptWriter`
        keeps both): every reported file must be in the attempt's directory with that size, or the commit is
        refused and the attempt recorded failed, so an attempt whose files someone removed cannot commit an empty
        or partial record. The decision is the exclusive creation of the task commit record, after the attempt's
        fate was claimed ``committing``; everything after it (rename, moves) is an effect any later party can
        finish from the record. Asking again as the winner returns the record.

        *schema*: the Arrow schema of the Parquet files the writer made (:attr:`TaskAttemptWriter.schema`), recorded
        as a digest so the job commit keeps one schema per job (:mod:`.schemas`); with algorithm 2 a task of
        another schema than the job's published tasks is refused here, before it publishes.

        *stats*: the column statistics of those files (:attr:`TaskAttemptWriter.stats`), recorded for an audit
        (:mod:`.audit`).
        """
        return self.attempts.commit(ta, rows, sizes, schema, stats)

    def open_task_file(self, ta: TaskAttemptContext, rel: str) -> Any:
        """A writable binary file for *rel* (relative to the output root) in task attempt *ta* (the magic committer
        gives a pending multipart upload to the final key)."""
        self.job.publisher.check_task_file(rel, ta.job_uuid)
        return self.job.publisher.open_task_file(ta.work_dir, rel)

    def abort_task(self, ta: TaskAttemptContext) -> bool:
        """Mark the attempt failed, so it can never commit, and delete its files.

        Returns ``False`` and changes nothing when the attempt had already started to commit (its claim is
        ``committing``): a commit in flight wins over a late abort, and a denied commit removes its own files.
        """
        return self.attempts.abort(ta)

    def recover_task(self, task: int, *, inputs: str | None = None) -> dict[str, Any] | None:
        """The task's commit record in the current application attempt, adopting one from an earlier attempt.

        Hadoop moves ``<app-1>/<task>`` into ``<app>``; we create a record in the current attempt that points at the
        earlier attempt's committed data, so recovery is one atomic step with no data moved (no copy on S3).
        ``None`` when no application attempt of this generation committed the task, or when a job commit refused
        its commit for good (a schema the table lacks: :mod:`.records.refused`), so that it runs again.

        *inputs*: an opaque digest of what the task is given now (the write operators: its rendered arguments).
        A commit made for other inputs is not recovered either (``None``: the task runs again with them); one of
        the current application attempt raises :class:`TaskInputsChanged`. ``None`` on either side: any inputs.
        """
        check_number(task, "task")
        job = self.job.require_job()
        return self._recover(job, task, inputs)[0]

    def recover_or_setup_task(self, task: int, attempt: int, *, inputs: str | None = None
                              ) -> tuple[dict[str, Any] | None, TaskAttemptContext | None]:
        """:meth:`recover_task`, then, when the task is not committed, :meth:`setup_task` of *attempt*: ``(record,
        None)`` or ``(None, context)``. What a write task does first, with the job record and the application
        attempts read once for both steps (on S3 each read is a request). *inputs*: as for both."""
        check_number(task, "task")
        check_number(attempt, "attempt")
        job = self.job.require_job()
        rec, app = self._recover(job, task, inputs)
        if rec is not None:
            return rec, None
        return None, self.attempts.setup(task, attempt, job, app, inputs)

    def _recover(self, job: JobRecord, task: int, inputs: str | None) -> tuple[dict[str, Any] | None, int]:
        """The task's record (recovered, or ``None``) and the current application attempt, from one listing of
        the job directory (the application attempts and the commits a job commit refused are named there)."""
        names = self.store.list_dir(self.layout.job_dir)
        apps = self.job.own_app_attempts(job, names)
        rec = self.attempts.recover(job, apps[0], task, apps, self.job.refused_tasks(job, names), inputs)
        return (None if rec is None else rec.to_doc()), apps[0]

    # ------------------------------------------------------------------ job commit
    def commit_job(self, expected_tasks: int | Iterable[int] | None = None, *,
                   defer_cleanup: bool = False, gate: Any = None) -> dict[str, Any]:
        """Commit the job: the output then holds exactly one committed attempt of every expected task.

        *expected_tasks* is a task count (``range(n)``) or the task numbers; ``None`` means every task that set up an
        attempt. A crash at any point is finished by calling this again; the result is the same as an uninterrupted
        run. Returns the ``_SUCCESS`` manifest.

        With *defer_cleanup*, the job's records (renamed in one step into ``_temporary/_trash`` on a local disk)
        are left for :meth:`remove_trash`: the commit returns without deleting three records per task. Object
        stores have no such rename; there the records are always deleted here, in batches.

        *gate*: what the commit requires before it fixes its plan, nothing changed otherwise: an audited stage's
        :class:`~.audit.run.AuditGate` (a passing audit of exactly the tasks it publishes).
        """
        return jobcommit.commit_job(self.job, expected_tasks, defer_cleanup=defer_cleanup, gate=gate)

    def remove_trash(self) -> int:
        """Delete this job's committed directories that a cleanup renamed into ``_temporary/_trash``; returns how
        many. Safe at any time, from any process (:meth:`.job.Job.remove_trash`)."""
        return self.job.remove_trash()

    def committed_task_record(self, task: int) -> dict[str, Any]:
        """A committed job's record of one task, rebuilt from the commit log (the live records are cleaned up)."""
        log = self.job.commit_log()
        if log is None:
            raise JobNotSetUp(f"job {self.job_id} has no commit log at {self.store.url(self.layout.commit_log)}")
        rec = log.task_record(task)
        if rec is None:
            raise JobIncomplete(f"committed job {self.job_id} has no task {task}", [task])
        return rec

    # ------------------------------------------------------------------ status and abort
    def status(self) -> dict[str, Any]:
        """The job as the storage tells it (:mod:`.status`): ``absent``, ``running``, ``failed`` (aborted,
        committed tasks kept), ``committing`` or ``committed``, with per-task attempts, and the last failed
        commit's summary (``commit_failure``) while the generation is uncommitted. Reads only."""
        status = JobStatus(self.job).status()
        if status["state"] != "committed":
            failure = jobcommit.read_failure(self.job)
            if failure is not None and failure.get("job_uuid") == status.get("job_uuid"):
                status["commit_failure"] = failure
        return status

    def abort_job(self, *, keep_committed: bool = False) -> dict[str, Any]:
        """Remove this job's uncommitted work, leaving the target as it was before the job (:mod:`.abort`).

        Every uncommitted attempt is first recorded failed (I10), so a zombie of it can never commit afterwards;
        an attempt that had already claimed its commit is left alone (its commit may still finish, and then counts).
        With *keep_committed*, committed tasks stay, hidden under ``_temporary``, for a later application attempt to
        recover: a failed DAG run that is cleared then recomputes only what is missing. v2 tasks cannot be kept:
        their files were visible; each is recorded failed, its record removed, then its files.

        Refuses (returns ``state="committing"``) once a job commit has fixed its plan: from then on only rolling
        forward is safe, and the next ``commit_job`` finishes the commit. Never touches another job's work. In mode
        ``error`` it frees the target's claim if this job holds it and none of its generations committed
        (:mod:`.targetclaim`).
        """
        return abort_job(self.job, keep_committed=keep_committed)


def make_committer(output: Any, job_id: str, *, algorithm: int | str = 1, **kwargs: Any) -> FileOutputCommitter:
    """The committer for *algorithm*: 1 or 2 (Hadoop's FileOutputCommitter) or ``"magic"`` (S3's multipart
    committer; ``part_size`` applies to it only)."""
    return FileOutputCommitter(output, job_id, algorithm=algorithm, **kwargs)


__all__ = ["FileOutputCommitter", "OutputCommitter", "make_committer"]
