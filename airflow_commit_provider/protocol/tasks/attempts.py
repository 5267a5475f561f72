"""The task side of the protocol: one job's task attempts from set-up to their commit decision, abort or adoption.

Everything about an attempt's fate is decided here, against two kinds of records only: the attempt ledger
(:mod:`.attempts`: started, then exclusively ``committing`` or ``failed``) and the task commit record
(:mod:`.taskrecord`: its exclusive creation is the commit). The committer's facade methods (``setup_task``,
``commit_task``, ``abort_task``, ``recover_task``) call this class, and so do job commit's recovery and the abort;
no other code decides whether an attempt may commit or whose files may be removed. The silent row loss this
project once had lived in exactly such a decision split between two owners.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from .. import records
from ..config import check_number
from ..errors import CommitDenied, CorruptRecord, InvalidOutputSpec, TaskInputsChanged
from ..faults import inject
from ..job import Job
from ..ledger import COMMITTING, FAILED
from ..paths import partition_of
from ..records.job import JobRecord
from ..records.refused import RefusedTasks
from ..records.task import TaskCommitRecord
from ..schemas import hold_job_schema, schema_digest
from ..tables.common import SchemaMismatch
from ..timing import timed
from .context import TaskAttemptContext, file_prefix

log = logging.getLogger(__name__)


class _Refused(Exception):
    """A commit this attempt may not make (see :meth:`TaskAttempts.new_record`); *error* is what its caller gets
    once the attempt is recorded failed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class TaskAttempts:
    """The task attempts of one job: their set-up, commit decision, abort and adoption."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.store = job.store
        self.layout = job.layout
        self.ledger = job.ledger
        self.publisher = job.publisher
        self.record = job.task_record

    # ------------------------------------------------------------------ set-up and abort
    def owner(self, task: int, attempt: int) -> str:
        """How the task side's log lines name an attempt."""
        return f"job {self.job.job_id} task {task} attempt {attempt}"

    def setup(self, task: int, attempt: int, job: JobRecord | None = None, app: int | None = None,
              inputs: str | None = None) -> TaskAttemptContext:
        """See :meth:`~.committer.FileOutputCommitter.setup_task` (timed and logged as ``setup_task``). *job* and
        *app*: the job record and the current application attempt when the caller has just read them (the task's
        recovery check, one step before); *inputs*: what the attempt was given, which its commit records."""
        with timed(self.store, self.owner(task, attempt), "setup_task"):
            return self._setup(task, attempt, job, app, inputs)

    def _setup(self, task: int, attempt: int, job: JobRecord | None, app: int | None,
               inputs: str | None) -> TaskAttemptContext:
        check_number(task, "task")
        check_number(attempt, "attempt")
        if job is None or app is None:
            job = self.job.require_job()
            app = self.job.own_app_attempts(job)[0]
        ta = TaskAttemptContext(self.job.job_id, job.job_uuid, app, task, attempt,
                                self.layout.attempt_dir(app, task, attempt), inputs)
        self.ledger.start(app, task, attempt)
        self.publisher.begin_attempt(ta.work_dir)
        fenced = False
        for trace in self.ledger.earlier(app, task, attempt):
            if trace.fate is None and self.fail_and_discard(app, task, trace.attempt):
                fenced = True
                # what a retry's log says about the try it replaces: killed or lost, and now unable to commit
                log.warning("task %d: attempt %d (a try that was killed, lost or is still running as a zombie) is "
                            "now recorded failed and fenced: it can never commit, its files were removed",
                            task, trace.attempt)
        if fenced:   # the uploads of the tries it fenced, which their own processes held
            self.sweep_uploads(job.job_uuid, task, fencer=(app, attempt))
        if not self.store.has_directories:   # where directories exist, the ledger's trace made it already
            self.store.makedirs(ta.work_dir)
        inject("setup_task.after_dir")
        return ta

    def fail_and_discard(self, app: int, task: int, attempt: int) -> bool:
        """Record the attempt failed, then remove its files; ``False`` (nothing removed) when it had claimed its
        commit first: a commit in flight is never emptied. Magic uploads that only the attempt's own process
        held are left to the caller: a newer try's set-up sweeps them (:meth:`sweep_uploads`), the teardown
        aborts every upload of the job it listed before reading the traces that no kept commit lists."""
        if self.ledger.claim(app, task, attempt, FAILED) != FAILED:
            return False
        self.publisher.discard(self.layout.attempt_dir(app, task, attempt))
        return True

    def sweep_uploads(self, job_uuid: str, task: int, fencer: tuple[int, int] | None = None) -> None:
        """Abort the pending uploads of the task's attempts that are recorded failed, for a party that does not
        hold them (a newer try's set-up that fenced earlier ones, *fencer* being its ``(app, attempt)``, which has
        no upload yet; a discard in a committer that did not set the attempt up). Nothing for v1 and v2.

        S3's list of pending uploads (by the task's :func:`file_prefix` in generation *job_uuid*) does not say
        which attempt started an upload. So the task's traces in every application attempt of the generation are
        read *after* that list: an attempt leaves its trace before it starts an upload, so every listed upload's
        attempt is among them. If one of them (but *fencer*) has no fate yet, it may still commit what it
        uploaded -- a try that started late, an attempt of another application attempt -- and nothing is aborted
        here (the job commit and the job's abort abort what is left). Otherwise each listed upload belongs to an
        attempt recorded failed, or to one whose record or claim to commit (read after the list as well) names
        it and which is kept. A generation that is gone leaves only uploads nobody can commit."""
        if not self.publisher.has_uploads:
            return
        uploads = self.publisher.task_uploads(file_prefix(task, job_uuid))
        if not uploads:
            return
        job = self.job.job_record()
        live: set[str] = set()
        if job is not None and job.job_uuid == job_uuid:
            for app in self.job.app_attempts(job):
                rec = self.record(app, task, job_uuid)
                live |= {f.upload_id for f in rec.files if f.upload_id} if rec is not None else set()
                for trace in self.ledger.traces(app, task):
                    if (app, trace.attempt) == fencer or trace.fate == FAILED:
                        continue
                    if trace.fate is None:
                        return
                    live |= self.committing_uploads(app, task, trace.attempt)
        self.publisher.abort_uploads([(rel, uid) for rel, uid in uploads if uid not in live])

    def committing_uploads(self, app: int, task: int, attempt: int) -> set[str]:
        """The upload ids of an attempt that claimed its commit (magic; nothing for v1 and v2): those of the record
        its claim holds, or an earlier release's ``.pending`` descriptions (its claim then holds the word)."""
        if not self.publisher.has_uploads:
            return set()
        rel = self.layout.attempt_claim(app, task, attempt)
        try:
            data = self.store.read_bytes(rel)
        except FileNotFoundError:
            return set()
        if data[:1] == b"{":
            return {f.upload_id for f in TaskCommitRecord.from_json(data, self.store.url(rel)).files if f.upload_id}
        return self.publisher.pending_uploads(self.layout.attempt_dir(app, task, attempt))

    def abort(self, ta: TaskAttemptContext) -> bool:
        """See :meth:`~.committer.FileOutputCommitter.abort_task` (timed and logged as ``abort_task``)."""
        with timed(self.store, self.owner(ta.task, ta.attempt), "abort_task"):
            return self._abort(ta)

    def _abort(self, ta: TaskAttemptContext) -> bool:
        if self.job.job_record() is None and self.job.commit_log() is not None:
            # the job committed and was cleaned up after this try was set up (a zombie whose code failed when it
            # woke): nothing is left to fence, and a claim would re-create the job's directories
            self.leave_committed_job(ta)
            return True
        if self.ledger.claim(ta.app_attempt, ta.task, ta.attempt, FAILED) != FAILED:
            return False
        inject("abort_task.after_marker")
        self.discard(ta)
        inject("abort_task.mid_delete")
        return True

    def discard(self, ta: TaskAttemptContext) -> None:
        """Remove everything a (denied, failed or stale) attempt wrote -- unless it is the committed attempt of its
        application attempt: where the record alone commits (object stores, magic), its directory holds the
        committed data that a later application attempt's recovery points at, and a stale winner asking again
        (a zombie of that attempt) must not delete it."""
        rec = self.record(ta.app_attempt, ta.task, ta.job_uuid)
        if rec is not None and rec.attempt == ta.attempt and not rec.adopted:
            return
        self.discard_files(ta)

    def discard_files(self, ta: TaskAttemptContext) -> None:
        """Remove what attempt *ta* (recorded failed, or denied) wrote: its directory, and its uploads, which
        this committer holds if it set the attempt up, else are swept (:meth:`sweep_uploads`)."""
        if not self.publisher.discard(ta.work_dir):
            self.sweep_uploads(ta.job_uuid, ta.task)

    def leave_committed_job(self, ta: TaskAttemptContext) -> None:
        """Remove what attempt *ta* wrote after its job committed and was cleaned up (a try set up before the
        commit, asking after it: :class:`~.errors.JobAlreadyCommitted`, or aborted after it), and the directories
        its writes re-created under the job, up to ``_temporary``; it records nothing (no fate: no record of the
        job is left to guard).
        Its application attempt's directory is never a later generation's, which starts after every application
        attempt number in use (:func:`~.jobsetup.create_job_record`)."""
        self.publisher.discard(ta.work_dir)
        parent = partition_of(ta.work_dir)
        while parent and self.store.remove_dir_if_empty(parent):
            parent = partition_of(parent)

    # ------------------------------------------------------------------ the commit decision
    def denied(self, ta: TaskAttemptContext, why: str, **details: Any) -> CommitDenied:
        """Remove the attempt's files (:meth:`discard`) and return the denial to raise: no refusal of a commit
        leaves anything of the attempt behind."""
        self.discard(ta)
        return CommitDenied(why, task=ta.task, attempt=ta.attempt, **details)

    def needs_commit(self, ta: TaskAttemptContext) -> bool:
        """See :meth:`~.committer.FileOutputCommitter.needs_task_commit`."""
        rec = self.record(ta.app_attempt, ta.task, ta.job_uuid)
        return not (rec is not None and rec.attempt == ta.attempt)

    def commit(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None,
               sizes: Mapping[str, int] | None, schema: pa.Schema | None = None,
               stats: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """See :meth:`~.committer.FileOutputCommitter.commit_task` (timed and logged as ``commit_task``)."""
        with timed(self.store, self.owner(ta.task, ta.attempt), "commit_task") as t:
            doc = self._commit(ta, rows, sizes, schema, stats)
            t.counts = {"files": len(doc["files"])}
            return doc

    def _commit(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None,
                sizes: Mapping[str, int] | None, schema: pa.Schema | None,
                stats: Mapping[str, Any] | None = None) -> dict[str, Any]:
        inject("commit_task.before_record")
        # The generation, the plan and the application attempt may all have changed since the set-up: read again,
        # from one listing of the job directory (the job record itself only when the listing says it changed).
        listing = self.store.list_dir_digests(self.layout.job_dir)
        job = self.job.job_record_as_listed(listing)
        if ta.job_uuid != job.job_uuid:
            raise self.denied(ta, f"task attempt {ta.name} belongs to job generation {ta.job_uuid}, the job is "
                                  f"now {job.job_uuid}; its files were removed")
        plan, current = self.job.plan_and_app_attempt(job, listing)
        if plan is not None:
            rec = self.record(plan.app_attempt, ta.task, ta.job_uuid) if ta.task in plan.tasks else None
            if rec is not None and rec.attempt == ta.attempt and rec.app_attempt == ta.app_attempt:
                return rec.to_doc()
            raise self.denied(ta, f"job {self.job.job_id} is already committing; task {ta.task} is committed by "
                                  f"{rec and rec.attempt}", winner=rec and rec.to_doc())
        if ta.app_attempt != current:
            # A zombie of an older application attempt. Its commit could only land in that attempt's directory
            # (which job commit ignores) -- or, with v2, replace the current winner's visible files: refuse it.
            raise self.denied(ta, f"task attempt {ta.name} belongs to application attempt {ta.app_attempt}, the "
                                  f"job is now in application attempt {current}; its files were removed")
        rec_path = self.layout.task_record(ta.app_attempt, ta.task)
        # What the commit would record, from the attempt's directory, before the claim: a party that removes the
        # attempt's files records it failed first, so if the claim below is ours the files listed are still there.
        try:
            data: bytes | None = self.new_record(ta, rows, sizes, schema, stats).to_json()
            if schema is not None and self.publisher.publishes_at_task_commit:
                try:   # v2 publishes below: the only point before a second schema would be visible
                    hold_job_schema(self.job, job, ta.task, schema, listing)
                except SchemaMismatch as exc:
                    raise _Refused(exc) from exc
            refusal: _Refused | None = None
        except _Refused as r:
            data, refusal = None, r
        # The claim to commit holds the record itself, so that the record can be the same file under its own name
        # (one file written, not two); a refused attempt claims its failure instead.
        fate, fresh = self.ledger.try_claim(ta.app_attempt, ta.task, ta.attempt,
                                            FAILED if data is None else COMMITTING, data)
        inject("commit_task.after_claim")
        if fate == FAILED:
            # whoever recorded it failed removes its files (or has); removing them again is harmless
            if fresh and refusal is not None:
                self.discard(ta)
                raise refusal.error
            raise self.denied(ta, f"task attempt {ta.name} was recorded as failed (by its own abort, a newer try "
                                  "of the task, or the failed run's teardown) and cannot commit; its files were "
                                  "removed", attempt_failed=True)
        # An attempt that has just claimed its fate cannot have created the record yet (it does so only after
        # the claim): a record there now is another attempt's (or an adoption's), and the exclusive creation
        # below finds it. Only a repeated request (the claim was there) reads it first.
        existing = None if fresh else self.record(ta.app_attempt, ta.task, ta.job_uuid)
        if existing is None:
            if data is None:
                # an earlier request of this attempt claimed its commit, and the directory no longer holds what
                # the writer reported: the attempt is recorded failed and cannot commit
                assert refusal is not None
                self.ledger.overrule(ta.app_attempt, ta.task, ta.attempt)
                self.discard_files(ta)
                raise refusal.error
            mine = TaskCommitRecord.from_json(data, rec_path)  # as any reader will see it, checked before it exists
            # the attempt's files reach the disk before the record that names them (in the worker, in parallel
            # across tasks: job commit then only fsyncs directories); after the claim, so nobody removes them now
            self.store.sync_tree(ta.work_dir)
            claim = self.layout.attempt_claim(ta.app_attempt, ta.task, ta.attempt) if fresh else None
            if self.store.create_exclusive(rec_path, data, like=claim):
                existing = mine
                inject("commit_task.after_record")
            else:
                existing = self.record(ta.app_attempt, ta.task, ta.job_uuid)
        if existing is None:
            raise CorruptRecord(f"task record {self.store.url(rec_path)} belongs to another job generation")
        self.publisher.complete_task_commit(existing)
        if existing.attempt != ta.attempt or existing.adopted:
            raise self.denied(
                ta, f"task {ta.task} of job {self.job.job_id} was already committed by attempt {existing.attempt} "
                    f"(application attempt {existing.app_attempt}); attempt {ta.attempt}'s files were removed",
                winner=existing.to_doc())
        inject("commit_task.after_move")
        return existing.to_doc()

    def new_record(self, ta: TaskAttemptContext, rows: Mapping[str, int | None] | None,
                   sizes: Mapping[str, int] | None, schema: pa.Schema | None = None,
                   stats: Mapping[str, Any] | None = None) -> TaskCommitRecord:
        """The record this attempt's commit would create, from what its directory holds. Changes nothing: raises
        :class:`_Refused` (the commit then records the attempt failed and removes its files) when the writer's
        report and the directory disagree, a partition directory is a link or on another volume, or the files
        would clobber visible ones at a task commit that publishes (v2); :class:`InvalidOutputSpec` for a report
        that is not one."""
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
            shown = ", ".join(f"{rel} ({'missing' if rel not in held else f'{held[rel]} bytes, not {reported[rel]}'})"
                              for rel in wrong[:5])
            raise _Refused(CommitDenied(
                f"task attempt {ta.name} reported {len(reported)} file(s) but its directory does not hold "
                f"{len(wrong)} of them as written: {shown}. Something removed or changed them (a teardown, a "
                "cleanup, a newer try); the attempt is recorded failed and cannot commit", task=ta.task,
                attempt=ta.attempt, attempt_failed=True))
        try:
            # a partition that is a link or on another volume is refused before anything is recorded (v2 publishes
            # there at this very commit; v1 would fail at job commit)
            partitions = {partition_of(f.path) for f in files} - {""}
            if partitions:
                self.store.check_tree(partitions)
        except InvalidOutputSpec as exc:
            raise _Refused(exc) from exc
        clobbered = self.publisher.clobbered([f.path for f in files])
        # files of another attempt of this task that won meanwhile (a zombie's race) are not a clobber: the record
        # creation then fails and this attempt is denied with the winner; nor are the files a withdrawn commit of
        # this task left behind: this attempt's moves replace them
        if clobbered and self.record(ta.app_attempt, ta.task, ta.job_uuid) is None:
            clobbered = sorted(set(clobbered) - self.withdrawn_files(ta, clobbered))
        else:
            clobbered = []
        if clobbered:
            raise _Refused(InvalidOutputSpec(
                f"task attempt {ta.name} would replace {len(clobbered)} visible file(s) at its task commit "
                f"({', '.join(clobbered[:3])}); file names must be unique across tasks and jobs (keep the default "
                "names, which carry the job uuid). The attempt is recorded failed; nothing visible changed"))
        data_dir = self.publisher.data_dir(ta.app_attempt, ta.work_dir)
        return TaskCommitRecord(job_id=self.job.job_id, job_uuid=ta.job_uuid, task=ta.task, attempt=ta.attempt,
                                app_attempt=ta.app_attempt, work_dir=ta.work_dir, data_dir=data_dir,
                                recovered_from_app=None, committed=records.now_iso(), files=tuple(files),
                                inputs=ta.inputs, schema=None if schema is None else schema_digest(schema),
                                stats=None if stats is None else dict(stats))

    def withdrawn_files(self, ta: TaskAttemptContext, visible: Sequence[str]) -> set[str]:
        """Those of *visible* (files found at names attempt *ta* is about to publish) that a withdrawn commit of the
        same task in this generation left behind, and that this attempt's commit may therefore replace.

        A v2 abort records a committed attempt failed, removes its record, then its visible files (the markers
        above them first); one killed in between leaves the files visible with no record listing them, at the
        names every later try of the task writes. They are recognised by their name (:attr:`~TaskAttemptContext.
        file_prefix`: this task, this generation) and by no record of the task, in any application attempt of the
        generation, listing them, read after they were seen: a task commit creates its record before any of its
        files appears, and only that abort removes the record of a commit whose files stay (I10: after recording
        its attempt failed). So they belong to an attempt recorded failed, whose commit can never come back; the
        moves after this attempt's record replace them one by one, each atomically (I1: never an empty name in
        between), with the markers above withdrawn first (I9). The withdrawn commit's files this attempt does not
        write again are swept by the job commit (or the next abort) as strays of the generation.

        So are the files of a commit recovery declined (:meth:`recover`: made for other inputs, or refused by a job
        commit or an audit, :mod:`..records.refused`) and of every older one: recovery adopts only the newest
        earlier commit, and job commit takes this attempt's record, created before its first move."""
        own = {p for p in visible if p.rsplit("/", 1)[-1].startswith(ta.file_prefix)}
        if not own:
            return own
        superseded = False
        job = self.job.require_job()
        refused = self.job.refused_tasks(job)
        for app in self.job.app_attempts(job):   # newest first
            rec = self.record(app, ta.task, ta.job_uuid)
            if rec is None:
                continue
            superseded = superseded or (app < ta.app_attempt and (not rec.same_inputs(ta.inputs)
                                                                  or refused.refuses(rec)))
            if not superseded:
                own -= {f.path for f in rec.files}
        return own

    # ------------------------------------------------------------------ recovery
    def recover(self, job: JobRecord, app: int, task: int, apps: Sequence[int] | None = None,
                refused: RefusedTasks | None = None, inputs: str | None = None) -> TaskCommitRecord | None:
        """The task's record in application attempt *app*, adopting (Hadoop's recoverTask) the newest earlier
        attempt's commit when *app* has none; ``None`` when no application attempt of the generation committed
        it, when a job commit refused that commit for good (:mod:`..records.refused`: the task then runs
        again, with the code of now, instead of being recovered into the same refusal), or when it was made for
        other *inputs* (:meth:`.TaskCommitRecord.same_inputs`: the task runs again, and job commit takes that new
        commit). *apps*: the generation's application attempts, newest first, and *refused*: its refusals, when
        the caller read them already. A commit of *app* itself for other inputs cannot be replaced (its record
        was the task's decision there): :class:`TaskInputsChanged`, before anything runs."""
        rec = self.record(app, task, job.job_uuid)
        if rec is not None:
            if not rec.same_inputs(inputs):
                raise TaskInputsChanged(
                    f"task {task} of job {self.job.job_id} was committed in application attempt "
                    f"{rec.committed_in_app} (attempt {rec.attempt}) with other inputs ({rec.inputs}; it is given "
                    f"{inputs} now): its files hold what it was given then, and a task commits once per "
                    "application attempt. To write what it is given now, clear the whole DAG run (the stage's "
                    "setup included: the next application attempt runs the task again); to keep that commit, "
                    "restore the task's inputs")
            return rec
        for old_app in self.job.app_attempts(job) if apps is None else apps:
            if old_app >= app:
                continue
            old = self.record(old_app, task, job.job_uuid)
            if old is None:
                continue
            refused = self.job.refused_tasks(job) if refused is None else refused
            if refused.refuses(old):
                # the newest commit of the task is the one refused; an older one can only be the same commit
                log.warning("task %d: its commit (attempt %d, application attempt %d) was refused by a job commit or "
                            "an audit (%s): it is run again, not recovered", task, old.attempt, old.committed_in_app,
                            refused.reason(task))
                return None
            if not old.same_inputs(inputs):
                log.warning("task %d: its commit (attempt %d, application attempt %d) was given other inputs (%s; "
                            "the task is given %s now): it is run again, not recovered", task, old.attempt,
                            old.committed_in_app, old.inputs, inputs)
                return None
            self.publisher.complete_task_commit(old)
            inject("recover_task.before_record")
            self.store.create_exclusive(self.layout.task_record(app, task), old.adopted_by(app).to_json())
            inject("recover_task.after_record")
            return self.record(app, task, job.job_uuid)
        return None


__all__ = ["TaskAttemptContext", "TaskAttempts"]
