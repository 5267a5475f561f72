"""Job commit's stages, in the order they run::

    RecoverTasks -> FixPlan -> WithdrawMarkers -> Publish -> DeleteOld -> SaveCommitLog -> WriteMarkers -> Cleanup

Each takes the previous stage's output (:class:`~.stage.Stage`). The plan fixed by :class:`FixPlan`
(exclusively, before anything visible changes) is what makes the whole resumable: a retry reads it and runs the
stages from :class:`WithdrawMarkers` on, every one idempotent.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from .. import records
from ..audit.expiry import refuse_expired_staging
from ..errors import CorruptRecord, InputsClaimed, InvalidOutputSpec, JobIncomplete
from ..faults import mid_delete
from ..job import Job
from ..layout import SUCCESS, TEMPORARY
from ..parallel import parallel
from ..paths import join
from ..records.claims import live_holders
from ..records.inputs import check_unchanged
from ..records.job import CommitLog, CommitPlan, JobRecord
from ..records.refused import RefusedTasks, refused_note
from ..records.success import SuccessManifest, marker_dirs_above, withdraw_markers, write_markers
from ..records.task import TaskCommitRecord
from ..records.underway import markers_changing
from ..replacing import holders, refuse_mixed
from ..schemas import check_one_schema
from ..status import JobStatus
from ..stores import Store
from ..stores.helpers import delete_and_prune
from ..tasks.attempts import TaskAttempts
from . import names
from .stage import Plan, Stage
from .table import check_table


class RecoverTasks(Stage[Sequence[int], dict[int, TaskCommitRecord]]):
    """Every expected task's record in the current application attempt, recovering earlier attempts' (I5), and
    each task commit's effect finished; :class:`JobIncomplete` naming the tasks nobody committed (I3)."""

    checks_generation = False   # reads, and adopts into this generation's application attempt only
    name = names.RECOVERY
    fault = "commit_job.after_recovery"

    def apply(self, tasks: Sequence[int]) -> dict[int, TaskCommitRecord]:
        scope, job = self.scope, self.run.job
        apps = scope.app_attempts(job)
        app = scope.current_app_attempt(job)
        # one listing says which tasks have a record in the current application attempt (records are never
        # rewritten, only added): those are read straight, all together; only the others look into earlier attempts
        present = set(scope.store.list_dir(scope.layout.commits_dir(app)))
        attempts = TaskAttempts(scope)
        refused = scope.refused_tasks(job)   # read once for all the tasks
        recs = scope.task_records(app, tasks, job.job_uuid, listed=present)
        missing: list[int] = []

        def recover(task: int) -> None:
            rec = attempts.recover(job, app, task, apps, refused)
            if rec is None:
                missing.append(task)
            else:
                recs[task] = rec

        parallel(recover, [t for t in tasks if t not in recs], scope.commit_threads)
        if missing:
            missing.sort()
            shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
            raise JobIncomplete(f"job {scope.job_id} cannot commit: {len(missing)} of {len(tasks)} expected task(s) "
                                f"have no committed attempt: {shown}{refused_hint(refused, missing)}", missing)
        clashes = clashing_names({t: recs[t] for t in tasks})
        if clashes:
            path, (first, second, *_) = next(iter(clashes.items()))
            refuse_for_names(scope, job, [recs[t] for t in sorted({t for ts in clashes.values() for t in ts})],
                             f"tasks {first} and {second} both wrote {path}; file names must be unique across tasks "
                             "(include the task number)")
        scope.publisher.complete_task_commits(list(recs.values()))
        return {t: recs[t] for t in tasks}

    def counts(self, out: dict[int, TaskCommitRecord]) -> dict[str, int]:
        return {"tasks": len(out), "files": sum(len(r.files) for r in out.values())}


def clashing_names(recs: Mapping[int, TaskCommitRecord]) -> dict[str, list[int]]:
    """The file names more than one of the records *recs* (by task) wrote, each with its writers: none, as a rule,
    which one set of all the names tells (10,000 files: a writer list per name took three times as long)."""
    paths = [f.path for rec in recs.values() for f in rec.files]
    if len(set(paths)) == len(paths):
        return {}
    writers: dict[str, list[int]] = {}
    for task, rec in recs.items():
        for f in rec.files:
            writers.setdefault(f.path, []).append(task)
    return {path: ts for path, ts in writers.items() if len(ts) > 1}


