"""Job commit as named stages, after Hadoop's manifest committer (``CommitJobStage``).

::

    RecoverTasks -> FixPlan -> WithdrawMarkers -> Publish -> DeleteOld -> SaveCommitLog -> WriteMarkers -> Cleanup

Each stage is a small class whose :meth:`Stage.apply` takes the previous stage's output; the base
:class:`Stage` times it, counts the store requests it made, logs it at INFO under its name and fires its fault
point afterwards, so the crash matrix kills a job commit between any two stages. The plan fixed by
:class:`FixPlan` (exclusively, before anything visible changes) is what makes the whole resumable: a retry reads
it and runs the stages from :class:`WithdrawMarkers` on, every one idempotent.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import records
from ..errors import CorruptRecord, InvalidOutputSpec, JobIncomplete
from ..faults import inject
from ..records.inputs import check_unchanged
from ..layout import SUCCESS, TEMPORARY, task_name
from ..records.success import marker_dirs_above, withdraw_markers, write_markers
from ..parallel import parallel
from ..paths import partition_of
from ..publish import delete_and_prune
from ..stores import Store
from ..records.job import CommitLog, CommitPlan, JobRecord
from ..records.task import TaskCommitRecord

if TYPE_CHECKING:
    from ..committer import FileOutputCommitter

log = logging.getLogger(__name__)

In = TypeVar("In")
Out = TypeVar("Out")


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

    def end(self, stage: str) -> dict[str, int]:
        """Close *stage*: its duration and the requests it made (returned)."""
        now, counts = time.monotonic(), self.store.request_counts()
        self.durations[stage] = round(now - self._t, 6)
        delta = {op: n - self._r.get(op, 0) for op, n in counts.items() if n != self._r.get(op, 0)}
        if counts:
            self.requests[stage] = delta
        self._t, self._r = now, counts
        return delta

    def summary(self) -> dict[str, Any]:
        self.durations["total"] = round(time.monotonic() - self.start, 6)
        if self.connect >= 0.001:
            self.durations["client_start"] = round(self.connect, 6)
        return {"durations": dict(self.durations), "requests": dict(self.requests),
                "bytes_copied": self.store.bytes_copied - self.bytes_copied_start}


@dataclass
class JobCommitRun:
    """What every stage of one job commit shares: the committer, the job record, and the clock."""

    committer: FileOutputCommitter
    job: JobRecord
    clock: StageClock
    started: str
    resumed: bool = False
    #: leave the renamed job directory in ``_temporary/_trash`` for a later :meth:`remove_trash`
    defer_cleanup: bool = False
    #: the commit log as it was before this commit, read (and validated) before anything visible changes
    previous_log: CommitLog | None = None


@dataclass
class Plan:
    """The commit plan record and the task records it fixed, in task order."""

    fixed: CommitPlan
    recs: list[TaskCommitRecord] = field(default_factory=list)


class Stage(ABC, Generic[In, Out]):
    """One stage of job commit: timed, counted and logged by this base, then its fault point fired."""

    #: the stage's name in ``_SUCCESS.durations`` and in the log
    name: str = ""
    #: the fault point fired after the stage (:mod:`.faults`), if any
    fault: str | None = None

    def __init__(self, run: JobCommitRun) -> None:
        self.run = run
        self.c = run.committer

    def __call__(self, arg: In) -> Out:
        out = self.apply(arg)
        requests = self.run.clock.end(self.name)
        log.info("job %s: %s: %.1f ms%s%s", self.c.job_id, self.name, self.run.clock.durations[self.name] * 1000,
                 "".join(f", {k} {v}" for k, v in self.counts(out).items()),
                 f", requests {sum(requests.values())}" if requests else "")
        if self.fault:
            inject(self.fault)
        return out

    @abstractmethod
    def apply(self, arg: In) -> Out:
        """Do the stage's work on the previous stage's output."""

    def counts(self, out: Out) -> dict[str, int]:
        """What the log line reports besides the time (files, bytes, ...)."""
        return {}


class RecoverTasks(Stage[Sequence[int], dict[int, TaskCommitRecord]]):
    """Every expected task's record in the current application attempt, recovering earlier attempts' (I5), and
    each task commit's effect finished; :class:`JobIncomplete` naming the tasks nobody committed (I3)."""

    name = "recovery"
    fault = "commit_job.after_recovery"

    def apply(self, tasks: Sequence[int]) -> dict[int, TaskCommitRecord]:
        c, job = self.c, self.run.job
        apps = c.app_attempts(job)
        app = c.current_app_attempt(job)
        # one listing says which tasks have a record in the current application attempt (records are never
        # rewritten, only added): those are read straight; only the others look into earlier attempts
        present = set(c.store.list_dir(c.layout.commits_dir(app)))
        recs: dict[int, TaskCommitRecord] = {}
        missing: list[int] = []

        def recover(task: int) -> None:
            rec = None
            if f"{task_name(task)}.json" in present:
                rec = c.attempts.record(app, task, job.job_uuid)
            if rec is None:
                rec = c.attempts.recover(job, app, task, apps)
            if rec is None:
                missing.append(task)
            else:
                recs[task] = rec

        parallel(recover, list(tasks), c.commit_threads)
        if missing:
            missing.sort()
            shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
            raise JobIncomplete(f"job {c.job_id} cannot commit: {len(missing)} of {len(tasks)} expected task(s) "
                                f"have no committed attempt: {shown}", missing)
        owner: dict[str, int] = {}
        for task in tasks:
            for f in recs[task].files:
                if f.path in owner:
                    raise InvalidOutputSpec(f"tasks {owner[f.path]} and {task} both wrote {f.path}; file "
                                            "names must be unique across tasks (include the task number)")
                owner[f.path] = task
        c.publisher.complete_task_commits(list(recs.values()))
        return {t: recs[t] for t in tasks}

    def counts(self, out: dict[int, TaskCommitRecord]) -> dict[str, int]:
        return {"tasks": len(out), "files": sum(len(r.files) for r in out.values())}


