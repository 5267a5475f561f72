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

Every decision is a record on the store (see :mod:`.records`), so the committer object holds configuration only
and any process can build one for a job and act on it.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from . import records
from .tasks.ledger import AttemptLedger
from .errors import (
    CommitProtocolError,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    JobConfigMismatch,
    JobIncomplete,
    JobNotSetUp,
)
from .faults import inject
from .records.inputs import record_inputs
from .layout import COMMITS, TEMPORARY, TRASH, JobLayout, check_job_id
from .paths import check_partition_key, check_relative
from .abort import abort_job
from .jobcommit import StageClock, run_job_commit
from .publish.magic import MultipartPublisher
from .publish import MovePublisher, Publisher, RenamePublisher, TaskCommitPublisher
from .status import JobStatus
from .stores import Store, store_for
from .targetclaim import TargetClaim
from .records.job import CommitLog, CommitPlan, JobRecord, Replaces
from .tasks.attempts import TaskAttemptContext, TaskAttempts, check_number

MODES = ("error", "append", "overwrite", "dynamic")
_ALGORITHMS: dict[str, int | str] = {"1": 1, "v1": 1, "2": 2, "v2": 2, "magic": "magic"}



def normalize_algorithm(algorithm: int | str) -> int | str:
    """``1``/``"v1"``/``"1"`` -> 1, ``2``/``"v2"`` -> 2, ``"magic"``; anything else is refused by name."""
    key = str(algorithm).strip().lower()
    if key not in _ALGORITHMS or isinstance(algorithm, bool):
        raise InvalidOutputSpec(
            f"unknown committer algorithm {algorithm!r}: use 1 (v1, atomic job commit), 2 (v2, task commit moves "
            "files into the output; faster, partial output visible on failure) or 'magic' (S3, zero copy)")
    return _ALGORITHMS[key]


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidOutputSpec(f"unknown output mode {mode!r}: use one of {', '.join(MODES)}")
    return mode


@dataclass(frozen=True)
class JobContext:
    """What :meth:`OutputCommitter.setup_job` established: the generation and the application attempt."""

    job_id: str
    job_uuid: str
    generation: int
    app_attempt: int
    first_app_attempt: int
    #: ``"running"``, or ``"committing"`` when a job commit had already started (setup then changes nothing)
    state: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class OutputCommitter(ABC):
    """Hadoop's OutputCommitter contract."""

    @abstractmethod
    def setup_job(self, *, replace_files: Iterable[str] = (), replace_first: bool = False) -> JobContext: ...

    @abstractmethod
    def setup_task(self, task: int, attempt: int) -> TaskAttemptContext: ...

    @abstractmethod
    def needs_task_commit(self, ta: TaskAttemptContext) -> bool: ...

    @abstractmethod
    def commit_task(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None = None, *,
                    sizes: Mapping[str, int] | None = None) -> dict[str, Any]: ...

    @abstractmethod
    def abort_task(self, ta: TaskAttemptContext) -> bool: ...

    @abstractmethod
    def recover_task(self, task: int) -> dict[str, Any] | None: ...

    def is_recovery_supported(self) -> bool:
        return True

    @abstractmethod
    def commit_job(self, expected_tasks: int | Iterable[int] | None = None) -> dict[str, Any]: ...

    @abstractmethod
    def abort_job(self, *, keep_committed: bool = False) -> dict[str, Any]: ...


