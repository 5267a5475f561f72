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

import io
import json
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

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
from .layout import COMMITS, SUCCESS, TEMPORARY, JobLayout, check_job_id, parse_attempt_name
from .paths import check_partition_key, check_relative, is_hidden, join, partition_of
from .store import Store, store_for

MODES = ("error", "append", "overwrite", "dynamic")
_ALGORITHMS: dict[str, int | str] = {"1": 1, "v1": 1, "2": 2, "v2": 2, "magic": "magic"}

T = TypeVar("T")


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


def marker_dirs_above(paths: Iterable[str]) -> set[str]:
    """Every directory whose subtree holds one of *paths*, the root (``""``) included: the directories whose
    ``_SUCCESS`` stops telling the truth when one of those files appears or goes."""
    dirs = {""}
    for path in paths:
        head = partition_of(path)
        while head and head not in dirs:
            dirs.add(head)
            head = partition_of(head)
    return dirs


def _check_number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOutputSpec(f"{what} must be a non-negative integer, got {value!r}")
    return value


def parallel(fn: Callable[[T], Any], items: Sequence[T], threads: int) -> None:
    """Run *fn* over *items* with *threads* workers; the first exception propagates after the pool drains."""
    if threads <= 1 or len(items) <= 1:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        for _ in pool.map(fn, items):
            pass