class FixPlan(Stage[dict[int, TaskCommitRecord], Plan]):
    """Decide, before anything visible changes, what the commit does, and record it exclusively: the tasks, the
    old files to delete, the markers to withdraw, the attempt history. The plan names tasks (their records in an
    application attempt are never rewritten), so it stays small whatever the number of files. A concurrent job
    commit that fixed its plan first wins; this one then follows that plan. In mode ``error`` the job claims the
    target just before (:mod:`.targetclaim`): the claim decides between jobs in mode ``error`` that found it empty
    at the same moment; the emptiness check refuses what other modes wrote there. A job that replaces
    named files (a compaction) refuses here, changing nothing, when one of them is gone or changed since its setup."""

    name = "plan"

    def apply(self, recs: dict[int, TaskCommitRecord]) -> Plan:
        c, job = self.c, self.run.job
        check_tree(c, recs.values())
        dsts = {f.path for rec in recs.values() for f in rec.files}
        replaced = job.replaced_files
        replace_files = set(job.replace_files)  # e.g. the small files a compaction merged
        visible = c.visible_files()
        strays = c.publisher.strays(visible, dsts, job.job_uuid)
        if c.mode == "error":
            c.check_empty(replaced | dsts | strays, visible)
        deletions: set[str] = set()
        if c.mode == "overwrite":
            deletions = set(visible)
        elif c.mode == "dynamic":
            parts = {partition_of(p) for p in dsts}
            deletions = {p for p in visible if partition_of(p) in parts}
        elif c.publisher.visibility == "job-commit":
            clobbered = sorted(p for p in dsts if p in visible and p not in replaced)
            if clobbered:
                raise InvalidOutputSpec(f"{c.mode} would replace existing file(s) {clobbered[:5]} in "
                                        f"{c.store.url()}; nothing was changed")
        if job.replace_inputs:
            check_unchanged(c.store, job)  # a compaction's inputs: still the files its merges read (:mod:`.inputs`)
        deletions |= ((replaced | replace_files) & visible) | strays
        deletions -= dsts
        withdraw = marker_dirs_above(dsts | deletions)
        if c.mode == "overwrite":
            withdraw |= set(c.store.marker_dirs(SUCCESS))
        winners = {(r.committed_in_app, r.task): r.attempt for r in recs.values()}
        history = {str(t): h for t, h in c.status_reader.attempt_history(job, winners).items()
                   if h["failed_attempts"] or h["denied_attempts"] or h["unfinished_attempts"]}
        plan = CommitPlan(c.job_id, job.job_uuid, c.current_app_attempt(job), self.run.started, tuple(sorted(recs)),
                          tuple(sorted(deletions)), tuple(sorted(withdraw)), history)
        if c.mode == "error":
            c.target_claim.take(job)   # the decision between jobs that checked the empty target at once
        if not c.store.create_exclusive(c.layout.plan(job.job_uuid), plan.to_json()):
            stored = c.commit_plan(job)
            assert stored is not None
            return Plan(stored, planned_records(c, stored))
        return Plan(plan, list(recs.values()))

    def counts(self, out: Plan) -> dict[str, int]:
        return {"deletions": len(out.fixed.deletions), "markers": len(out.fixed.withdraw)}