def refuse_for_names(scope: Job, job: JobRecord, bad: Sequence[TaskCommitRecord], error: str,
                     alternative: str = "") -> NoReturn:
    """:class:`InvalidOutputSpec` *error* for file names the commit cannot publish (two tasks' alike, one the
    target holds), nothing changed. The commits of *bad* are recorded as refused first (where they are not
    visible yet): recovered, they would be refused the same way on every clear, and the fixed code never run."""
    if scope.publisher.publishes_at_task_commit:
        raise InvalidOutputSpec(error)
    scope.refuse_tasks(job, bad, error)
    then = "so fix the file names first" + (f" ({alternative})" if alternative else "")
    raise InvalidOutputSpec(f"{error}. {refused_note(bad, then)}")


def refused_hint(refused: RefusedTasks, missing: Sequence[int]) -> str:
    """What a :class:`JobIncomplete` adds about missing tasks whose earlier commit a job commit refused (they are
    not recovered, :mod:`..records.refused`): that their write tasks did not run again since, and what to clear."""
    again = [t for t in missing if t in refused.tasks]
    if not again:
        return ""
    shown = ", ".join(map(str, again[:20])) + (" ..." if len(again) > 20 else "")
    return (f". Task(s) {shown} were refused by an earlier job commit or audit ({refused.reason(again[0])}) and are "
            "not recovered: clear their write tasks (the whole DAG run, the stage's setup included) so they run again")


def wait_for_compactions(store: Store, replaced: set[str], job: JobRecord) -> None:
    """:class:`InputsClaimed` (retried) when a live compaction holds a file this commit would delete: it has merged
    the file's rows, or will, and would publish them again after the deletion. Its retry, after the compaction
    committed, finds the rows in the merged file (:mod:`..replacing`). Nothing was changed."""
    held = live_holders(store, replaced)
    if held:
        rel, holder = sorted(held.items())[0]
        raise InputsClaimed(f"job {job.job_id} replaces {store.url(rel)} of its generation "
                            f"{job.replaces.generation if job.replaces else None}, which {holder} is compacting: "
                            "this commit waits for it (its retry, once the compaction committed, replaces the merged "
                            "file); nothing was changed", rel, holder)