class StageClock:
    """Wall time per stage of a job commit and, on object stores, requests by operation and bytes copied."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.durations: dict[str, float] = {}
        self.requests: dict[str, dict[str, int]] = {}
        connecting = time.monotonic()
        self._r = store.request_counts()  # on S3 the first call starts the client: timed apart, not as a stage
        self.start = self._t = time.monotonic()
        self.connect = self.start - connecting
        self.bytes_copied_start = store.bytes_copied

    def end(self, stage: str) -> None:
        now, counts = time.monotonic(), self.store.request_counts()
        self.durations[stage] = round(now - self._t, 6)
        delta = {op: n - self._r.get(op, 0) for op, n in counts.items() if n != self._r.get(op, 0)}
        if counts:
            self.requests[stage] = delta
        self._t, self._r = now, counts

    def summary(self) -> dict[str, Any]:
        self.durations["total"] = round(time.monotonic() - self.start, 6)
        if self.connect >= 0.001:
            self.durations["client_start"] = round(self.connect, 6)
        return {"durations": dict(self.durations), "requests": dict(self.requests),
                "bytes_copied": self.store.bytes_copied - self.bytes_copied_start}


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

    committer_name = "FileOutputCommitter"

    def __init__(self, output: Any, job_id: str, *, algorithm: int | str = 1, mode: str = "error",
                 partition_by: Iterable[str] = (), commit_threads: int | None = None, fs: Any = None,
                 storage_options: dict[str, Any] | None = None, labels: Mapping[str, Any] | None = None) -> None:
        self.store: Store = store_for(output, fs=fs, storage_options=storage_options)
        self.job_id = check_job_id(job_id)
        self.algorithm = normalize_algorithm(algorithm)
        if self.algorithm == "magic":
            raise InvalidOutputSpec("algorithm 'magic' is the MagicCommitter: build it with make_committer() or "
                                    "MagicCommitter")
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

    # ------------------------------------------------------------------ records
    @property
    def algorithm_name(self) -> str:
        return f"v{self.algorithm}"

    def _config(self) -> dict[str, Any]:
        return {"committer": self.committer_name, "algorithm": self.algorithm, "mode": self.mode,
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

    def _task_record(self, app: int, task: int, job_uuid: str) -> dict[str, Any] | None:
        """The task's commit record in application attempt *app*, if it belongs to generation *job_uuid*: a zombie
        of a purged generation may have written one into a directory a later generation reuses."""
        rec = records.read(self.store, self.layout.task_record(app, task), "task-commit")
        return rec if rec is not None and rec["job_uuid"] == job_uuid else None

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
        return not (rec is not None and rec["attempt"] == ta.attempt)

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
            if rec is not None and rec["attempt"] == ta.attempt and rec["app_attempt"] == ta.app_attempt:
                return rec
            self._discard_attempt(ta)
            raise CommitDenied(f"job {self.job_id} is already committing; task {ta.task} is committed by "
                               f"{rec and rec['attempt']}", task=ta.task, attempt=ta.attempt, winner=rec)
        current = self.current_app_attempt(job)
        if ta.app_attempt != current:
            # A zombie of an older application attempt. Its commit could only land in that attempt's directory
            # (which job commit ignores) -- or, with v2, replace the current winner's visible files: refuse it.
            self._discard_attempt(ta)
            raise CommitDenied(f"task attempt {ta.name} belongs to application attempt {ta.app_attempt}, the job "
                               f"is now in application attempt {current}; its files were removed",
                               task=ta.task, attempt=ta.attempt)
        if self.ledger.claim(ta.app_attempt, ta.task, ta.attempt, COMMITTING) == FAILED:
            # whoever recorded it failed removes its files (or has); removing them again is harmless
            self._discard_attempt(ta)
            raise CommitDenied(f"task attempt {ta.name} was recorded as failed (by its own abort, a newer try of "
                               "the task, or the failed run's teardown) and cannot commit; its files were removed",
                               task=ta.task, attempt=ta.attempt, attempt_failed=True)
        rec_path = self.layout.task_record(ta.app_attempt, ta.task)
        existing = self._task_record(ta.app_attempt, ta.task, ta.job_uuid)
        if existing is None:
            body = self._new_task_record(ta, rows, sizes)
            if self.store.create_exclusive(rec_path, records.dumps("task-commit", body)):
                existing = records.loads("task-commit", records.dumps("task-commit", body), rec_path)
                inject("commit_task.after_record")
            else:
                existing = self._task_record(ta.app_attempt, ta.task, ta.job_uuid)
        if existing is None:
            raise CorruptRecord(f"task record {self.store.url(rec_path)} belongs to another job generation")
        self._complete_task_commit(existing)
        if existing["attempt"] != ta.attempt or existing.get("recovered_from_app") is not None:
            self._discard_attempt(ta)
            raise CommitDenied(
                f"task {ta.task} of job {self.job_id} was already committed by attempt {existing['attempt']} "
                f"(application attempt {existing['app_attempt']}); attempt {ta.attempt}'s files were removed",
                task=ta.task, attempt=ta.attempt, winner=existing)
        inject("commit_task.after_move")
        return existing

    def open_task_file(self, ta: TaskAttemptContext, rel: str) -> Any:
        """A writable binary file for *rel* (relative to the output root) in task attempt *ta*."""
        return self.store.open_write(f"{ta.work_dir}/{rel}")

    def _discard_attempt(self, ta: TaskAttemptContext) -> None:
        """Remove everything a (denied, failed or stale) attempt wrote."""
        self._discard_dir(ta.work_dir)

    def _discard_dir(self, work_dir: str) -> None:
        self.store.delete_tree(work_dir)

    def _attempt_files(self, ta: TaskAttemptContext, rows: Mapping[str, int | None]) -> list[dict[str, Any]]:
        """The files an attempt holds, as record entries (path, size, rows, task)."""
        files = []
        for rel, size in sorted(self.store.list_files(ta.work_dir)):
            if is_hidden(rel):
                continue
            n = rows.get(rel)
            if n is None and rel.endswith(".parquet"):
                n = self._parquet_rows(f"{ta.work_dir}/{rel}")
            files.append({"path": rel, "size": size, "rows": n, "task": ta.task})
        return files

    def _new_task_record(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None,
                         sizes: Mapping[str, int] | None) -> dict[str, Any]:
        files = self._attempt_files(ta, dict(rows or {}))
        held = {f["path"]: f["size"] for f in files}
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
        # v1 moves the files into the application attempt's _committed directory where a move is a rename (see
        # layout); on object stores (a move copies every byte) the record alone commits, and job commit copies
        # the data once.
        data_dir = "" if self.algorithm == 2 else (
            self.layout.committed_dir(ta.app_attempt) if self.store.link_moves else ta.work_dir)
        return {"job_id": self.job_id, "job_uuid": ta.job_uuid, "task": ta.task, "attempt": ta.attempt,
                "app_attempt": ta.app_attempt, "work_dir": ta.work_dir, "data_dir": data_dir,
                "recovered_from_app": None, "committed": records.now_iso(), "files": files}

    def _parquet_rows(self, rel: str) -> int | None:
        import pyarrow.parquet as pq

        try:
            return int(pq.read_metadata(io.BytesIO(self.store.read_bytes(rel))).num_rows)
        except Exception:  # not a Parquet file after all: rows unknown
            return None

    def _complete_task_commit(self, rec: Mapping[str, Any]) -> None:
        """Finish the effect of a task commit record (idempotent; safe for several processes to run at once)."""
        if rec.get("recovered_from_app") is not None:
            return
        src, data_dir = rec["work_dir"], rec["data_dir"]
        if src == data_dir:  # v1 on object stores: the record alone commits
            return
        # Move what is still in the attempt directory (one listing, not one request per file: on S3 a finished
        # task commit then costs a single LIST to check again): v2 to the final names, v1 into _committed.
        remaining = {rel for rel, _ in self.store.list_files(src)}
        moves = [f for f in rec["files"] if f["path"] in remaining]
        if moves and not data_dir:
            # v2 makes files visible here: first withdraw every marker that would stop telling the truth (I9)
            self._withdraw_markers(marker_dirs_above(f["path"] for f in moves))
        for f in moves:
            if self._move_once(f"{src}/{f['path']}", f"{data_dir}/{f['path']}" if data_dir else f["path"],
                               f["size"], replace=self.algorithm == 2):
                inject("commit_task.mid_move")
        if remaining:
            self.store.delete_tree(src)

    def _withdraw_markers(self, dirs: Iterable[str]) -> None:
        """Delete the ``_SUCCESS`` of each directory (missing ones are fine): before the visible files under a
        marker change, the marker goes, so that no reader trusts a marker that describes another directory."""
        self.store.delete_files([join(d, SUCCESS) for d in sorted(set(dirs))])

    def _move_once(self, src: str, dst: str, size: int | None = None, replace: bool = True) -> bool:
        """Move *src* to *dst* unless that already happened (earlier run, or a concurrent completer).

        ``True`` when this call moved the file. A file in neither place was deleted outside the protocol. Without
        *replace*, a *dst* holding another file (another task's file of the same name) is refused.
        """
        try:
            if replace:
                self.store.move_file(src, dst, size)
            else:
                self.store.move_no_replace(src, dst)
            return True
        except FileExistsError:
            raise InvalidOutputSpec(f"job {self.job_id}: {self.store.url(dst)} already holds another task's file of "
                                    "that name; file names must be unique across tasks (include the task number). "
                                    f"{self.store.url(src)} stays where it is") from None
        except FileNotFoundError:
            if self.store.exists(dst):
                return False
            raise CorruptRecord(f"job {self.job_id}: {self.store.url(src)} is gone and {self.store.url(dst)} was "
                                "never written; the data was deleted outside the protocol") from None

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
        return self._recover(job, app, task)

    def _recover(self, job: Mapping[str, Any], app: int, task: int) -> dict[str, Any] | None:
        rec = self._task_record(app, task, job["job_uuid"])
        if rec is not None:
            return rec
        for old_app in self._app_attempts(job):
            if old_app >= app:
                continue
            old = self._task_record(old_app, task, job["job_uuid"])
            if old is None:
                continue
            self._complete_task_commit(old)
            inject("recover_task.before_record")
            adopted = {**old, "app_attempt": app,
                       "recovered_from_app": old["recovered_from_app"] if old["recovered_from_app"] is not None
                       else old_app, "original_app_attempt": old.get("original_app_attempt", old_app),
                       "recovered": records.now_iso()}
            self.store.create_exclusive(self.layout.task_record(app, task), records.dumps("task-commit", adopted))
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

    def commit_job(self, expected_tasks: int | Iterable[int] | None = None) -> dict[str, Any]:
        """Commit the job: the output then holds exactly one committed attempt of every expected task.

        *expected_tasks* is a task count (``range(n)``) or the task numbers; ``None`` means every task that set up an
        attempt. A crash at any point is finished by calling this again; the result is the same as an uninterrupted
        run. Returns the ``_SUCCESS`` manifest.
        """
        clock = StageClock(self.store)
        started = records.now_iso()
        job = self.job_record()
        if job is None:
            log = self.commit_log()
            if log is None:
                raise JobNotSetUp(f"job {self.job_id} was never set up at {self.store.url()}")
            return self._committed_manifest(log)
        self._check_config(job)
        plan = self._plan(job)
        resumed = plan is not None
        if plan is None:
            plan, recs = self._make_plan(job, expected_tasks, clock, started)
        else:
            recs = self._planned_records(plan)
        inject("commit_job.after_plan")
        return self._execute(job, plan, recs, clock, resumed)

    def _planned_records(self, plan: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The task records a plan fixed (records in an application attempt are never rewritten)."""
        recs = []
        for task in plan["tasks"]:
            rec = self._task_record(plan["app_attempt"], task, plan["job_uuid"])
            if rec is None:
                raise CorruptRecord(f"job {self.job_id}: the commit plan names task {task}, whose record "
                                    f"{self.store.url(self.layout.task_record(plan['app_attempt'], task))} is gone")
            recs.append(rec)
        return recs

    def _make_plan(self, job: Mapping[str, Any], expected_tasks: int | Iterable[int] | None,
                   clock: StageClock, started: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Recover and verify every expected task, then fix what the commit does, exclusively, before any move.

        The plan names the tasks (their records stay put: records of an application attempt are never
        rewritten) and lists the deletions, so it stays small whatever the number of files.
        """
        app = self.current_app_attempt(job)
        if expected_tasks is None:
            tasks = sorted(self._registered_tasks(job))
        elif isinstance(expected_tasks, int) and not isinstance(expected_tasks, bool):
            tasks = list(range(_check_number(expected_tasks, "expected_tasks")))
        else:
            tasks = sorted({_check_number(t, "task") for t in expected_tasks})
        recs: dict[int, dict[str, Any]] = {}
        missing: list[int] = []

        def recover(task: int) -> None:
            rec = self._recover(job, app, task)
            if rec is None:
                missing.append(task)
            else:
                recs[task] = rec

        parallel(recover, tasks, self.commit_threads)
        if missing:
            missing.sort()
            shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
            raise JobIncomplete(f"job {self.job_id} cannot commit: {len(missing)} of {len(tasks)} expected task(s) "
                                f"have no committed attempt: {shown}", missing)
        inject("commit_job.after_recovery")
        dsts: dict[str, int] = {}
        for task in tasks:
            for f in recs[task]["files"]:
                if f["path"] in dsts:
                    raise InvalidOutputSpec(f"tasks {dsts[f['path']]} and {task} both wrote {f['path']}; file names "
                                            "must be unique across tasks (include the task number)")
                dsts[f["path"]] = task
        parallel(self._complete_task_commit, list(recs.values()), self.commit_threads)
        clock.end("recovery")
        replaced = set((job.get("replaces") or {}).get("files", []))
        replace_files = set(job.get("replace_files") or [])  # e.g. the small files a compaction merged
        visible = self._visible_files()
        # v2: visible files of this generation that no planned record lists (a zombie's late task commit after the
        # teardown, a v2 abort that crashed between a record and its files) are strays: remove them.
        strays = {p for p in visible - set(dsts) if job["job_uuid"] in p.rsplit("/", 1)[-1]} \
            if self.algorithm == 2 else set()
        if self.mode == "error":
            self._check_empty(replaced | set(dsts) | strays, visible)
        deletions: set[str] = set()
        if self.mode == "overwrite":
            deletions = set(visible)
        elif self.mode == "dynamic":
            parts = {partition_of(p) for p in dsts}
            deletions = {p for p in visible if partition_of(p) in parts}
        elif self.algorithm == 1:
            clobbered = sorted(p for p in dsts if p in visible and p not in replaced)
            if clobbered:
                raise InvalidOutputSpec(f"{self.mode} would replace existing file(s) {clobbered[:5]} in "
                                        f"{self.store.url()}; nothing was changed")
        deletions |= ((replaced | replace_files) & visible) | strays
        deletions -= set(dsts)
        withdraw = marker_dirs_above(set(dsts) | deletions)
        if self.mode == "overwrite":
            withdraw |= set(self.store.marker_dirs(SUCCESS))
        winners = {(r.get("original_app_attempt", r["app_attempt"]), r["task"]): r["attempt"] for r in recs.values()}
        history = {str(t): h for t, h in self._attempt_history(job, winners).items()
                   if h["failed_attempts"] or h["denied_attempts"]}
        plan = {"job_id": self.job_id, "job_uuid": job["job_uuid"], "app_attempt": app, "started": started,
                "tasks": tasks, "deletions": sorted(deletions), "withdraw": sorted(withdraw),
                "attempt_history": history}
        if not self.store.create_exclusive(self.layout.plan(job["job_uuid"]), records.dumps("commit-plan", plan)):
            # a concurrent job commit fixed its plan first: follow that one
            stored = self._plan(job)
            assert stored is not None
            return stored, self._planned_records(stored)
        clock.end("plan")
        return plan, [recs[t] for t in tasks]

    def _execute(self, job: Mapping[str, Any], plan: Mapping[str, Any], recs: list[dict[str, Any]],
                 clock: StageClock, resumed: bool) -> dict[str, Any]:
        # I9: every marker above a file this commit adds or deletes goes before the first such change; the plan
        # names them, so a resumed commit withdraws them again (idempotent) before it continues.
        self._withdraw_markers(plan.get("withdraw", [""]))
        inject("commit_job.after_withdraw")
        replace_first = bool(job.get("replace_first"))
        if replace_first:
            self._delete_old(plan["deletions"])
        directories_renamed = self._publish(recs)
        self._after_publish(job, recs)
        inject("commit_job.after_moves")
        clock.end("moves")
        if not replace_first:
            self._delete_old(plan["deletions"])
        inject("commit_job.after_deletes")
        clock.end("deletes")
        manifest = self._manifest(job, plan, recs, clock, resumed)
        history_by_task = plan.get("attempt_history", {})
        for t in manifest["tasks"]:
            t.update(history_by_task.get(str(t["task"]), {"failed_attempts": [], "denied_attempts": []}))
        previous = self.commit_log()
        history = []
        if previous is not None and previous["job_uuid"] != job["job_uuid"]:
            history = previous.get("history", []) + [{k: previous.get(k) for k in (
                "job_uuid", "generation", "app_attempt", "finished", "totals")}]
        elif previous is not None:
            history = previous.get("history", [])
        # The file list, the bulk of both documents, is encoded once.
        file_list = manifest.pop("files")
        files = records.encode(file_list)
        self.store.write_bytes(self.layout.commit_log, records.dumps("commit-log", {**manifest, "history": history},
                                                                     files=files))
        inject("commit_job.after_commit_log")
        clock.end("commit_log")
        # Markers list what is visible under them now: the job's files, and under "retained" the other files kept
        # (another job's, another partition's), so that a reader that trusts the marker reads exactly its list.
        visible = dict(self.store.list_files("", visible_only=True))
        ours = {f["path"] for f in file_list}
        if self.mode == "dynamic":
            self._write_partition_markers(manifest, file_list, visible, ours)
        retained = [{"path": p, "size": visible[p]} for p in sorted(visible) if p not in ours]
        manifest["diagnostics"]["retained_files"] = len(retained)
        clock.end("markers")
        costs = clock.summary()
        manifest["durations"] = costs["durations"]
        manifest["diagnostics"].update(requests=costs["requests"], bytes_copied=costs["bytes_copied"],
                                       directories_renamed=directories_renamed)
        self.store.write_bytes(SUCCESS, records.dumps("success", manifest, files=files,
                                                      retained=records.encode(retained)))
        inject("commit_job.after_success")
        # Cleanup only deletes, and only under _temporary: readers never look there, and a crash from here on is
        # finished from the commit log. The job record goes first: without it (and with the commit log) the
        # generation counts as committed, whatever a crash leaves of the rest of the tree.
        cleanup_started = time.monotonic()
        self.store.delete_file(self.layout.job_record)
        self.store.delete_tree(self.layout.job_dir)
        self.store.remove_dir_if_empty(TEMPORARY)
        inject("commit_job.after_cleanup")
        manifest["durations"]["cleanup_after_success"] = round(time.monotonic() - cleanup_started, 6)
        manifest["files"] = file_list
        return manifest

    def _delete_old(self, deletions: list[str]) -> None:
        """Delete the plan's old files (idempotent), then the directories that became empty."""
        if self.store.batch_deletes:
            for i in range(0, len(deletions), 1000):
                self.store.delete_files(deletions[i:i + 1000])
                inject("commit_job.mid_delete")
        else:
            def delete(rel: str) -> None:
                self.store.delete_file(rel)
                inject("commit_job.mid_delete")

            parallel(delete, deletions, self.commit_threads)
        for d in sorted({partition_of(p) for p in deletions} - {""}, key=lambda p: -p.count("/")):
            while d and self.store.remove_dir_if_empty(d):
                d = partition_of(d)

    def _publish(self, recs: list[dict[str, Any]]) -> int:
        """Make every committed task's files visible at their final names (idempotent, parallel). Returns the
        number of directories renamed whole (see :meth:`_publish_directories`)."""
        if self.algorithm == 2:  # task commit already moved them; check they are all there
            missing = self.store.missing([f["path"] for rec in recs for f in rec["files"]])
            if missing:
                raise CorruptRecord(f"job {self.job_id}: committed v2 file(s) missing from the output: {missing[:5]}")
            return 0
        moves = [(f"{rec['data_dir']}/{f['path']}", f["path"], f["size"]) for rec in recs for f in rec["files"]]
        renamed = self._publish_directories(recs) if self.store.link_moves else ()
        if renamed:
            moves = [m for m in moves if not m[0].startswith(renamed)]
        for d in sorted({partition_of(dst) for _, dst, _ in moves} - {""}):
            self.store.makedirs(d)

        if self.store.batch_deletes:
            # object stores: copy every file (parallel), then delete the sources 1,000 per request. A crash in
            # between copies again on resume (the sources are still there): same result, no loss.
            def copy(item: tuple[str, str, int]) -> None:
                src, dst, size = item
                try:
                    self.store.copy_file(src, dst, size)
                except FileNotFoundError:
                    if not self.store.exists(dst):
                        raise CorruptRecord(f"job {self.job_id}: {self.store.url(src)} is gone and "
                                            f"{self.store.url(dst)} was never written") from None
                inject("commit_job.mid_move")

            parallel(copy, moves, self.commit_threads)
            self.store.delete_files([src for src, _, _ in moves])
            return 0

        def move(item: tuple[str, str, int]) -> None:
            if self._move_once(*item):
                inject("commit_job.mid_move")

        parallel(move, moves, self.commit_threads)
        return len(renamed)

    def _publish_directories(self, recs: list[dict[str, Any]]) -> tuple[str, ...]:
        """Rename whole directories of committed files whose destination does not exist yet (v1, local disk).

        A new partition then appears in one rename, however many files and tasks it holds (Hadoop's mergePaths
        renames a task's directory when its destination is missing; here one ``_committed`` directory holds every
        task's files, so it is one rename per new partition for the whole job). Only a directory holding nothing
        but this plan's files is renamed, so a stray file (from a task commit the plan does not include) never
        becomes visible; anything else falls back to the file-by-file moves. Returns the source prefixes renamed.
        """
        if not any("/" in f["path"] for rec in recs for f in rec["files"]):
            return ()  # no directories: an unpartitioned output pays nothing for this
        planned: dict[str, set[str]] = {}
        for rec in recs:
            planned.setdefault(rec["data_dir"], set()).update(f["path"] for f in rec["files"])
        renamed: list[str] = []
        for data_dir, files in planned.items():
            children: dict[str, set[str]] = {}
            for directory in {partition_of(path) for path in files} - {""}:
                parts = directory.split("/")
                for i, part in enumerate(parts):
                    children.setdefault("/".join(parts[:i]), set()).add(part)
            stack = sorted(children.get("", ()), reverse=True)
            while stack:
                rel = stack.pop()
                if not self.store.exists(rel):
                    under = {f"{rel}/{p}" for p in self.store.list_names(f"{data_dir}/{rel}")}
                    if under and under <= files and self.store.move_dir_if_absent(f"{data_dir}/{rel}", rel):
                        renamed.append(f"{data_dir}/{rel}/")
                        inject("commit_job.mid_move")
                        continue
                stack.extend(f"{rel}/{d}" for d in sorted(children.get(rel, ()), reverse=True))
        return tuple(renamed)

    def _after_publish(self, job: Mapping[str, Any], recs: list[dict[str, Any]]) -> None:
        """Hook after the data is visible (the magic committer aborts stray uploads here)."""

    def _abort_external(self, job: Mapping[str, Any], keep: set[str]) -> int:
        """Hook of abort_job for state outside the job directory (the magic committer's pending uploads)."""
        return 0

    def _manifest(self, job: Mapping[str, Any], plan: Mapping[str, Any], recs: list[dict[str, Any]],
                  clock: StageClock, resumed: bool) -> dict[str, Any]:
        files = [{"path": f["path"], "size": f["size"], "rows": f.get("rows"), "task": rec["task"]}
                 for rec in recs for f in rec["files"]]
        files.sort(key=lambda f: f["path"])
        rows = [f["rows"] for f in files]
        warnings = []
        if self.algorithm == 2:
            warnings.append("algorithm v2: each task's files became visible at its task commit, before job commit; "
                            "readers during the job could see partial output")
        partitions = sorted({partition_of(f["path"]) for f in files} - {""})
        return {
            "committer": self.committer_name, "algorithm": self._config()["algorithm"], "mode": self.mode,
            "partition_by": list(self.partition_by), "job_id": self.job_id, "job_uuid": job["job_uuid"],
            "generation": job["generation"], "app_attempt": plan["app_attempt"], "labels": job.get("labels", {}),
            "started": plan["started"], "finished": records.now_iso(), "output": self.store.url(),
            "files": files,
            "totals": {"files": len(files), "bytes": sum(f["size"] for f in files),
                       "rows": sum(r for r in rows if r is not None) if None not in rows else None,
                       "tasks": len(recs), "partitions": len(partitions)},
            "partitions": partitions,
            "tasks": [{"task": r["task"], "attempt": r["attempt"], "app_attempt": r["app_attempt"],
                       "recovered_from_app": r.get("recovered_from_app"), "files": len(r["files"])} for r in recs],
            "deleted": {"files": len(plan["deletions"])},
            "replaced_generation": (job.get("replaces") or {}).get("job_uuid"),
            "durations": dict(clock.durations),
            "diagnostics": {"resumed": resumed, "commit_threads": self.commit_threads, "store": self.store.protocol,
                            "visibility": "task-commit" if self.algorithm == 2 else "job-commit",
                            "warnings": warnings, "pid": os.getpid()},
        }

    def _write_partition_markers(self, manifest: Mapping[str, Any], file_list: list[dict[str, Any]],
                                 visible: Mapping[str, int], ours: set[str]) -> None:
        """Dynamic mode: each partition the job wrote gets its own ``_SUCCESS`` (downstream DAGs wait for one day,
        not the whole table), listing that partition's files."""
        by_part: dict[str, list[dict[str, Any]]] = {}
        for f in file_list:
            by_part.setdefault(partition_of(f["path"]), []).append(f)
        for part, files in by_part.items():
            if not part:
                continue
            retained = [{"path": p, "size": size} for p, size in sorted(visible.items())
                        if p.startswith(part + "/") and p not in ours]
            doc = {**manifest, "partition": part, "files": files, "partitions": [part], "retained": retained,
                   "totals": {"files": len(files), "bytes": sum(f["size"] for f in files),
                              "rows": sum(f["rows"] or 0 for f in files), "tasks": len({f["task"] for f in files}),
                              "partitions": 1}}
            self.store.write_bytes(f"{part}/{SUCCESS}", records.dumps("success", doc))

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

    # ------------------------------------------------------------------ status (for people: the UI, the CLI)
    def status(self) -> dict[str, Any]:
        """The job as the storage tells it: ``absent``, ``running``, ``failed`` (aborted, committed tasks kept),
        ``committing`` or ``committed``, with per-task attempts. Reads only; safe at any moment."""
        job = self.job_record()
        if job is None:
            log = self.commit_log()
            if log is None:
                return {"job_id": self.job_id, "state": "absent", "output": self.store.url()}
            success = records.read(self.store, SUCCESS, "success")
            if success is not None and success.get("job_uuid") == log["job_uuid"]:
                log = {**log, "durations": success["durations"], "diagnostics": success["diagnostics"]}
            return {"state": "committed", **{k: v for k, v in log.items() if k not in ("format", "version")}}
        apps = self._app_attempts(job)
        app = apps[0] if apps else int(job["first_app_attempt"])
        plan = self._plan(job)
        tasks: dict[int, dict[str, Any]] = {}
        for a in sorted(apps):
            for rec in self._app_records(a, job["job_uuid"]):
                if a == app or rec["task"] not in tasks:
                    tasks[rec["task"]] = {"task": rec["task"], "attempt": rec["attempt"], "app_attempt": a,
                                          "recovered_from_app": rec.get("recovered_from_app"),
                                          "files": len(rec["files"]), "rows": sum(f.get("rows") or 0
                                                                                  for f in rec["files"]),
                                          "bytes": sum(f["size"] for f in rec["files"]), "current": a == app}
        attempts = self._attempt_history(job)
        for t, hist in attempts.items():
            tasks.setdefault(t, {"task": t, "attempt": None, "app_attempt": None, "files": 0, "rows": 0,
                                 "bytes": 0, "current": False}).update(hist)
        aborted = records.read(self.store, self.layout.abort_record(app), "abort")
        state = "committing" if plan is not None else ("failed" if aborted else "running")
        return {"job_id": self.job_id, "state": state, "job_uuid": job["job_uuid"],
                "generation": job["generation"], "app_attempt": app, "committer": self.committer_name,
                "algorithm": self._config()["algorithm"], "mode": self.mode, "output": self.store.url(),
                "labels": job.get("labels", {}), "aborted": aborted,
                "tasks": [tasks[t] for t in sorted(tasks)]}

    def _app_records(self, app: int, job_uuid: str) -> list[dict[str, Any]]:
        """Every task commit record of one application attempt (of generation *job_uuid*)."""
        out = []
        for name in self.store.list_dir(self.layout.commits_dir(app)):
            if name.startswith("task_") and name.endswith(".json") and name[5:-5].isdigit():
                rec = self._task_record(app, int(name[5:-5]), job_uuid)
                if rec is not None:
                    out.append(rec)
        return out

    def _attempt_history(self, job: Mapping[str, Any], winners: Mapping[tuple[int, int], int] | None = None
                         ) -> dict[int, dict[str, list[str]]]:
        """Per task, the attempts that failed, were denied, or are unfinished (``<app>.<try>``).

        ``failed``: recorded failed (aborted, fenced by a newer try, removed by the teardown); ``denied``: claimed
        its commit and lost to another attempt; ``unfinished``: set up, with no fate yet (running, or killed and
        not yet seen by a newer try). *winners* maps ``(application attempt, task)`` to the committed attempt when
        the caller has the records already (job commit); otherwise every record is read.
        """
        out: dict[int, dict[str, list[str]]] = {}
        apps = self._app_attempts(job)
        if winners is None:
            winners = {(a, rec["task"]): rec["attempt"] for a in apps for rec in self._app_records(a, job["job_uuid"])
                       if rec.get("recovered_from_app") is None}
        for a in apps:
            known = {(t, at): COMMITTING for (wa, t), at in winners.items() if wa == a}
            for trace in self.ledger.traces(a, known=known):
                hist = out.setdefault(trace.task, {"failed_attempts": [], "denied_attempts": [],
                                                   "unfinished_attempts": []})
                name = f"{a}.{trace.attempt}"
                if winners.get((a, trace.task)) == trace.attempt:
                    continue
                if trace.fate == FAILED:
                    hist["failed_attempts"].append(name)
                elif trace.fate == COMMITTING:
                    hist["denied_attempts"].append(name)
                else:
                    hist["unfinished_attempts"].append(name)
        return out

    # ------------------------------------------------------------------ abort
    def abort_job(self, *, keep_committed: bool = False) -> dict[str, Any]:
        """Remove this job's uncommitted work, leaving the target as it was before the job.

        Every uncommitted attempt is first recorded failed (I10), so a zombie of it can never commit afterwards;
        an attempt that had already claimed its commit is left alone (its commit may still finish, and then counts).
        With *keep_committed*, tasks committed with algorithm 1 (and magic) stay, hidden under ``_temporary``, for
        a later application attempt to recover: a failed DAG run that is cleared then recomputes only what is
        missing. v2 tasks cannot be kept: their files were visible; each is recorded failed, its record removed,
        then its files, and the directories that empties.

        Refuses (returns ``state="committing"``) once a job commit has fixed its plan: from then on only rolling
        forward is safe, and the next ``commit_job`` finishes the commit. Never touches another job's work.
        """
        job = self.job_record()
        if job is None:
            state = "committed" if self.commit_log() is not None else "absent"
            return {"job_id": self.job_id, "state": state, "aborted": False}
        if self._plan(job) is not None:
            return {"job_id": self.job_id, "state": "committing", "aborted": False}
        apps = self._app_attempts(job)
        removed_visible: list[str] = []
        kept: list[int] = []
        kept_uploads: set[str] = set()
        for app in apps:
            committed: set[tuple[int, int]] = set()
            for rec in self._app_records(app, job["job_uuid"]):
                if rec.get("recovered_from_app") is not None:
                    continue  # points at an earlier application attempt's record, handled there
                if self.algorithm == 2:
                    removed_visible += self._withdraw_v2_commit(rec)
                    continue
                committed.add((rec["task"], rec["attempt"]))
                if keep_committed:
                    self._complete_task_commit(rec)  # its data must leave the attempt directory before that goes
                    kept.append(rec["task"])
                    kept_uploads.update(f["upload_id"] for f in rec["files"] if "upload_id" in f)
            if keep_committed:
                for task, attempt in sorted(self._attempts_with_trace(app) - committed):
                    self._fail_and_discard(app, task, attempt)
                    inject("abort_job.mid_delete")
        removed_visible += self._sweep_v2_strays(job)
        removed = len(removed_visible) + self._abort_external(job, kept_uploads if keep_committed else set())
        if keep_committed:
            if apps:
                self.store.write_bytes(self.layout.abort_record(apps[0]), records.dumps(
                    "abort", {"at": records.now_iso(), "kept_committed_tasks": sorted(set(kept)),
                              "visible_files_removed": len(removed_visible)}))
            inject("abort_job.after_delete")
            return {"job_id": self.job_id, "state": "aborted", "aborted": True, "app_attempts": sorted(apps),
                    "kept_committed_tasks": sorted(set(kept)), "visible_files_removed": removed}
        # purge: the generation dies with its job record; a zombie that commits afterwards finds no job (or a new
        # generation, whose records it cannot join)
        for name in sorted(self.store.list_dir(self.layout.job_dir)):
            if name.isdigit():
                self.store.delete_tree(self.layout.app_dir(int(name)))
                inject("abort_job.mid_delete")
        self.store.delete_file(self.layout.job_record)
        self.store.delete_tree(self.layout.job_dir)
        self.store.remove_dir_if_empty(TEMPORARY)
        inject("abort_job.after_delete")
        return {"job_id": self.job_id, "state": "aborted", "aborted": True, "app_attempts": sorted(apps),
                "kept_committed_tasks": [], "visible_files_removed": removed}

    def _attempts_with_trace(self, app: int) -> set[tuple[int, int]]:
        """``(task, attempt)`` of every attempt of an application attempt with a trace: a ``.started`` mark, a
        fate, or a work directory (an attempt set up by an older version of this package has only that)."""
        found = {(t.task, t.attempt) for t in self.ledger.traces(app)}
        for name in self.store.list_dir(self.layout.work_root(app)):
            key = parse_attempt_name(name)
            if key is not None:
                found.add(key)
        return found

    def _withdraw_v2_commit(self, rec: Mapping[str, Any]) -> list[str]:
        """Undo one v2 task commit: the attempt is recorded failed, its record removed (nobody recovers it from
        now on), then its visible files and the directories that empties. A crash in between leaves visible files
        of this generation without a record: the next commit or abort sweeps them (:meth:`_sweep_v2_strays`)."""
        self.ledger.overrule(rec["app_attempt"], rec["task"], rec["attempt"])
        self.store.delete_file(self.layout.task_record(rec["app_attempt"], rec["task"]))
        paths = [f["path"] for f in rec["files"]]
        present = set(paths) - set(self.store.missing(paths))
        self._withdraw_markers(marker_dirs_above(present))
        self._delete_old(sorted(present))
        self.store.delete_tree(rec["work_dir"])
        return sorted(present)

    def _sweep_v2_strays(self, job: Mapping[str, Any]) -> list[str]:
        """v2: remove visible files of this generation that no record lists (see :meth:`_withdraw_v2_commit`)."""
        if self.algorithm != 2:
            return []
        strays = sorted(p for p in self._visible_files() if job["job_uuid"] in p.rsplit("/", 1)[-1])
        if strays:
            self._withdraw_markers(marker_dirs_above(strays))
            self._delete_old(strays)
        return strays


def read_success_marker(path: Any, *, fs: Any = None, storage_options: dict[str, Any] | None = None,
                        verify_files: bool = False) -> dict[str, Any]:
    """Load and validate the ``_SUCCESS`` manifest of an output root (or of a partition of it).

    *path* is the output root, the ``_SUCCESS`` file itself, or a :class:`Store`. With *verify_files*, every listed
    file must exist with its recorded size. Raises :class:`FileNotFoundError` when there is no ``_SUCCESS`` and
    :class:`CorruptRecord` naming the problem when it is not a valid manifest.
    """
    if isinstance(path, Store):
        store = path
    else:
        text = os.fspath(path) if hasattr(path, "__fspath__") else str(path)
        root = text[: -len(SUCCESS) - 1] if text.rstrip("/").endswith("/" + SUCCESS) else text
        store = store_for(root, fs=fs, storage_options=storage_options)
    try:
        data = store.read_bytes(SUCCESS)
    except FileNotFoundError:
        raise FileNotFoundError(f"no _SUCCESS at {store.url(SUCCESS)}: the job has not committed") from None
    where = store.url(SUCCESS)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{where} is not valid JSON ({exc}); it is truncated or was not written by "
                            "airflow-commit-provider") from exc
    manifest = records.validate_success(doc, where)
    if verify_files:
        verify_listed_files(store, manifest, where)
    return manifest


def verify_listed_files(store: Store, manifest: Mapping[str, Any], where: str) -> None:
    """I9 as a reader checks it: the visible files under the marker's directory are exactly the files it lists
    (``files`` and ``retained``), with their sizes; :class:`CorruptRecord` naming the first difference."""
    base = manifest.get("partition") or ""  # a partition's _SUCCESS lists paths from the output root
    sizes = dict(store.list_files("", visible_only=True))
    listed = {}
    for f in list(manifest["files"]) + list(manifest.get("retained") or []):
        listed[f["path"][len(base) + 1:] if base else f["path"]] = f
    for rel, f in listed.items():
        if sizes.get(rel) != f["size"]:
            raise CorruptRecord(f"{where} lists {f['path']} with {f['size']} bytes, but the output has "
                                f"{'no such file' if rel not in sizes else str(sizes[rel]) + ' bytes'}")
    unlisted = sorted(set(sizes) - set(listed))
    if unlisted:
        raise CorruptRecord(f"{where} does not describe its directory: {len(unlisted)} visible file(s) it does not "
                            f"list, e.g. {unlisted[:3]}")


__all__ = [
    "COMMITS", "FileOutputCommitter", "JobContext", "OutputCommitter", "TaskAttemptContext", "read_success_marker",
    "MODES", "normalize_algorithm",
]