class WithdrawMarkers(Stage[Plan, Plan]):
    """I9: every marker above a file this commit adds or deletes goes before the first such change. The plan
    names them, so a resumed commit withdraws them again (idempotent) before it continues."""

    name = "withdraw"
    fault = "commit_job.after_withdraw"

    def apply(self, plan: Plan) -> Plan:
        withdraw_markers(self.c.store, plan.fixed.withdraw)
        return plan


class Publish(Stage[Plan, int]):
    """Make every planned task's files visible at their final names, through the algorithm's publisher
    (:mod:`.publish`); then the publisher's clean-up (magic: abort the job's other uploads). Returns the number
    of directories renamed whole. A compaction (``replace_first``) deletes its inputs first."""

    name = "moves"
    fault = "commit_job.after_moves"

    def apply(self, plan: Plan) -> int:
        if self.run.job.replace_first:
            delete_and_prune(self.c.store, plan.fixed.deletions, self.c.commit_threads)
        with self.c.store.batch():  # each directory the moves changed fsynced once, before the deletions
            renamed = self.c.publisher.publish(plan.recs)
        self.c.publisher.after_publish(self.run.job.job_uuid, plan.recs)
        return renamed

    def counts(self, out: int) -> dict[str, int]:
        return {"directories_renamed": out}


class DeleteOld(Stage[Plan, int]):
    """Delete the plan's old files (after the new ones are in place: I8), then the directories that emptied."""

    name = "deletes"
    fault = "commit_job.after_deletes"

    def apply(self, plan: Plan) -> int:
        if not self.run.job.replace_first:
            delete_and_prune(self.c.store, plan.fixed.deletions, self.c.commit_threads)
        return len(plan.fixed.deletions)

    def counts(self, out: int) -> dict[str, int]:
        return {"files": out}


@dataclass
class Committed:
    """The manifest of the committed job, and its file list as JSON (encoded once, for the commit log and for
    ``_SUCCESS``: at 10,000 files the encoding costs as much as a tenth of the renames)."""

    manifest: dict[str, Any]
    files_json: bytes