class FileOutputCommitter(OutputCommitter):
    """Hadoop's FileOutputCommitter, algorithms 1 and 2, scoped per job, with recovery and resumable job commit.

    :param output: output root: local path, ``memory://...``, ``s3://...`` or a :class:`Store`.
    :param job_id: stable across retries and clears of the job (one write stage of one DAG run).
    :param algorithm: 1 (task output hidden until job commit) or 2 (task commit moves files into the output).
    :param mode: ``error`` (target must hold no data; the first job to commit claims it, :mod:`.targetclaim`),
        ``append``, ``overwrite`` (old data replaced at job commit), ``dynamic`` (only the partitions this job
        wrote are replaced).
    :param partition_by: partition columns, in directory order.
    :param commit_threads: parallel file moves at job commit; default depends on the store.
    :param labels: free-form JSON values copied into ``_SUCCESS`` (dag id, run id, ...).
    :param durable: on a local disk, fsync what each step needs so that a committed state survives a power cut
        (README, "Guarantees"); ``False`` for scratch targets. Object stores are durable per request either way.
    """

    def __init__(self, output: Any, job_id: str, *, algorithm: int | str = 1, mode: str = "error",
                 partition_by: Iterable[str] = (), commit_threads: int | None = None, fs: Any = None,
                 storage_options: dict[str, Any] | None = None, labels: Mapping[str, Any] | None = None,
                 part_size: int | None = None, durable: bool = True) -> None:
        self.store: Store = store_for(output, fs=fs, storage_options=storage_options, durable=durable)
        self.job_id = check_job_id(job_id)
        self.algorithm = normalize_algorithm(algorithm)
        self.mode = check_mode(mode)
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        self.partition_by = tuple(check_partition_key(k) for k in partition_by)
        if len(set(self.partition_by)) != len(self.partition_by):
            raise InvalidOutputSpec(f"partition columns repeat: {self.partition_by}")
        if self.mode == "dynamic" and not self.partition_by:
            raise InvalidOutputSpec("mode='dynamic' replaces the partitions a job writes, so it needs partition_by")
        if commit_threads is not None:
            check_number(commit_threads, "commit_threads")
            if commit_threads < 1:
                raise InvalidOutputSpec("commit_threads must be at least 1")
        self.commit_threads = commit_threads or self.store.default_commit_threads
        self.labels = dict(labels or {})
        self.layout = JobLayout(self.job_id)
        self.ledger = AttemptLedger(self.store, self.layout)
        #: mode ``error``: which job owns the target (:mod:`.targetclaim`)
        self.target_claim = TargetClaim(self.store, self.layout)
        #: everything this committer does differently per algorithm and store (:mod:`.publish`)
        self.publisher = publisher_for(self.algorithm, self.store, self.layout, self.job_id, self.commit_threads,
                                       part_size=part_size)
        #: the task side: set-up, commit decision, abort and recovery of the job's task attempts
        self.attempts = TaskAttempts(self)
        self.status_reader = JobStatus(self)

    @property
    def committer_name(self) -> str:
        """What the committer is (recorded in the job record and ``_SUCCESS``): FileOutputCommitter, or
        MagicCommitter for the S3 multipart committer."""
        return self.publisher.committer_name

    # ------------------------------------------------------------------ records
    @property
    def algorithm_name(self) -> str:
        return self.publisher.label

    def _config(self) -> dict[str, Any]:
        return {"committer": self.committer_name, "algorithm": self.publisher.algorithm, "mode": self.mode,
                "partition_by": list(self.partition_by)}

    def job_record(self) -> JobRecord | None:
        """The current generation's job record, or ``None`` (never set up, or committed and cleaned up)."""
        return JobRecord.read(self.store, self.layout.job_record)

    def commit_log(self) -> CommitLog | None:
        """The job's commit log (``_commits/<job>.json``): the last committed generation's manifest."""
        return CommitLog.read(self.store, self.layout.commit_log)

    def commit_plan(self, job: JobRecord) -> CommitPlan | None:
        """The plan of *job*'s commit, once one was fixed (then the job is committing)."""
        return CommitPlan.read(self.store, self.layout.plan(job.job_uuid))

    def require_job(self) -> JobRecord:
        """The current generation's job record, with this committer's configuration; :class:`JobNotSetUp` or
        :class:`JobAlreadyCommitted` when there is none."""
        job = self.job_record()
        if job is None:
            if self.commit_log() is not None:
                raise JobAlreadyCommitted(
                    f"job {self.job_id} at {self.store.url()} is committed and cleaned up; a new generation starts "
                    "only through setup_job()")
            raise JobNotSetUp(f"job {self.job_id} has no job record at {self.store.url(self.layout.job_record)}; "
                              "run setup_job() first")
        self._check_config(job)
        return job

    def _check_config(self, job: JobRecord) -> None:
        if job.config() != self._config():
            raise JobConfigMismatch(
                f"job {self.job_id} was set up with {job.config()}, but this committer has {self._config()}; "
                "a job keeps its committer, algorithm, mode and partitioning across attempts")

    def app_attempts(self, job: JobRecord, names: Iterable[str] | None = None) -> list[int]:
        """The generation's application attempts, newest first (*names*: the job directory's, when the caller
        has just listed it)."""
        names = self.store.list_dir(self.layout.job_dir) if names is None else names
        apps = sorted((int(n) for n in names if n.isdigit() and int(n) >= job.first_app_attempt), reverse=True)
        return [n for n in apps if self.store.exists(self.layout.app_marker(n))]

    def plan_and_app_attempt(self, job: JobRecord) -> tuple[CommitPlan | None, int]:
        """The plan of *job*'s commit (``None`` before one is fixed) and its current application attempt, from one
        listing of the job's directory, which holds both: the plan is read only when its name is there."""
        names = self.store.list_dir(self.layout.job_dir)
        plan = self.commit_plan(job) if self.layout.plan(job.job_uuid).rsplit("/", 1)[-1] in names else None
        apps = self.app_attempts(job, names)
        if not apps:
            raise JobNotSetUp(f"job {self.job_id} has no application attempt; run setup_job() first")
        return plan, apps[0]

    def current_app_attempt(self, job: JobRecord | None = None) -> int:
        """The newest application attempt of the current generation."""
        return self._app_attempts_of(job or self.require_job())[0]

    def visible_files(self) -> set[str]:
        """Data files readers would see (names starting with ``_`` or ``.`` excluded)."""
        return set(self.store.visible_names())

    # ------------------------------------------------------------------ job setup
    def setup_job(self, *, replace_files: Iterable[str] = (), replace_first: bool = False) -> JobContext:
        """Allocate the next application attempt; create the job record and the target on the first one.

        *replace_files* (used on the first call of a generation only): existing files this job's commit replaces
        (a compaction's inputs). They are recorded with their sizes and versions, and job commit refuses
        (:class:`InputsChanged`, before anything visible changes) when one of them is gone or changed since. They
        are deleted after the new files are in place, unless *replace_first*: for a job whose new files hold the
        same rows as the old ones (compaction), the safe order is the reverse -- a reader may briefly miss rows
        (they are committed and will be published by the resume), but never sees one twice.

        Idempotent in effect and never touches committed work: a re-run after a successful commit starts a new
        generation (new job uuid) whose commit will replace the previous generation's files; a re-run while a job
        commit is under way changes nothing, so that the commit can be resumed. In mode ``error`` it refuses at
        once, naming the owner, when another job has claimed the target (:mod:`.targetclaim`).
        """
        self._check_target()
        if self.mode == "error":
            self.target_claim.refuse_other()   # fail fast: another job owns the target
        self.remove_trash()
        inject("setup_job.before_record")
        job = self.job_record()
        if job is None:
            job = self._create_job_record([check_relative(f) for f in replace_files], replace_first)
        self._check_config(job)
        plan = self.commit_plan(job)
        if plan is not None:
            return self._job_context(job, plan.app_attempt, "committing")
        apps = self.app_attempts(job)
        app = apps[0] + 1 if apps else job.first_app_attempt
        while not self.store.create_exclusive(
                self.layout.app_marker(app),
                records.dumps("app-attempt", {"app_attempt": app, "job_uuid": job.job_uuid,
                                              "started": records.now_iso(), "labels": self.labels})):
            app += 1
        inject("setup_job.after_app_attempt")
        return self._job_context(job, app, "running")

    def _job_context(self, job: JobRecord, app: int, state: str) -> JobContext:
        return JobContext(job_id=self.job_id, job_uuid=job.job_uuid, generation=job.generation,
                          app_attempt=app, first_app_attempt=job.first_app_attempt, state=state)

    def _check_target(self) -> None:
        if self.store.exists("") and not self.store.isdir(""):
            raise InvalidOutputSpec(f"output root {self.store.url()} is a file, not a directory")
        # _temporary on another volume, or a link: found here, not at a rename half way through the commit
        self.store.check_tree([self.layout.job_dir, COMMITS])

    def _create_job_record(self, replace_files: list[str], replace_first: bool) -> JobRecord:
        log = self.commit_log()
        replaces = None
        generation, first_app = 0, 0
        if log is not None:
            generation, first_app = log.generation + 1, log.app_attempt + 1
            replaces = Replaces(log.job_uuid, log.generation, tuple(f["path"] for f in log.files))
        # Never reuse an application attempt directory a zombie of a purged generation may have re-created.
        first_app = max([first_app] + [int(n) + 1 for n in self.store.list_dir(self.layout.job_dir) if n.isdigit()])
        if self.mode == "error":
            self.check_empty(set(replaces.files) if replaces else set())
        inputs = record_inputs(self.store, replace_files, self.job_id) if replace_files else ()
        self.store.ensure_root()
        config = self._config()
        record = JobRecord(config["committer"], config["algorithm"], self.mode, self.partition_by, self.job_id,
                           str(uuid.uuid4()), generation, first_app, records.now_iso(), self.labels, replaces,
                           tuple(replace_files), replace_first, inputs)
        self.store.create_exclusive(self.layout.job_record, record.to_json())
        job = self.job_record()
        if job is None:  # pragma: no cover - created just above, or by a concurrent setup
            raise CommitProtocolError(f"job record {self.store.url(self.layout.job_record)} vanished")
        return job

    def check_empty(self, own_files: set[str], visible: set[str] | None = None) -> None:
        """:class:`InvalidOutputSpec` when the target holds data files other than *own_files* (mode ``error``)."""
        others = sorted((self.visible_files() if visible is None else visible) - own_files)
        if others:
            shown = ", ".join(others[:5]) + (" ..." if len(others) > 5 else "")
            holder = self.target_claim.other_holder()
            owner = f" (job {holder.job_id} claimed it in mode 'error' at {holder.claimed})" if holder else ""
            raise InvalidOutputSpec(
                f"output {self.store.url()} already holds {len(others)} data file(s) ({shown}){owner} and mode is "
                "'error'; use mode='append', 'overwrite' or 'dynamic' to write there")

    # ------------------------------------------------------------------ task attempts (:mod:`.taskattempts`)
    def setup_task(self, task: int, attempt: int) -> TaskAttemptContext:
        """Create the work directory of one task attempt in the current application attempt.

        The attempt leaves a trace first (see :mod:`.attempts`), and every earlier attempt of the task in this
        application attempt that has neither committed nor been recorded failed is recorded failed now and its
        files removed: a new Airflow try means the earlier one was killed or lost, and if it is in fact a zombie
        still running, it can no longer commit. Attempt numbers must grow (Airflow's try numbers do).
        """
        return self.attempts.setup(task, attempt)

    def needs_task_commit(self, ta: TaskAttemptContext) -> bool:
        """Every attempt needs a commit record, even with no files (job commit counts tasks, I3); ``False``
        only when this very attempt is already recorded as the task's committer."""
        return self.attempts.needs_commit(ta)

    def commit_task(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None = None, *,
                    sizes: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Commit one task attempt, or raise :class:`CommitDenied` after removing its files.

        *rows* and *sizes* are what the writer reports (file -> rows, file -> bytes; :class:`TaskAttemptWriter`
        keeps both): every reported file must be in the attempt's directory with that size, or the commit is
        refused and the attempt recorded failed, so an attempt whose files someone removed cannot commit an empty
        or partial record. The decision is the exclusive creation of the task commit record, after the attempt's
        fate was claimed ``committing``; everything after it (rename, moves) is an effect any later party can
        finish from the record. Asking again as the winner returns the record.
        """
        return self.attempts.commit(ta, rows, sizes)

    def open_task_file(self, ta: TaskAttemptContext, rel: str) -> Any:
        """A writable binary file for *rel* (relative to the output root) in task attempt *ta* (the magic committer
        gives a pending multipart upload to the final key)."""
        return self.publisher.open_task_file(ta.work_dir, rel)

    def abort_task(self, ta: TaskAttemptContext) -> bool:
        """Mark the attempt failed, so it can never commit, and delete its files.

        Returns ``False`` and changes nothing when the attempt had already started to commit (its claim is
        ``committing``): a commit in flight wins over a late abort, and a denied commit removes its own files.
        """
        return self.attempts.abort(ta)

    def recover_task(self, task: int) -> dict[str, Any] | None:
        """The task's commit record in the current application attempt, adopting one from an earlier attempt.

        Hadoop moves ``<app-1>/<task>`` into ``<app>``; we create a record in the current attempt that points at the
        earlier attempt's committed data, so recovery is one atomic step with no data moved (no copy on S3).
        ``None`` when no application attempt of this generation committed the task.
        """
        check_number(task, "task")
        job = self.require_job()
        return self._recover(job, self._app_attempts_of(job), task)

    def recover_or_setup_task(self, task: int, attempt: int) -> tuple[dict[str, Any] | None, TaskAttemptContext | None]:
        """:meth:`recover_task`, then, when the task is not committed, :meth:`setup_task` of *attempt*: ``(record,
        None)`` or ``(None, context)``. What a write task does first, with the job record and the application
        attempts read once for both steps (on S3 each read is a request)."""
        check_number(task, "task")
        check_number(attempt, "attempt")
        job = self.require_job()
        apps = self._app_attempts_of(job)
        rec = self._recover(job, apps, task)
        if rec is not None:
            return rec, None
        return None, self.attempts.setup(task, attempt, job, apps[0])

    def _app_attempts_of(self, job: JobRecord) -> list[int]:
        """:meth:`app_attempts`, refusing a job with none (:class:`JobNotSetUp`)."""
        apps = self.app_attempts(job)
        if not apps:
            raise JobNotSetUp(f"job {self.job_id} has no application attempt; run setup_job() first")
        return apps

    def _recover(self, job: JobRecord, apps: list[int], task: int) -> dict[str, Any] | None:
        rec = self.attempts.recover(job, apps[0], task, apps)
        return None if rec is None else rec.to_doc()

    # ------------------------------------------------------------------ job commit
    def registered_tasks(self, job: JobRecord) -> set[int]:
        """Every task that set up an attempt or has a record in the generation (``commit_job()`` without tasks)."""
        tasks: set[int] = set()
        for app in self.app_attempts(job):
            for name in self.store.list_dir(self.layout.commits_dir(app)):
                if name.startswith("task_") and name.endswith(".json"):
                    tasks.add(int(name[5:-5]))
            tasks.update(trace.task for trace in self.ledger.traces(app))
        return tasks

    def commit_job(self, expected_tasks: int | Iterable[int] | None = None, *,
                   defer_cleanup: bool = False) -> dict[str, Any]:
        """Commit the job: the output then holds exactly one committed attempt of every expected task.

        *expected_tasks* is a task count (``range(n)``) or the task numbers; ``None`` means every task that set up an
        attempt. A crash at any point is finished by calling this again; the result is the same as an uninterrupted
        run. Returns the ``_SUCCESS`` manifest.

        With *defer_cleanup*, the job's records (renamed in one step into ``_temporary/_trash`` on a local disk)
        are left for :meth:`remove_trash`: the commit returns without deleting three records per task. Object
        stores have no such rename; there the records are always deleted here, in batches.
        """
        clock = StageClock(self.store)  # first: on S3 it times the client's start-up apart from every stage
        job = self.job_record()
        if job is None:
            log = self.commit_log()
            if log is None:
                raise JobNotSetUp(f"job {self.job_id} was never set up at {self.store.url()}")
            if not defer_cleanup:
                self.remove_trash()   # a cleanup deferred, or killed midway, by an earlier call
            # Nothing is written: _SUCCESS was written before the job record went, and if it is gone now a later
            # job withdrew it; writing it back would describe a directory that has changed since (I9).
            return dict(log.manifest)
        self._check_config(job)
        if expected_tasks is None:
            tasks = None
        elif isinstance(expected_tasks, int) and not isinstance(expected_tasks, bool):
            tasks = list(range(check_number(expected_tasks, "expected_tasks")))
        else:
            tasks = sorted({check_number(t, "task") for t in expected_tasks})
        return run_job_commit(self, job, tasks, clock, defer_cleanup)

    def remove_trash(self) -> int:
        """Delete this job's committed directories that a cleanup renamed into ``_temporary/_trash`` (see
        :class:`~.jobcommit.Cleanup`); returns how many. Nothing there is read by anyone: deleting it at any time,
        from any process, in parallel with another such call, is safe."""
        names = [name for name in self.store.list_dir(TRASH) if self.layout.is_own_trash(name)]
        for name in names:
            self.store.delete_tree(f"{TRASH}/{name}")
        if names:
            self.store.remove_dir_if_empty(TRASH)
            self.store.remove_dir_if_empty(TEMPORARY)
        return len(names)

    def committed_task_record(self, task: int) -> dict[str, Any]:
        """A committed job's record of one task, rebuilt from the commit log (the live records are cleaned up)."""
        log = self.commit_log()
        if log is None:
            raise JobNotSetUp(f"job {self.job_id} has no commit log at {self.store.url(self.layout.commit_log)}")
        rec = log.task_record(task)
        if rec is None:
            raise JobIncomplete(f"committed job {self.job_id} has no task {task}", [task])
        return rec

    # ------------------------------------------------------------------ status and abort
    def status(self) -> dict[str, Any]:
        """The job as the storage tells it (:mod:`.status`): ``absent``, ``running``, ``failed`` (aborted,
        committed tasks kept), ``committing`` or ``committed``, with per-task attempts. Reads only."""
        return self.status_reader.status()

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
        return abort_job(self, keep_committed=keep_committed)


def publisher_for(algorithm: int | str, store: Store, layout: JobLayout, job_id: str, threads: int,
                  part_size: int | None = None) -> Publisher:
    """The publisher of *algorithm* (normalised: 1, 2 or "magic") on *store*."""
    if algorithm == "magic":
        return MultipartPublisher(store, layout, job_id, threads, part_size=part_size)
    if algorithm == 2:
        return TaskCommitPublisher(store, layout, job_id, threads)
    if store.link_moves:
        return RenamePublisher(store, layout, job_id, threads)
    return MovePublisher(store, layout, job_id, threads)


def make_committer(output: Any, job_id: str, *, algorithm: int | str = 1, **kwargs: Any) -> FileOutputCommitter:
    """The committer for *algorithm*: 1 or 2 (Hadoop's FileOutputCommitter) or ``"magic"`` (S3's multipart
    committer; ``part_size`` applies to it only)."""
    return FileOutputCommitter(output, job_id, algorithm=algorithm, **kwargs)


__all__ = [
    "FileOutputCommitter", "JobContext", "MODES", "OutputCommitter", "TaskAttemptContext", "make_committer",
    "normalize_algorithm",
]