class FixPlan(Stage[dict[int, TaskCommitRecord], Plan]):
    """Decide, before anything visible changes, what the commit does, and record it exclusively: the tasks, the
    old files to delete, the markers to withdraw, the attempt history. The plan names tasks (their records in an
    application attempt are never rewritten), so it stays small whatever the number of files. A concurrent job
    commit that fixed its plan first wins; this one then follows that plan. In mode ``error`` the job claims the
    target just before (:mod:`.targetclaim`): the claim decides between jobs in mode ``error`` that found it empty
    at the same moment; the emptiness check refuses what other modes wrote there. A job that replaces
    named files (a compaction) refuses here, changing nothing, when one of them is gone or changed since its setup."""

    name = names.PLAN

    def apply(self, recs: dict[int, TaskCommitRecord]) -> Plan:
        scope, job = self.scope, self.run.job
        check_tree(scope, recs.values())
        refuse_expired_staging(scope, job)
        dsts = {f.path for rec in recs.values() for f in rec.files}
        if scope.table is not None:   # the table transaction replaces; nothing is deleted at file level
            check_table(scope, job, recs.values())
            return self._fix(recs, set(), marker_dirs_above(dsts))
        check_one_schema(scope, job, recs.values())
        replace_files = set(job.replace_files)  # e.g. the small files a compaction merged
        visible = scope.visible_files()
        strays = scope.publisher.strays(visible, dsts, job.job_uuid)
        mode = scope.mode
        deletions = mode.replaced(visible, dsts)
        # the replaced generation's files, where its set-up found them (:mod:`..replacing`): again if one went since
        found = holders(scope.store, job.replaced_files, visible, deletions, scope.commit_threads,
                        job.replaces.job_uuid if job.replaces else None)
        refuse_mixed(scope.store, found, job.job_id, job.replaces.generation if job.replaces else None, mode.name)
        replaced = found.files
        if replaced and not job.replace_first:
            wait_for_compactions(scope.store, replaced, job)
        if mode.claims_target:
            scope.check_empty(replaced | dsts | strays, visible)
        if mode.refuses_clobber and not scope.publisher.publishes_at_task_commit:
            clobbered = sorted(p for p in dsts if p in visible and p not in replaced)
            if clobbered:
                refuse_for_names(scope, job, [r for r in recs.values() if any(f.path in set(clobbered)
                                                                             for f in r.files)],
                                 f"{mode.name} would replace existing file(s) {clobbered[:5]} in {scope.store.url()}; "
                                 "nothing was changed", "or remove those files")
        if job.replace_inputs:
            check_unchanged(scope.store, job)  # a compaction's inputs: still the files its merges read (:mod:`.inputs`)
        deletions |= ((replaced | replace_files) & visible) | strays
        deletions -= dsts
        withdraw = marker_dirs_above(dsts | deletions)
        if mode.withdraws_all_markers:
            withdraw |= set(scope.store.marker_dirs(SUCCESS))
        restore: set[str] = set()
        if job.replace_first:
            # a compaction: every row under the markers it withdraws stays, so the partitions' markers there now
            # are written again (their directories' new listing) after the commit
            restore = {d for d in withdraw if d and scope.store.exists(join(d, SUCCESS))}
        return self._fix(recs, deletions, withdraw, restore)

    def _fix(self, recs: dict[int, TaskCommitRecord], deletions: set[str], withdraw: set[str],
             restore: Iterable[str] = ()) -> Plan:
        """Record the plan exclusively (or follow the one a concurrent commit recorded first)."""
        scope, job = self.scope, self.run.job
        winners = {(r.committed_in_app, r.task): r.attempt for r in recs.values()}
        history = {str(t): h for t, h in JobStatus(scope).attempt_history(job, winners).items()}
        plan = CommitPlan(scope.job_id, job.job_uuid, scope.current_app_attempt(job), self.run.started,
                          tuple(sorted(recs)), tuple(sorted(deletions)), tuple(sorted(withdraw)), history,
                          tuple(sorted(restore)), self.run.audit)
        if scope.target_claim:
            scope.target_claim.take(job)   # the decision between jobs that checked the empty target at once
        if not scope.store.create_exclusive(scope.layout.plan(job.job_uuid), plan.to_json()):
            stored = scope.commit_plan(job)
            if stored is None:
                raise CorruptRecord(f"job {scope.job_id}: the commit plan "
                                    f"{scope.store.url(scope.layout.plan(job.job_uuid))} exists but cannot be read")
            return Plan(stored, planned_records(scope, stored))
        return Plan(plan, list(recs.values()))

    def counts(self, out: Plan) -> dict[str, int]:
        return {"deletions": len(out.fixed.deletions), "markers": len(out.fixed.withdraw)}


class WithdrawMarkers(Stage[Plan, Plan]):
    """I9: every marker above a file this commit adds or deletes goes before the first such change. The plan
    names them, so a resumed commit withdraws them again (idempotent) before it continues."""

    name = names.WITHDRAW
    fault = "commit_job.after_withdraw"

    def apply(self, plan: Plan) -> Plan:
        withdraw_markers(self.scope.store, plan.fixed.withdraw)
        return plan


class Publish(Stage[Plan, int]):
    """Make every planned task's files visible at their final names, through the algorithm's publisher
    (:mod:`.publish`); then the publisher's clean-up (magic: abort the job's other uploads). Returns the number
    of directories renamed whole. A compaction (``replace_first``) deletes its inputs first."""

    name = names.MOVES
    fault = "commit_job.after_moves"

    def apply(self, plan: Plan) -> int:
        if self.run.job.replace_first:
            delete_and_prune(self.scope.store, plan.fixed.deletions, self.scope.commit_threads, mid_delete)
        with self.scope.store.batch():  # each directory the moves changed fsynced once, before the deletions
            renamed = self.scope.publisher.publish(plan.recs)
        self.scope.publisher.after_publish(self.run.job.job_uuid, plan.recs)
        return renamed

    def counts(self, out: int) -> dict[str, int]:
        return {"directories_renamed": out}


class DeleteOld(Stage[Plan, int]):
    """Delete the plan's old files (after the new ones are in place: I8), then the directories that emptied."""

    name = names.DELETES
    fault = "commit_job.after_deletes"

    def apply(self, plan: Plan) -> int:
        if not self.run.job.replace_first:
            delete_and_prune(self.scope.store, plan.fixed.deletions, self.scope.commit_threads, mid_delete)
        return len(plan.fixed.deletions)

    def counts(self, out: int) -> dict[str, int]:
        return {"files": out}