class SaveCommitLog(Stage[tuple[Plan, int], Committed]):
    """Build the manifest and write the commit log ``_commits/<job>.json``, the record of the committed job that
    outlives ``_temporary`` (the next generation's commit replaces these files; the UI reads its history)."""

    name = "commit_log"
    fault = "commit_job.after_commit_log"

    def apply(self, arg: tuple[Plan, int]) -> Committed:
        plan, renamed = arg
        c, job = self.c, self.run.job
        manifest = build_manifest(c, job, plan, self.run.resumed)
        manifest["diagnostics"]["directories_renamed"] = renamed
        previous = self.run.previous_log
        log = CommitLog(manifest) if previous is None else previous.followed_by(manifest)
        files_json = records.encode(manifest["files"])
        c.store.write_bytes(c.layout.commit_log, log.to_json(files_json))
        return Committed(manifest, files_json)

    def counts(self, out: Committed) -> dict[str, int]:
        return {"files": out.manifest["totals"]["files"], "bytes": out.manifest["totals"]["bytes"]}


class WriteMarkers(Stage[Committed, dict[str, Any]]):
    """The markers, ``_SUCCESS`` of the root last (I4): they list the job's files and what they retain."""

    name = "markers"
    fault = "commit_job.after_success"

    def apply(self, committed: Committed) -> dict[str, Any]:
        manifest = committed.manifest
        costs = self.run.clock.summary()
        manifest["durations"] = costs["durations"]
        manifest["diagnostics"].update(requests=costs["requests"], bytes_copied=costs["bytes_copied"])
        retained = write_markers(self.c.store, {k: v for k, v in manifest.items() if k != "files"},
                                 manifest["files"], per_partition=self.c.mode == "dynamic",
                                 files_json=committed.files_json)
        manifest["diagnostics"]["retained_files"] = retained
        return manifest


class Cleanup(Stage[dict[str, Any], dict[str, Any]]):
    """Take ``_temporary/<job>`` away. Only under hidden names, after ``_SUCCESS``: readers never look there, and
    a crash from here on is finished from the commit log (without the job record, and with the commit log, the
    generation counts as committed).

    Where a directory renames in one step (a local disk), the whole job directory, job record included, is
    renamed into ``_temporary/_trash`` and deleted from there: at once, unless the caller defers it
    (:meth:`~.committer.FileOutputCommitter.remove_trash`, which the stage's teardown, the next setup and the
    next abort also call). Deleting is the slow part (three records per task: at 10,000 one-file tasks it took
    several times the whole commit), and nothing waits for it. Object stores have no directory rename: there
    the job record goes first, then the rest, in batched deletes."""

    name = "cleanup_after_success"
    fault = "commit_job.after_cleanup"

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        c = self.c
        if not c.store.move_dir_if_absent(c.layout.job_dir, c.layout.trash_entry(uuid.uuid4().hex)):
            c.store.delete_file(c.layout.job_record)
            c.store.delete_tree(c.layout.job_dir)
        if not self.run.defer_cleanup:
            c.remove_trash()
        c.store.remove_dir_if_empty(TEMPORARY)
        return manifest


def build_manifest(c: FileOutputCommitter, job: JobRecord, plan: Plan, resumed: bool) -> dict[str, Any]:
    """The ``_SUCCESS`` document of a job commit, from its plan and records (durations are added last)."""
    recs = plan.recs
    files = sorted(({"path": f.path, "size": f.size, "rows": f.rows, "task": rec.task}
                    for rec in recs for f in rec.files), key=lambda f: f["path"])
    rows = [f["rows"] for f in files]
    warnings = []
    if c.publisher.visibility == "task-commit":
        warnings.append(f"algorithm {c.publisher.label}: each task's files became visible at its task commit, "
                        "before job commit; readers during the job could see partial output")
    partitions = sorted({partition_of(f["path"]) for f in files} - {""})
    history = plan.fixed.attempt_history
    empty = {"failed_attempts": [], "denied_attempts": [], "unfinished_attempts": []}
    return {
        "committer": c.committer_name, "algorithm": c.publisher.algorithm, "mode": c.mode,
        "partition_by": list(c.partition_by), "job_id": c.job_id, "job_uuid": job.job_uuid,
        "generation": job.generation, "app_attempt": plan.fixed.app_attempt, "labels": dict(job.labels),
        "started": plan.fixed.started, "finished": records.now_iso(), "output": c.store.url(),
        "files": files,
        "totals": {"files": len(files), "bytes": sum(f["size"] for f in files),
                   "rows": sum(r for r in rows if r is not None) if None not in rows else None,
                   "tasks": len(recs), "partitions": len(partitions)},
        "partitions": partitions,
        "tasks": [{"task": r.task, "attempt": r.attempt, "app_attempt": r.app_attempt,
                   "recovered_from_app": r.recovered_from_app, "committed_attempt": f"{r.committed_in_app}.{r.attempt}",
                   "files": len(r.files),
                   **{**empty, **history.get(str(r.task), {})}} for r in recs],
        "deleted": {"files": len(plan.fixed.deletions)},
        "replaced_generation": job.replaces.job_uuid if job.replaces else None,
        "durations": {},
        "diagnostics": {"resumed": resumed, "commit_threads": c.commit_threads, "store": c.store.protocol,
                        "visibility": c.publisher.visibility, "warnings": warnings, "pid": os.getpid()},
    }


