"""Exceptions of the commit protocol.

Every error names the problem and the path or task it concerns, because the person reading it is usually a DAG
author looking at a failed task log, not the author of this code.
"""

from __future__ import annotations

from typing import Any


class CommitProtocolError(Exception):
    """Base class of every error raised by the protocol."""


class InvalidOutputSpec(CommitProtocolError, ValueError):
    """Bad configuration or bad input: unknown algorithm or mode, path traversal, non-empty target in error mode."""


class CommitDenied(CommitProtocolError):
    """A task attempt asked to commit and was refused.

    ``winner`` is the commit record of the attempt that did commit the task (a plain dict), or ``None`` when the
    attempt was refused because it was itself recorded as failed or belongs to a stale job generation. A denied
    attempt's files have already been removed when this is raised.
    """

    def __init__(self, message: str, *, task: int, attempt: int, winner: dict[str, Any] | None = None,
                 attempt_failed: bool = False) -> None:
        super().__init__(message)
        self.task = task
        self.attempt = attempt
        self.winner = winner
        self.attempt_failed = attempt_failed


class JobIncomplete(CommitProtocolError):
    """Job commit found expected tasks without a commit record (invariant I3). Nothing was changed."""

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class JobNotSetUp(CommitProtocolError):
    """An operation needs a job record and there is none (setup_job never ran, or the job was cleaned up)."""


class GenerationPurged(JobNotSetUp):
    """A try of a DAG run whose generation of the job was purged before it committed (:mod:`.records.purged`): the
    job's last commit is another generation's, and answering with it would let the run succeed without its data.
    Only a clear of the whole run, its setup included, sets up a new generation."""


class JobAlreadyCommitted(CommitProtocolError):
    """A task attempt tried to start after its job generation was committed (a zombie, typically)."""


class JobConfigMismatch(CommitProtocolError, ValueError):
    """A committer was built with a configuration that differs from the one the job was set up with."""


class JobIdentityCollision(JobConfigMismatch):
    """Two namings of jobs met at one job id: the job's record (or its commit log) was named by other parts than
    this committer's (``CommitConfig(names=...)``). Raised before anything changes, naming both."""


class OverlappingRun(CommitProtocolError):
    """Another run of the job owns its current application attempt (:mod:`.owners`): a setup refuses while that
    run has not finished, a write or a job commit of a run that does not own the attempt refuses; nothing was
    changed. ``owner`` is the run that owns it, ``app_attempt`` the attempt."""

    def __init__(self, message: str, owner: Any, app_attempt: int) -> None:
        super().__init__(message)
        self.owner = owner
        self.app_attempt = app_attempt


class CorruptRecord(CommitProtocolError, ValueError):
    """A record of the protocol (job record, task commit record, commit plan, ``_SUCCESS``) is unreadable."""


class MarkerChanging(CommitProtocolError):
    """A verifying read of ``_SUCCESS`` found the marker changed each time it listed the marker's directory: jobs
    are committing there. Not corruption: the output is not ready yet, and a later read may succeed."""


class CommitFilesGone(CommitProtocolError):
    """A job a reader waits for did commit, but files its commit listed are no longer there with their sizes: a
    later commit replaced them (an overwrite, a compaction). Final: waiting longer does not bring them back."""


class StorageCapabilityError(CommitProtocolError):
    """The file system lacks an operation the requested committer needs (e.g. atomic create-if-absent)."""


class StagedDataExpired(StorageCapabilityError):
    """The store may have discarded the job's staged data by itself (Azure drops staged blocks a week after they
    were written): the job cannot commit them. Refused before anything visible changes; a teardown and a new run
    write the rows again."""


class DedupInProgress(CommitProtocolError):
    """Another deduplication of the root created its plan and has not finished it; that plan runs first."""


class InputsChanged(CommitProtocolError):
    """Files a job was set up to replace (a compaction's inputs) are gone or are not the files it read: another job
    deleted or rewrote them. Raised before anything visible changes; ``paths`` names them."""

    def __init__(self, message: str, paths: list[str]) -> None:
        super().__init__(message)
        self.paths = paths


class TaskInputsChanged(InvalidOutputSpec):
    """A write task asked to run with other inputs than those its commit in the current application attempt was
    made for: a task commits once per application attempt, so it can neither be recovered (the files hold what it
    was given then) nor commit again there. Raised before the task's code runs; a clear of the whole run (a new
    application attempt) runs it again with its inputs of now."""


class InputsClaimed(CommitProtocolError):
    """Another compaction, still running (or failed and not aborted), holds the claim on an input: only one
    compaction at a time may delete a file. Raised before anything was merged or changed."""

    def __init__(self, message: str, path: str, holder: str) -> None:
        super().__init__(message)
        self.path = path
        self.holder = holder


class OwnedByTable(InvalidOutputSpec):
    """Maintenance (compaction, deduplication), or the setup of a job that publishes files and not into a table,
    refused a target that is, lies inside, or holds a Delta or Iceberg table: the table's log names its files, so
    only the table's own transactions may add, delete or merge them. Raised before anything is written; the message
    names the table's own way to do it (for a file job: ``table_format``, or a target outside the table)."""

    def __init__(self, message: str, *, table_format: str, location: str, name: str) -> None:
        super().__init__(message)
        self.table_format = table_format
        self.location = location
        self.name = name


class AuditFailed(InvalidOutputSpec):
    """The audit of a job's staged output failed, its approval was refused or never came, or a job commit found no
    passing audit of its specification for exactly the tasks it would publish: nothing was published. A data
    callable raises it to fail the audit; *tasks* names the tasks it blames (``None``: every task), which the next
    clear of the run runs again instead of recovering (:mod:`.audit`)."""

    def __init__(self, message: str, tasks: list[int] | None = None) -> None:
        super().__init__(message)
        self.tasks = None if tasks is None else sorted({int(t) for t in tasks})