@dataclass
class Committed:
    """The manifest of the committed job, and its long lists as JSON (:meth:`SuccessManifest.encode_long`: encoded
    once, for the commit log and for every ``_SUCCESS``)."""

    manifest: SuccessManifest
    encoded: dict[str, records.Encoded]
    #: the partitions whose withdrawn markers the plan says to write again (:attr:`CommitPlan.restore`)
    restore: tuple[str, ...] = ()


class SaveCommitLog(Stage[tuple[Plan, int], Committed]):
    """Build the manifest and write the commit log ``_commits/<job>.json``, the record of the committed job that
    outlives ``_temporary`` (the next generation's commit replaces these files; the UI reads its history)."""

    name = names.COMMIT_LOG
    fault = "commit_job.after_commit_log"

    def apply(self, arg: tuple[Plan, int]) -> Committed:
        plan, renamed = arg
        scope, job = self.scope, self.run.job
        manifest = build_manifest(scope, job, plan, self.run.resumed, renamed)
        if scope.table is not None:
            manifest = replace(manifest, table=self.run.table_commit.to_doc() if self.run.table_commit else
                               {"format": scope.table.format, "table": scope.table.name, "files_added": 0})
        previous = self.run.previous_log
        doc = manifest.to_doc()
        log = CommitLog(doc) if previous is None else previous.followed_by(doc)
        encoded = manifest.encode_long()
        scope.store.write_bytes(scope.layout.commit_log, log.to_json(encoded))
        return Committed(manifest, encoded, plan.fixed.restore)

    def counts(self, out: Committed) -> dict[str, int]:
        return {"files": out.manifest.totals["files"], "bytes": out.manifest.totals["bytes"]}


class WriteMarkers(Stage[Committed, dict[str, Any]]):
    """The markers, ``_SUCCESS`` of the root last (I4): they list the job's files and what they retain. Before
    the root's: each partition's a dynamic job wrote, and each the plan restores (a compaction's), unless another
    job commit of this provider under way changes that partition. None above another job's uncommitted files
    (a v2 job's task commits, :func:`~..records.underway.markers_changing`), the root's included: it would vouch
    for them. That job's commit writes the root marker then, its abort the last commit's
    (:mod:`..records.lastcommit`)."""

    name = names.MARKERS
    fault = "commit_job.after_success"

    def apply(self, committed: Committed) -> dict[str, Any]:
        costs = self.run.clock.summary()
        manifest = committed.manifest.with_costs(costs["durations"], requests=costs["requests"],
                                                 bytes_copied=costs["bytes_copied"])
        changing = markers_changing(self.scope.store, besides=self.scope.job_id)
        held = changing.uncommitted_dirs   # a marker there would vouch for another job's uncommitted files
        partitions = set(manifest.partitions) - held if self.scope.mode.partition_markers else set()
        if held:
            manifest = manifest.with_costs(manifest.durations, markers_held_back={
                "why": changing.uncommitted, "directories": sorted(held)}, warnings=[
                *manifest.diagnostics.get("warnings", []), f"no _SUCCESS written: {changing.uncommitted}"])
        if committed.restore:
            busy = "a job commit of this provider under way changes this partition (its plan withdrew the marker)"
            left = [{"directory": d, "why": busy if d in changing.dirs else changing.everywhere}
                    for d in sorted(committed.restore) if d in changing.dirs or changing.everywhere is not None]
            restored = sorted(set(committed.restore) - {m["directory"] for m in left})
            partitions.update(restored)
            manifest = manifest.with_costs(manifest.durations, markers_restored=restored,
                                           **({"markers_left_withdrawn": left} if left else {}))
        others = None
        if self.scope.table is not None:   # what the version this commit made references; None: no transaction
            version = (manifest.table or {}).get("version", (manifest.table or {}).get("snapshot_id"))
            others = self.scope.table.files_at(version)
        retained = write_markers(self.scope.store, manifest, partitions=partitions, encoded=committed.encoded,
                                 others=others, root=not held)
        return manifest.with_costs(manifest.durations, retained_files=retained).to_doc()


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

    name = names.CLEANUP_AFTER_SUCCESS
    fault = "commit_job.after_cleanup"

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        scope = self.scope
        if not scope.store.move_dir_if_absent(scope.layout.job_dir, scope.layout.trash_entry(uuid.uuid4().hex)):
            scope.store.delete_file(scope.layout.job_record)
            scope.store.delete_tree(scope.layout.job_dir)
        if not self.run.defer_cleanup:
            scope.remove_trash()
        scope.store.remove_dir_if_empty(TEMPORARY)
        return manifest


