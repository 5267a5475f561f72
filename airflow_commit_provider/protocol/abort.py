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

import logging
from dataclasses import dataclass, field
from typing import Any

from . import records
from .audit.expiry import staging_expired
from .faults import inject, mid_delete
from .job import Job
from .layout import TEMPORARY, parse_attempt_name
from .records.job import JobRecord
from .records.lastcommit import write_back_root_marker
from .records.purged import PurgedGeneration
from .records.success import marker_dirs_above, withdraw_markers
from .stage import Stage
from .stores.helpers import delete_and_prune
from .tasks.attempts import TaskAttempts
from .timing import StageClock, StageStopped

log = logging.getLogger(__name__)


def abort_job(scope: Job, *, keep_committed: bool = False) -> dict[str, Any]:
    """See :meth:`~.committer.FileOutputCommitter.abort_job`. The work is done in stages on the protocol's base
    (:mod:`.stage`), as job commit's: each timed, counted and logged; a job that moved on meanwhile
    (:func:`superseded`) makes the abort stand down, at the start of a stage or wherever a stage checks again."""
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
    if keep_committed and staging_expired(scope, job):
        # the committed tasks' staged data may be gone (Azure's week): kept, a clear would recover them and its
        # job commit refuse them again, for ever; purged, the clear runs a new generation
        log.warning("job %s: generation %s is older than %s keeps staged data: its teardown purges it (the "
                    "committed tasks are not kept for a clear)", scope.job_id, job.job_uuid, scope.store.url())
        keep_committed = False
    run = AbortRun(scope, job, apps, keep_committed, StageClock(scope.store))
    try:
        ListUploads(run)(None)
        for app in apps:
            AbortTasks(run)(app)
        RemoveStrays(run)(None)
        AbortUploads(run)(None)
        FreeTarget(run)(None)
        if keep_committed:
            result = WriteAbortRecord(run)(None)
            WriteBackMarker(run)(None)
            return result
        WriteBackMarker(run)(None)
        return Purge(run)(None)
    except StoodDown:
        return stood_down(scope)


class StoodDown(StageStopped):
    """The job moved on while the abort ran (:func:`superseded`): it stands down, changing nothing more."""

    def __str__(self) -> str:
        return f"the job moved on while the abort was at {self.args[0]}: it stood down" if self.args else "stood down"


@dataclass
class AbortRun:
    """What the abort's stages share: the job as the abort read it, what it keeps and what it removed so far."""

    scope: Job
    job: JobRecord
    apps: list[int]
    #: the teardown (keep the committed tasks for a clear to recover) rather than a purge
    keep_committed: bool
    clock: StageClock
    #: the pending uploads the teardown listed before it read the traces (the module's docstring)
    uploads: list[tuple[str, str]] = field(default_factory=list)
    removed_visible: list[str] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    kept_uploads: set[str] = field(default_factory=set)
    removed: int = 0

    def check_current(self, stage: str = "") -> None:
        """:class:`StoodDown` when the job moved on since the abort read it (:func:`superseded`)."""
        if superseded(self.scope, self.job, self.apps):
            raise StoodDown(stage)

    def result(self) -> dict[str, Any]:
        return {"job_id": self.scope.job_id, "state": "aborted", "aborted": True, "app_attempts": sorted(self.apps),
                "purged": not self.keep_committed, "kept_committed_tasks": sorted(set(self.kept)),
                "visible_files_removed": self.removed}


class AbortStage(Stage[AbortRun, None, Any]):
    """A stage of the abort; most check the job themselves, where the abort always looked."""

    checks_generation = False


class ListUploads(AbortStage):
    """The teardown lists the pending uploads before the attempts' traces (the module's docstring); a purge, which
    ends the generation and records no fate, aborts every upload it finds at its end (:class:`AbortUploads`)."""

    name = "abort_list_uploads"
    fault = "abort_job.after_read"

    def apply(self, arg: None) -> None:
        if self.run.keep_committed:
            self.run.uploads = self.scope.publisher.job_uploads(self.run.job.job_uuid)


class AbortTasks(Stage[AbortRun, int, None]):
    """One application attempt's tasks: v2 commits withdrawn, committed tasks kept for recovery (the teardown),
    every other attempt with a trace recorded failed and its files removed (I10)."""

    name = "abort_tasks"
    checks_generation = False   # checked before each record and each attempt

    def apply(self, app: int) -> None:
        run, scope, job = self.run, self.scope, self.run.job
        committed: set[tuple[int, int]] = set()
        refused = scope.refused_tasks(job) if run.keep_committed else None
        for rec in scope.app_records(app, job.job_uuid):
            run.check_current(self.name)
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
                run.check_current(self.name)
                newer = scope.task_record(rec.app_attempt, rec.task, job.job_uuid) if run.keep_committed else None
                run.removed_visible += scope.publisher.withdraw_commit(
                    rec, keep={f.path for f in newer.files} if newer else set())
                continue
            if refused is not None and refused.refuses(rec):
                # a job commit refused it for good (records/refused.py): not kept, nor finished (its files may
                # never reach their names: two tasks' alike), its pending uploads aborted; the next application
                # attempt runs the task again
                scope.publisher.abort_uploads([(f.path, f.upload_id) for f in rec.files if f.upload_id is not None])
                continue
            committed.add((rec.task, rec.attempt))
            if run.keep_committed:
                scope.publisher.complete_task_commit(rec)  # its data must leave the attempt directory before that goes
                run.kept.append(rec.task)
                run.kept_uploads.update(f.upload_id for f in rec.files if f.upload_id is not None)
        if run.keep_committed:
            for task, attempt in sorted(attempts_with_trace(scope, app) - committed):
                run.check_current(self.name)
                attempts = TaskAttempts(scope)
                if not attempts.fail_and_discard(app, task, attempt):
                    # it claimed its commit first: its commit may still finish, so its pending uploads stay too
                    run.kept_uploads |= attempts.committing_uploads(app, task, attempt)
                inject("abort_job.mid_delete")


