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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from . import records
from .attempts import COMMITTING, FAILED, AttemptLedger
from .errors import (
    CommitDenied,
    CommitProtocolError,
    CorruptRecord,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    JobConfigMismatch,
    JobIncomplete,
    JobNotSetUp,
)
from .faults import inject
from .layout import TEMPORARY, TRASH, JobLayout, check_job_id
from .paths import check_partition_key, check_relative
from .abort import abort_job
from .jobcommit import StageClock, run_job_commit
from .magic import MultipartPublisher
from .publish import MovePublisher, Publisher, RenamePublisher, TaskCommitPublisher
from .status import JobStatus
from .stores import Store, store_for
from .taskrecord import TaskCommitRecord

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


@dataclass(frozen=True)
class TaskAttemptContext:
    """One task attempt: Hadoop's TaskAttemptID with its work directory (relative to the output root)."""

    job_id: str
    job_uuid: str
    app_attempt: int
    task: int
    attempt: int
    work_dir: str

    @property
    def name(self) -> str:
        return self.work_dir.rsplit("/", 1)[-1]


def _check_number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOutputSpec(f"{what} must be a non-negative integer, got {value!r}")
    return value


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
    :param mode: ``error`` (target must hold no data), ``append``, ``overwrite`` (old data replaced at job
        commit), ``dynamic`` (only the partitions this job wrote are replaced).
    :param partition_by: partition columns, in directory order.
    :param commit_threads: parallel file moves at job commit; default depends on the store.
    :param labels: free-form JSON values copied into ``_SUCCESS`` (dag id, run id, ...).
    """

    def __init__(self, output: Any, job_id: str, *, algorithm: int | str = 1, mode: str = "error",
                 partition_by: Iterable[str] = (), commit_threads: int | None = None, fs: Any = None,
                 storage_options: dict[str, Any] | None = None, labels: Mapping[str, Any] | None = None,
                 part_size: int | None = None) -> None:
        self.store: Store = store_for(output, fs=fs, storage_options=storage_options)
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
            _check_number(commit_threads, "commit_threads")
            if commit_threads < 1:
                raise InvalidOutputSpec("commit_threads must be at least 1")
        self.commit_threads = commit_threads or self.store.default_commit_threads
        self.labels = dict(labels or {})
        self.layout = JobLayout(self.job_id)
        self.ledger = AttemptLedger(self.store, self.layout)
        #: everything this committer does differently per algorithm and store (:mod:`.publish`)
        self.publisher = publisher_for(self.algorithm, self.store, self.layout, self.job_id, self.commit_threads,
                                       part_size=part_size)
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

    def job_record(self) -> dict[str, Any] | None:
        """The current generation's job record, or ``None`` (never set up, or committed and cleaned up)."""
        return records.read(self.store, self.layout.job_record, "job")

    def commit_log(self) -> dict[str, Any] | None:
        """The job's commit log (``_commits/<job>.json``): the last committed generation's manifest."""
        return records.read(self.store, self.layout.commit_log, "commit-log")

    def _require_job(self) -> dict[str, Any]:
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

    def _check_config(self, job: Mapping[str, Any]) -> None:
        recorded = {k: job.get(k) for k in ("committer", "algorithm", "mode", "partition_by")}
        if recorded != self._config():
            raise JobConfigMismatch(
                f"job {self.job_id} was set up with {recorded}, but this committer has {self._config()}; "
                "a job keeps its committer, algorithm, mode and partitioning across attempts")

    def _app_attempts(self, job: Mapping[str, Any]) -> list[int]:
        first = int(job["first_app_attempt"])
        apps = sorted((int(n) for n in self.store.list_dir(self.layout.job_dir) if n.isdigit() and int(n) >= first),
                      reverse=True)
        return [n for n in apps if self.store.exists(self.layout.app_marker(n))]

    def current_app_attempt(self, job: Mapping[str, Any] | None = None) -> int:
        """The newest application attempt of the current generation."""
        job = job or self._require_job()
        apps = self._app_attempts(job)
        if not apps:
            raise JobNotSetUp(f"job {self.job_id} has no application attempt; run setup_job() first")
        return apps[0]

    def _plan(self, job: Mapping[str, Any]) -> dict[str, Any] | None:
        return records.read(self.store, self.layout.plan(job["job_uuid"]), "commit-plan")

    def _task_record(self, app: int, task: int, job_uuid: str) -> TaskCommitRecord | None:
        """The task's commit record in application attempt *app*, if it belongs to generation *job_uuid*: a zombie
        of a purged generation may have written one into a directory a later generation reuses."""
        rec = TaskCommitRecord.read(self.store, self.layout.task_record(app, task))
        return rec if rec is not None and rec.job_uuid == job_uuid else None

    def _visible_files(self) -> set[str]:
        """Data files readers would see (names starting with ``_`` or ``.`` excluded)."""
        return {rel for rel, _ in self.store.list_files("", visible_only=True)}

    # ------------------------------------------------------------------ job setup
    def setup_job(self, *, replace_files: Iterable[str] = (), replace_first: bool = False) -> JobContext:
        """Allocate the next application attempt; create the job record and the target on the first one.

        *replace_files* (used on the first call of a generation only): existing files this job's commit replaces
        (a compaction's inputs). They are deleted after the new files are in place, unless *replace_first*: for a
        job whose new files hold the same rows as the old ones (compaction), the safe order is the reverse --
        a reader may briefly miss rows (they are committed and will be published by the resume), but never
        sees one twice.

        Idempotent in effect and never touches committed work: a re-run after a successful commit starts a new
        generation (new job uuid) whose commit will replace the previous generation's files; a re-run while a job
        commit is under way changes nothing, so that the commit can be resumed.
        """
        self._check_target()
        self.remove_trash()
        inject("setup_job.before_record")
        job = self.job_record()
        if job is None:
            job = self._create_job_record([check_relative(f) for f in replace_files], replace_first)
        self._check_config(job)
        plan = self._plan(job)
        if plan is not None:
            return self._job_context(job, int(plan["app_attempt"]), "committing")
        apps = self._app_attempts(job)
        app = apps[0] + 1 if apps else int(job["first_app_attempt"])
        while not self.store.create_exclusive(
                self.layout.app_marker(app),
                records.dumps("app-attempt", {"app_attempt": app, "job_uuid": job["job_uuid"],
                                              "started": records.now_iso(), "labels": self.labels})):
            app += 1
        inject("setup_job.after_app_attempt")
        return self._job_context(job, app, "running")

    def _job_context(self, job: Mapping[str, Any], app: int, state: str) -> JobContext:
        return JobContext(job_id=self.job_id, job_uuid=job["job_uuid"], generation=int(job["generation"]),
                          app_attempt=app, first_app_attempt=int(job["first_app_attempt"]), state=state)

    def _check_target(self) -> None:
        if self.store.exists("") and not self.store.isdir(""):
            raise InvalidOutputSpec(f"output root {self.store.url()} is a file, not a directory")

    def _create_job_record(self, replace_files: list[str], replace_first: bool) -> dict[str, Any]:
        log = self.commit_log()
        replaces = None
        generation, first_app = 0, 0
        if log is not None:
            generation = int(log["generation"]) + 1
            first_app = int(log["app_attempt"]) + 1
            replaces = {"job_uuid": log["job_uuid"], "generation": log["generation"],
                        "files": [f["path"] for f in log["files"]]}
        # Never reuse an application attempt directory a zombie of a purged generation may have re-created.
        first_app = max([first_app] + [int(n) + 1 for n in self.store.list_dir(self.layout.job_dir) if n.isdigit()])
        if self.mode == "error":
            self._check_empty(set(replaces["files"]) if replaces else set())
        self.store.ensure_root()
        body = {**self._config(), "job_id": self.job_id, "job_uuid": str(uuid.uuid4()), "generation": generation,
                "first_app_attempt": first_app, "created": records.now_iso(), "labels": self.labels,
                "replaces": replaces, "replace_files": replace_files, "replace_first": replace_first}
        self.store.create_exclusive(self.layout.job_record, records.dumps("job", body))
        job = self.job_record()
        if job is None:  # pragma: no cover - created just above, or by a concurrent setup
            raise CommitProtocolError(f"job record {self.store.url(self.layout.job_record)} vanished")
        return job

    def _check_empty(self, own_files: set[str], visible: set[str] | None = None) -> None:
        others = sorted((self._visible_files() if visible is None else visible) - own_files)
        if others:
            shown = ", ".join(others[:5]) + (" ..." if len(others) > 5 else "")
            raise InvalidOutputSpec(
                f"output {self.store.url()} already holds {len(others)} data file(s) ({shown}) and mode is 'error'; "
                "use mode='append', 'overwrite' or 'dynamic' to write there")

    # ------------------------------------------------------------------ task attempts
    def setup_task(self, task: int, attempt: int) -> TaskAttemptContext:
        """Create the work directory of one task attempt in the current application attempt.

        The attempt leaves a trace first (see :mod:`.attempts`), and every earlier attempt of the task in this
        application attempt that has neither committed nor been recorded failed is recorded failed now and its
        files removed: a new Airflow try means the earlier one was killed or lost, and if it is in fact a zombie
        still running, it can no longer commit. Attempt numbers must grow (Airflow's try numbers do).
        """
        _check_number(task, "task")
        _check_number(attempt, "attempt")
        job = self._require_job()
        app = self.current_app_attempt(job)
        ta = TaskAttemptContext(self.job_id, job["job_uuid"], app, task, attempt,
                                self.layout.attempt_dir(app, task, attempt))
        self.ledger.start(app, task, attempt)
        for trace in self.ledger.traces(app, task):
            if trace.attempt < attempt and trace.fate is None:
                self._fail_and_discard(app, task, trace.attempt)
        self.store.makedirs(ta.work_dir)
        inject("setup_task.after_dir")
        return ta

    def _fail_and_discard(self, app: int, task: int, attempt: int) -> bool:
        """Record the attempt failed, then remove its files; ``False`` (nothing removed) when it had claimed its
        commit first: a commit in flight is never emptied."""
        if self.ledger.claim(app, task, attempt, FAILED) != FAILED:
            return False
        self._discard_dir(self.layout.attempt_dir(app, task, attempt))
        return True

    def needs_task_commit(self, ta: TaskAttemptContext) -> bool:
        """Every attempt needs a commit record, even with no files (job commit counts tasks, I3); ``False``
        only when this very attempt is already recorded as the task's committer."""
        rec = self._task_record(ta.app_attempt, ta.task, ta.job_uuid)
        return not (rec is not None and rec.attempt == ta.attempt)

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
        inject("commit_task.before_record")
        job = self._require_job()
        if ta.job_uuid != job["job_uuid"]:
            self._discard_attempt(ta)
            raise CommitDenied(f"task attempt {ta.name} belongs to job generation {ta.job_uuid}, the job is now "
                               f"{job['job_uuid']}; its files were removed", task=ta.task, attempt=ta.attempt)
        plan = self._plan(job)
        if plan is not None:
            rec = self._task_record(plan["app_attempt"], ta.task, ta.job_uuid) if ta.task in plan["tasks"] else None
            if rec is not None and rec.attempt == ta.attempt and rec.app_attempt == ta.app_attempt:
                return rec.to_doc()
            self._discard_attempt(ta)
            raise CommitDenied(f"job {self.job_id} is already committing; task {ta.task} is committed by "
                               f"{rec and rec.attempt}", task=ta.task, attempt=ta.attempt,
                               winner=rec and rec.to_doc())
        current = self.current_app_attempt(job)
        if ta.app_attempt != current:
            # A zombie of an older application attempt. Its commit could only land in that attempt's directory
            # (which job commit ignores) -- or, with v2, replace the current winner's visible files: refuse it.
            self._discard_attempt(ta)
            raise CommitDenied(f"task attempt {ta.name} belongs to application attempt {ta.app_attempt}, the job "
                               f"is now in application attempt {current}; its files were removed",
                               task=ta.task, attempt=ta.attempt)
        fate = self.ledger.claim(ta.app_attempt, ta.task, ta.attempt, COMMITTING)
        inject("commit_task.after_claim")
        if fate == FAILED:
            # whoever recorded it failed removes its files (or has); removing them again is harmless
            self._discard_attempt(ta)
            raise CommitDenied(f"task attempt {ta.name} was recorded as failed (by its own abort, a newer try of "
                               "the task, or the failed run's teardown) and cannot commit; its files were removed",
                               task=ta.task, attempt=ta.attempt, attempt_failed=True)
        rec_path = self.layout.task_record(ta.app_attempt, ta.task)
        existing = self._task_record(ta.app_attempt, ta.task, ta.job_uuid)
        if existing is None:
            data = self._new_task_record(ta, rows, sizes).to_json()
            mine = TaskCommitRecord.from_json(data, rec_path)  # as any reader will see it, checked before it exists
            if self.store.create_exclusive(rec_path, data):
                existing = mine
                inject("commit_task.after_record")
            else:
                existing = self._task_record(ta.app_attempt, ta.task, ta.job_uuid)
        if existing is None:
            raise CorruptRecord(f"task record {self.store.url(rec_path)} belongs to another job generation")
        self.publisher.complete_task_commit(existing)
        if existing.attempt != ta.attempt or existing.adopted:
            self._discard_attempt(ta)
            raise CommitDenied(
                f"task {ta.task} of job {self.job_id} was already committed by attempt {existing.attempt} "
                f"(application attempt {existing.app_attempt}); attempt {ta.attempt}'s files were removed",
                task=ta.task, attempt=ta.attempt, winner=existing.to_doc())
        inject("commit_task.after_move")
        return existing.to_doc()

    def open_task_file(self, ta: TaskAttemptContext, rel: str) -> Any:
        """A writable binary file for *rel* (relative to the output root) in task attempt *ta* (the magic committer
        gives a pending multipart upload to the final key)."""
        return self.publisher.open_task_file(ta.work_dir, rel)

    def _discard_attempt(self, ta: TaskAttemptContext) -> None:
        """Remove everything a (denied, failed or stale) attempt wrote -- unless it is the committed attempt of its
        application attempt: where the record alone commits (object stores, magic), its directory holds the
        committed data that a later application attempt's recovery points at, and a stale winner asking again
        (a zombie of that attempt) must not delete it."""
        rec = self._task_record(ta.app_attempt, ta.task, ta.job_uuid)
        if rec is not None and rec.attempt == ta.attempt and not rec.adopted:
            return
        self._discard_dir(ta.work_dir)

    def _discard_dir(self, work_dir: str) -> None:
        self.publisher.discard(work_dir)

    def _new_task_record(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None,
                         sizes: Mapping[str, int] | None) -> TaskCommitRecord:
        for arg, counts, nullable in (("rows", rows, True), ("sizes", sizes, False)):
            bad = [rel for rel, n in (counts or {}).items()
                   if not (n is None and nullable) and (not isinstance(n, int) or isinstance(n, bool) or n < 0)]
            if bad:   # the caller's mistake, not a corrupt record: named before anything is written
                raise InvalidOutputSpec(f"commit_task({arg}=...): {bad[0]!r} maps to {counts[bad[0]]!r}, not a "
                                        f"non-negative integer{' or None' if nullable else ''}")
        files = self.publisher.attempt_files(ta.work_dir, ta.task, dict(rows or {}))
        held = {f.path: f.size for f in files}
        reported = {**{rel: None for rel in rows or {}}, **dict(sizes or {})}
        wrong = sorted(rel for rel, size in reported.items()
                       if rel not in held or (size is not None and held[rel] != size))
        if wrong:
            self.ledger.overrule(ta.app_attempt, ta.task, ta.attempt)
            self._discard_attempt(ta)
            shown = ", ".join(f"{rel} ({'missing' if rel not in held else f'{held[rel]} bytes, not {reported[rel]}'})"
                              for rel in wrong[:5])
            raise CommitDenied(f"task attempt {ta.name} reported {len(reported)} file(s) but its directory does not "
                               f"hold {len(wrong)} of them as written: {shown}. Something removed or changed them "
                               "(a teardown, a cleanup, a newer try); the attempt is recorded failed and cannot "
                               "commit", task=ta.task, attempt=ta.attempt, attempt_failed=True)
        clobbered = self.publisher.clobbered([f.path for f in files])
        # files of another attempt of this task that won meanwhile (a zombie's race) are not a clobber: the record
        # creation below then fails and this attempt is denied with the winner
        if clobbered and self._task_record(ta.app_attempt, ta.task, ta.job_uuid) is None:
            self.ledger.overrule(ta.app_attempt, ta.task, ta.attempt)
            self._discard_dir(ta.work_dir)
            raise InvalidOutputSpec(f"task attempt {ta.name} would replace {len(clobbered)} visible file(s) at its "
                                    f"task commit ({', '.join(clobbered[:3])}); file names must be unique across "
                                    "tasks and jobs (keep the default names, which carry the job uuid). The "
                                    "attempt is recorded failed; nothing visible changed")
        data_dir = self.publisher.data_dir(ta.app_attempt, ta.work_dir)
        return TaskCommitRecord(job_id=self.job_id, job_uuid=ta.job_uuid, task=ta.task, attempt=ta.attempt,
                                app_attempt=ta.app_attempt, work_dir=ta.work_dir, data_dir=data_dir,
                                recovered_from_app=None, committed=records.now_iso(), files=tuple(files))

    def abort_task(self, ta: TaskAttemptContext) -> bool:
        """Mark the attempt failed, so it can never commit, and delete its files.

        Returns ``False`` and changes nothing when the attempt had already started to commit (its claim is
        ``committing``): a commit in flight wins over a late abort, and a denied commit removes its own files.
        """
        if self.ledger.claim(ta.app_attempt, ta.task, ta.attempt, FAILED) != FAILED:
            return False
        inject("abort_task.after_marker")
        self._discard_attempt(ta)
        inject("abort_task.mid_delete")
        return True

    # ------------------------------------------------------------------ recovery
    def recover_task(self, task: int) -> dict[str, Any] | None:
        """The task's commit record in the current application attempt, adopting one from an earlier attempt.

        Hadoop moves ``<app-1>/<task>`` into ``<app>``; we create a record in the current attempt that points at the
        earlier attempt's committed data, so recovery is one atomic step with no data moved (no copy on S3).
        ``None`` when no application attempt of this generation committed the task.
        """
        _check_number(task, "task")
        job = self._require_job()
        app = self.current_app_attempt(job)
        rec = self._recover(job, app, task)
        return None if rec is None else rec.to_doc()

    def _recover(self, job: Mapping[str, Any], app: int, task: int,
                 apps: Sequence[int] | None = None) -> TaskCommitRecord | None:
        """*apps*: the generation's application attempts, newest first, when the caller listed them already."""
        rec = self._task_record(app, task, job["job_uuid"])
        if rec is not None:
            return rec
        for old_app in self._app_attempts(job) if apps is None else apps:
            if old_app >= app:
                continue
            old = self._task_record(old_app, task, job["job_uuid"])
            if old is None:
                continue
            self.publisher.complete_task_commit(old)
            inject("recover_task.before_record")
            self.store.create_exclusive(self.layout.task_record(app, task), old.adopted_by(app).to_json())
            inject("recover_task.after_record")
            return self._task_record(app, task, job["job_uuid"])
        return None

    # ------------------------------------------------------------------ job commit
    def _registered_tasks(self, job: Mapping[str, Any]) -> set[int]:
        tasks: set[int] = set()
        for app in self._app_attempts(job):
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
            return self._committed_manifest(log)
        self._check_config(job)
        if expected_tasks is None:
            tasks = None
        elif isinstance(expected_tasks, int) and not isinstance(expected_tasks, bool):
            tasks = list(range(_check_number(expected_tasks, "expected_tasks")))
        else:
            tasks = sorted({_check_number(t, "task") for t in expected_tasks})
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

    def _committed_manifest(self, log: Mapping[str, Any]) -> dict[str, Any]:
        """Job already committed and cleaned up: its manifest, from the commit log.

        Nothing is written: ``_SUCCESS`` was written before the job record went, and if it is gone now a later job
        withdrew it; writing it back would describe a directory that has changed since (I9).
        """
        return {k: v for k, v in log.items() if k not in ("format", "version", "history")}

    def committed_task_record(self, task: int) -> dict[str, Any]:
        """A committed job's record of one task, rebuilt from the commit log (the live records are cleaned up)."""
        log = self.commit_log()
        if log is None:
            raise JobNotSetUp(f"job {self.job_id} has no commit log at {self.store.url(self.layout.commit_log)}")
        info = next((t for t in log["tasks"] if t["task"] == task), None)
        if info is None:
            raise JobIncomplete(f"committed job {self.job_id} has no task {task}", [task])
        return {"job_id": self.job_id, "job_uuid": log["job_uuid"], "task": task, "attempt": info["attempt"],
                "app_attempt": info["app_attempt"], "recovered_from_app": info["recovered_from_app"],
                "files": [f for f in log["files"] if f["task"] == task], "from_commit_log": True}

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
        forward is safe, and the next ``commit_job`` finishes the commit. Never touches another job's work.
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