def build_manifest(scope: Job, job: JobRecord, plan: Plan, resumed: bool, renamed: int) -> SuccessManifest:
    """The ``_SUCCESS`` document of a job commit, from its plan and records (durations are added last)."""
    recs = plan.recs
    # per file: one dict, no function call (10,000 and more); paths are unique (RecoverTasks), so sorting the
    # entries sorts by path, and the records' files come sorted, which timsort finds in one pass
    entries = sorted([(f.path, f.size, f.rows, rec.task) for rec in recs for f in rec.files])
    files = [{"path": path, "size": size, "rows": rows, "task": task} for path, size, rows, task in entries]
    rows = [entry[2] for entry in entries]
    warnings = []
    if scope.publisher.publishes_at_task_commit:
        warnings.append(f"algorithm {scope.publisher.label}: each task's files became visible at its task commit, "
                        "before job commit; readers during the job could see partial output")
    partitions = sorted({entry[0].rpartition("/")[0] for entry in entries} - {""})   # partition_of, inline
    history = plan.fixed.attempt_history
    return SuccessManifest(
        committer=scope.publisher.committer_name, algorithm=scope.publisher.algorithm, mode=scope.mode.name,
        partition_by=list(scope.config.partition_by), job_id=scope.job_id, job_uuid=job.job_uuid,
        generation=job.generation, app_attempt=plan.fixed.app_attempt, labels=dict(job.labels),
        started=plan.fixed.started, finished=records.now_iso(), output=scope.store.url(),
        files=files,
        totals={"files": len(files), "bytes": sum(entry[1] for entry in entries),
                "rows": sum(r for r in rows if r is not None) if None not in rows else None,
                "tasks": len(recs), "partitions": len(partitions)},
        partitions=partitions,
        tasks=[task_entry(r, history.get(str(r.task)) if history else None) for r in recs],
        deleted={"files": len(plan.fixed.deletions)},
        replaced_generation=job.replaces.job_uuid if job.replaces else None,
        diagnostics={"resumed": resumed, "commit_threads": scope.commit_threads, "store": scope.store.protocol,
                     "visibility": scope.publisher.visibility, "warnings": warnings, "pid": os.getpid(),
                     "directories_renamed": renamed},
        names=None if job.names is None else dict(job.names), maintenance=job.maintenance,
        audit=None if plan.fixed.audit is None else dict(plan.fixed.audit))


def task_entry(rec: TaskCommitRecord, history: dict[str, list[str]] | None) -> dict[str, Any]:
    """A task's entry in the manifest: its committed attempt and, from the plan's *history*, the attempts that
    failed, were denied or never finished (one dict per task: 10,000 tasks build 10,000 of them)."""
    entry = {"task": rec.task, "attempt": rec.attempt, "app_attempt": rec.app_attempt,
             "recovered_from_app": rec.recovered_from_app, "committed_attempt": f"{rec.committed_in_app}.{rec.attempt}",
             "files": len(rec.files), "failed_attempts": [], "denied_attempts": [], "unfinished_attempts": []}
    if history:
        entry.update(history)
    return entry


def check_tree(scope: Job, recs: Iterable[TaskCommitRecord]) -> None:
    """Before the first visible change of a job commit: no link and no other volume where the commit creates,
    moves or deletes (the destination partitions, the job's directory, anything readers see)."""
    dirs = {f.path.rpartition("/")[0] for rec in recs for f in rec.files} | {scope.layout.job_dir}   # partition_of
    scope.store.check_tree(dirs - {""}, visible=True)


def planned_records(scope: Job, plan: CommitPlan) -> list[TaskCommitRecord]:
    """The task records a plan fixed (records in an application attempt are never rewritten)."""
    found = scope.task_records(plan.app_attempt, plan.tasks, plan.job_uuid)
    for task in plan.tasks:
        if task not in found:
            raise CorruptRecord(f"job {scope.job_id}: the commit plan names task {task}, whose record "
                                f"{scope.store.url(scope.layout.task_record(plan.app_attempt, task))} is gone")
    return [found[task] for task in plan.tasks]