def run_job_commit(c: FileOutputCommitter, job: JobRecord, tasks: Sequence[int] | None,
                   clock: StageClock, defer_cleanup: bool = False) -> dict[str, Any]:
    """Run the stages: from the start, or, when a plan exists (a crashed commit), from the withdrawal on."""
    # Every record the commit reads is read (and validated) before anything changes: a commit log that cannot be
    # read stops the commit here, naming it, not after the new files are published and the old ones deleted.
    run = JobCommitRun(c, job, clock, records.now_iso(), defer_cleanup=defer_cleanup, previous_log=c.commit_log())
    stored = c.commit_plan(job)
    if stored is None:
        if tasks is None:
            tasks = sorted(c.registered_tasks(job))
        plan = FixPlan(run)(RecoverTasks(run)(tasks))
    else:
        run.resumed = True
        plan = Plan(stored, planned_records(c, stored))
        check_tree(c, plan.recs)
    inject("commit_job.after_plan")
    if c.mode == "error":
        # every run of a plan, resumed ones too, holds the claim before its first visible change: a plan fixed
        # without one (by an earlier release), or one whose claim an abort freed under it, takes it now or stops
        c.target_claim.take(job)
    plan = WithdrawMarkers(run)(plan)
    renamed = Publish(run)(plan)
    DeleteOld(run)(plan)
    manifest = WriteMarkers(run)(SaveCommitLog(run)((plan, renamed)))
    # _SUCCESS holds the stages up to its own writing; the caller also gets the markers stage and the cleanup
    manifest["durations"]["markers"] = run.clock.durations["markers"]
    manifest["durations"]["total"] = round(time.monotonic() - run.clock.start, 6)
    cleanup_started = time.monotonic()
    Cleanup(run)(manifest)
    manifest["durations"]["cleanup_after_success"] = round(time.monotonic() - cleanup_started, 6)
    manifest["diagnostics"]["cleanup_deferred"] = defer_cleanup and c.store.renames_directories
    return manifest


def check_tree(c: FileOutputCommitter, recs: Iterable[TaskCommitRecord]) -> None:
    """Before the first visible change of a job commit: no link and no other volume where the commit creates,
    moves or deletes (the destination partitions, the job's directory, anything readers see)."""
    dirs = {partition_of(f.path) for rec in recs for f in rec.files} | {c.layout.job_dir}
    c.store.check_tree(dirs - {""}, visible=True)


def planned_records(c: FileOutputCommitter, plan: CommitPlan) -> list[TaskCommitRecord]:
    """The task records a plan fixed (records in an application attempt are never rewritten)."""
    recs = []
    for task in plan.tasks:
        rec = c.attempts.record(plan.app_attempt, task, plan.job_uuid)
        if rec is None:
            raise CorruptRecord(f"job {c.job_id}: the commit plan names task {task}, whose record "
                                f"{c.store.url(c.layout.task_record(plan.app_attempt, task))} is gone")
        recs.append(rec)
    return recs
