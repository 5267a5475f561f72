"""Aborting a job: the failed run's teardown (keep committed tasks for recovery) or Hadoop's abortJob (purge).

Every uncommitted attempt is first recorded failed (I10), so a zombie of it can never commit afterwards; an
attempt that had already claimed its commit is left alone (its commit may still finish, and then counts).

The teardown lists the magic committer's pending uploads *before* the attempts' traces, for the reason
:meth:`~.tasks.attempts.TaskAttempts.sweep_uploads` gives: S3's list does not say which attempt started an upload,
but an attempt leaves its trace before its first upload, so every listed upload's attempt is among the traces read
afterwards, and is recorded failed, or kept, below. Only listed uploads are aborted: an attempt set up after the
traces were read (a late or cleared try) may still commit, and its uploads, started after the list, stay.

The teardown's abort record is written after its last look at the job, and the two cannot be one step: a teardown
paused in between (a zombie) writes it after the run was cleared and committed (whose cleanup took
``_temporary/<job>`` away: the write makes it again, in the committed output), or purged and set up again (a new
generation, in the same application attempt directory). So it looks once more after the write and takes back a
record the job has moved past, with the directories it made. A record it could not take back (killed in between)
misleads no one: it is named after its generation, which the readers of another never read, and the job's next
set-up or abort (:meth:`~.job.Job.remove_stale_abort_records`), or the next generation's commit or purge (which
remove the whole job directory), sweeps it.
"""

from __future__ import annotations

from typing import Any

from . import records
from .faults import inject, mid_delete
from .job import Job
from .layout import TEMPORARY, parse_attempt_name
from .records.job import JobRecord
from .records.success import marker_dirs_above, withdraw_markers
from .tasks.attempts import TaskAttempts


def abort_job(scope: Job, *, keep_committed: bool = False) -> dict[str, Any]:
    """See :meth:`~.committer.FileOutputCommitter.abort_job`."""
    job = scope.job_record()
    if job is None:
        state = "committed" if scope.commit_log() is not None else "absent"
        scope.remove_trash()   # a committed job's cleanup, deferred to the teardown
        scope.remove_stale_abort_records()
        return {"job_id": scope.job_id, "state": state, "aborted": False}
    # the teardown of a run named otherwise must not remove this job's attempts (CommitConfig.names)
    scope.check_record_names(job)
    if scope.commit_plan(job) is not None:
        return {"job_id": scope.job_id, "state": "committing", "aborted": False}
    apps = scope.app_attempts(job)
    other = scope.other_owner(apps[0], job) if apps else None
    if other is not None:   # another run took the job over (:mod:`.owners`): its work is not this run's to undo
        return stood_down(scope, f"application attempt {apps[0]} is owned by {other.describe()}, not by this run: "
                                 "it stood down")
    # the teardown lists the pending uploads before the traces (see the module's docstring); a purge, which ends
    # the generation and records no fate, aborts every upload it finds at its end
    uploads = scope.publisher.job_uploads(job.job_uuid) if keep_committed else []
    inject("abort_job.after_read")
    removed_visible: list[str] = []
    kept: list[int] = []
    kept_uploads: set[str] = set()
    for app in apps:
        committed: set[tuple[int, int]] = set()
        for rec in scope.app_records(app, job.job_uuid):
            if superseded(scope, job, apps):
                return stood_down(scope)
            if rec.adopted:
                if not scope.publisher.keeps_committed:  # adopts a v2 commit that goes below: it must go too
                    scope.store.delete_file(scope.layout.task_record(app, rec.task))
                continue  # points at an earlier application attempt's record, handled there
            if not scope.publisher.keeps_committed:
                # v2: the attempt is recorded failed and its record removed first (nobody recovers it from now
                # on), then its visible files; a crash in between leaves strays that the next try of the task
                # replaces (TaskAttempts.withdrawn_files) and the next commit or abort of the generation sweeps.
                # Once the record is gone a new try of the task may commit at the same names (after a clear, or
                # retried in this application attempt): its files are not this attempt's to remove (I10), unless
                # the purge ends the generation, records and all
                scope.ledger.overrule(rec.app_attempt, rec.task, rec.attempt)
                scope.store.delete_file(scope.layout.task_record(rec.app_attempt, rec.task))
                inject("abort_job.after_task_record")
                if superseded(scope, job, apps):
                    return stood_down(scope)
                newer = scope.task_record(rec.app_attempt, rec.task, job.job_uuid) if keep_committed else None
                removed_visible += scope.publisher.withdraw_commit(rec, keep={f.path for f in newer.files} if newer
                                                               else set())
                continue
            committed.add((rec.task, rec.attempt))
            if keep_committed:
                scope.publisher.complete_task_commit(rec)  # its data must leave the attempt directory before that goes
                kept.append(rec.task)
                kept_uploads.update(f.upload_id for f in rec.files if f.upload_id is not None)
        if keep_committed:
            for task, attempt in sorted(attempts_with_trace(scope, app) - committed):
                if superseded(scope, job, apps):
                    return stood_down(scope)
                attempts = TaskAttempts(scope)
                if not attempts.fail_and_discard(app, task, attempt):
                    # it claimed its commit first: its commit may still finish, so its pending uploads stay too
                    kept_uploads |= attempts.committing_uploads(app, task, attempt)
                inject("abort_job.mid_delete")
    if superseded(scope, job, apps):
        return stood_down(scope)
    strays = sorted(scope.publisher.strays(scope.visible_files(), set(), job.job_uuid))
    if strays and keep_committed:
        live = live_files(scope, job, apps)
        strays = [p for p in strays if p not in live]
    if strays:
        withdraw_markers(scope.store, marker_dirs_above(strays))
        scope.store.delete_and_prune(strays, scope.commit_threads, mid_delete)
    removed_visible += strays
    if not keep_committed:
        uploads = scope.publisher.job_uploads(job.job_uuid)
    aborted = [(rel, uid) for rel, uid in uploads if uid not in kept_uploads]
    scope.publisher.abort_uploads(aborted)
    removed = len(removed_visible) + len(aborted)
    if scope.target_claim:   # the target is free again, unless a generation of this job committed there
        if superseded(scope, job, apps):
            return stood_down(scope)
        scope.target_claim.release_uncommitted()
    inject("abort_job.after_uploads")   # past the teardown's last look at the job, before its abort record
    if keep_committed:
        record = scope.layout.abort_record(apps[0], job.job_uuid) if apps else None
        if record is not None:
            scope.store.write_bytes(record, records.dumps(
                "abort", {"at": records.now_iso(), "kept_committed_tasks": sorted(set(kept)),
                          "visible_files_removed": len(removed_visible)}))
        inject("abort_job.after_delete")
        if record is not None and superseded(scope, job, apps):   # written late (see the module's docstring)
            scope.store.delete_and_prune([record], 1, lambda: None)
            return stood_down(scope)
        return {"job_id": scope.job_id, "state": "aborted", "aborted": True, "app_attempts": sorted(apps),
                "kept_committed_tasks": sorted(set(kept)), "visible_files_removed": removed}
    # purge: the generation dies with its job record; a zombie that commits afterwards finds no job (or a new
    # generation, whose records it cannot join)
    if superseded(scope, job, apps):
        return stood_down(scope)
    for name in sorted(scope.store.list_dir(scope.layout.job_dir)):
        if name.isdigit():
            scope.store.delete_tree(scope.layout.app_dir(int(name)))
            inject("abort_job.mid_delete")
    scope.store.delete_file(scope.layout.job_record)
    scope.store.delete_tree(scope.layout.job_dir)
    scope.store.remove_dir_if_empty(TEMPORARY)
    inject("abort_job.after_delete")
    return {"job_id": scope.job_id, "state": "aborted", "aborted": True, "app_attempts": sorted(apps),
            "kept_committed_tasks": [], "visible_files_removed": removed}