class RemoveStrays(AbortStage):
    """Visible files of the generation that no kept commit lists (v2's, a crash's), their markers first."""

    name = "abort_strays"
    checks_generation = True

    def apply(self, arg: None) -> None:
        run, scope = self.run, self.scope
        strays = sorted(scope.publisher.strays(scope.visible_files(), set(), run.job.job_uuid))
        if strays and run.keep_committed:
            live = live_files(scope, run.job, run.apps)
            strays = [p for p in strays if p not in live]
        if strays:
            withdraw_markers(scope.store, marker_dirs_above(strays))
            delete_and_prune(scope.store, strays, scope.commit_threads, mid_delete)
        run.removed_visible += strays


class AbortUploads(AbortStage):
    """The pending uploads of the attempts that did not keep them: those the teardown listed, or, in a purge,
    every upload of the generation."""

    name = "abort_uploads"

    def apply(self, arg: None) -> None:
        run = self.run
        uploads = run.uploads if run.keep_committed else self.scope.publisher.job_uploads(run.job.job_uuid)
        aborted = [(rel, uid) for rel, uid in uploads if uid not in run.kept_uploads]
        self.scope.publisher.abort_uploads(aborted)
        run.removed = len(run.removed_visible) + len(aborted)


class WriteBackMarker(AbortStage):
    """v2's task commits withdrew the markers above the files they published, and this abort took those files
    away (or took strays away): the target's last commit's root ``_SUCCESS`` goes back, unless another job may
    still change the directory (:mod:`.records.lastcommit`)."""

    name = "abort_marker_back"

    def apply(self, arg: None) -> None:
        scope, run = self.scope, self.run
        if not (scope.publisher.publishes_at_task_commit or run.removed_visible):
            return   # it took nothing visible away
        if superseded(scope, run.job, run.apps):
            return   # the job moved on (a clear's attempt may be publishing): its own steps write the markers
        write_back_root_marker(scope.store, scope.job_id, f"the abort of job {scope.job_id} took its uncommitted "
                                                          "files away")


class FreeTarget(AbortStage):
    """Mode ``error``: the target is free again, unless a generation of this job committed there. v2's teardown:
    the schema the withdrawn task commits fixed goes with them (:mod:`.schemas`), so the clear's tasks may write
    another one."""

    name = "abort_free_target"
    fault = "abort_job.after_uploads"   # past the teardown's last look at the job, before its abort record

    def apply(self, arg: None) -> None:
        run, scope = self.run, self.scope
        if scope.target_claim:
            run.check_current(self.name)
            scope.target_claim.release_uncommitted()
        if run.keep_committed and not scope.publisher.keeps_committed:
            scope.store.delete_file(scope.layout.job_schema(run.job.job_uuid))


class WriteAbortRecord(AbortStage):
    """The teardown's abort record, taken back when the job moved on while it was written (the module's
    docstring)."""

    name = "abort_record"

    def apply(self, arg: None) -> dict[str, Any]:
        run, scope = self.run, self.scope
        record = scope.layout.abort_record(run.apps[0], run.job.job_uuid) if run.apps else None
        if record is not None:
            scope.store.write_bytes(record, records.dumps(
                "abort", {"at": records.now_iso(), "kept_committed_tasks": sorted(set(run.kept)),
                          "visible_files_removed": len(run.removed_visible)}))
        inject("abort_job.after_delete")
        if record is not None and superseded(scope, run.job, run.apps):   # written late
            delete_and_prune(scope.store, [record], 1, lambda: None)
            raise StoodDown(self.name)
        return run.result()


class Purge(AbortStage):
    """The generation dies with its job record; a zombie that commits afterwards finds no job (or a new
    generation, whose records it cannot join)."""

    name = "abort_purge"
    fault = "abort_job.after_delete"
    checks_generation = True

    def apply(self, arg: None) -> dict[str, Any]:
        scope, job = self.scope, self.run.job
        # before the job record goes: a try of a run that set this generation up must not take the job's last
        # commit, another generation's, for its own (records/purged.py); without an owner nobody can tell its run
        owners = {o.key(): o for o in (scope.app_owner(app, job) for app in self.run.apps) if o is not None}
        at = records.now_iso()
        for key, owner in sorted(owners.items()):
            scope.store.write_bytes(scope.layout.purge_record(key), PurgedGeneration(
                scope.job_id, job.job_uuid, job.generation, owner, at).to_json())
        for name in sorted(scope.store.list_dir(scope.layout.job_dir)):
            if name.isdigit():
                scope.store.delete_tree(scope.layout.app_dir(int(name)))
                inject("abort_job.mid_delete")
        scope.store.delete_file(scope.layout.job_record)
        scope.store.delete_tree(scope.layout.job_dir)
        scope.store.remove_dir_if_empty(TEMPORARY)
        return self.run.result()


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