def attempts_with_trace(scope: Job, app: int) -> set[tuple[int, int]]:
    """``(task, attempt)`` of every attempt of an application attempt with a trace: a ``.started`` mark, a fate,
    or a work directory (an attempt set up by an older version of this package has only that)."""
    found = {(t.task, t.attempt) for t in scope.ledger.traces(app)}
    for name in scope.store.list_dir(scope.layout.work_root(app)):
        key = parse_attempt_name(name)
        if key is not None:
            found.add(key)
    return found


def live_files(scope: Job, job: JobRecord, apps: list[int]) -> set[str]:
    """Files the generation's task records list now, read after the visible files were listed (a task commit
    creates its record before its files appear). Those of a commit this abort never saw (recorded after it
    read the records, by an attempt that had claimed its commit) stay when the generation goes on: that commit
    may still count (I10)."""
    return {f.path for app in apps for rec in scope.app_records(app, job.job_uuid) for f in rec.files}


def superseded(scope: Job, job: JobRecord, apps: list[int]) -> bool:
    """Has the job moved on since this abort read it (a clear opened a newer application attempt, a job commit
    fixed its plan, a new generation started)? A teardown that was paused (a zombie teardown) must then stand
    down: what it read describes a run that no longer exists, and acting on it would delete committed data."""
    now = scope.job_record()
    if now is None or now.job_uuid != job.job_uuid or scope.commit_plan(now) is not None:
        return True
    return bool(apps) and scope.app_attempts(now)[:1] != apps[:1]


def stood_down(scope: Job, why: str = "the job moved on while this abort ran (a newer application attempt or "
                                       "a job commit): it stood down") -> dict[str, Any]:
    return {"job_id": scope.job_id, "state": "superseded", "aborted": False, "why": why}
