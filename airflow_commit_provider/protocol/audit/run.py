"""The audit step between the last task commit and the job commit, and the job commit's gate on it.

:func:`run_audit` judges exactly the task commits the job commit would publish: it runs the job commit's own
recovery first (:class:`~..jobcommit.stages.RecoverTasks`, under its own name and fault point), so a task committed
in an earlier application attempt is adopted into the current one and its task commit's effect finished, as the
commit would; then the declarative checks on the recorded statistics; then, if they passed, the data callable on
the staged files. Its verdict is a record of its own (:mod:`.record`), naming those commits and the
specification's digest. A failure records the tasks it blames as refused (:mod:`..records.refused`), so the next
clear of the run runs them again, and recovers the rest.

Deterministic: the same commits and the same specification give the same verdict, so a retry of the audit (a
killed try, a retried task) finds what the first try found; only new commits (a clear that re-ran the blamed
tasks) or a new specification (a changed DAG) change it.

:class:`AuditGate` is what a job commit of an audited stage checks after its own recovery and before it fixes
its plan: a passing record of this specification for exactly its task commits (and an approval of that record,
when the specification asks for one); otherwise :class:`~..errors.AuditFailed`, nothing changed. The verdict goes
into the plan, so a resumed commit writes it into ``_SUCCESS`` as the first one would.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .. import records
from ..errors import AuditFailed, JobAlreadyCommitted, JobNotSetUp
from ..faults import inject
from ..job import Job
from ..layout import TEMPORARY
from ..jobcommit.stage import JobCommitRun
from ..jobcommit.stages import RecoverTasks
from ..records.job import JobRecord
from ..records.task import TaskCommitRecord
from ..timing import StageClock
from .dataset import staged_dataset
from .record import AuditRecord, identity, latest_audit, read_approval, write_approval
from .spec import Audit
from .stats import JobStats

log = logging.getLogger(__name__)


class AuditRecovery(RecoverTasks):
    """The job commit's recovery, run by the audit (the commit then finds every record in place)."""

    name = "audit_recovery"
    fault = "audit.after_recovery"


def audited_records(scope: Job, job: JobRecord, tasks: Sequence[int]) -> dict[int, TaskCommitRecord]:
    """The task commits the job commit would publish now: every expected task's record in the current
    application attempt, earlier ones adopted (:class:`~..errors.JobIncomplete` naming the missing tasks)."""
    run = JobCommitRun(scope, job, StageClock(scope.store), records.now_iso())
    return AuditRecovery(run)(tasks)


def run_audit(scope: Job, audit: Audit, expected_tasks: int | Sequence[int], attempt: int) -> AuditRecord:
    """Try *attempt* of the audit of the job's current generation; returns its record (``passed`` or not).

    A generation whose commit has fixed its plan passed its audit already: the plan's verdict is returned, nothing
    is judged again (the commit only rolls forward). A job already committed (a late try) likewise returns the
    commit's. :class:`~..errors.JobIncomplete` when an expected task has no committed attempt (one a failed audit
    refused, whose write did not run again: the message says to clear it)."""
    audit.check_algorithm(f"the audit of job {scope.job_id}", scope.publisher.algorithm)
    job = scope.job_record()
    if job is None:
        committed = scope.commit_log()
        if committed is None:
            raise JobNotSetUp(f"job {scope.job_id} was never set up at {scope.store.url()}")
        return _from_manifest(scope, committed.manifest, attempt)
    scope.check_config(job)
    if scope.config.owner is not None:
        scope.own_app_attempts(job, doing="audit")
    plan = scope.commit_plan(job)
    if plan is not None:
        return _from_manifest(scope, {"job_uuid": job.job_uuid, "app_attempt": plan.app_attempt,
                                      "audit": plan.audit}, attempt)
    tasks = list(range(expected_tasks)) if isinstance(expected_tasks, int) else sorted(set(expected_tasks))
    recs = audited_records(scope, job, tasks)
    app = scope.current_app_attempt(job)
    stats = JobStats.from_records(recs.values())
    outcomes = [c.evaluate(stats) for c in audit.checks]
    if audit.data is not None and all(o.passed for o in outcomes):
        outcomes.append(_data_outcome(scope, audit, recs, stats))
    failed = [o for o in outcomes if not o.passed]
    blamed: set[int] | None = set()
    for o in failed:
        blamed = None if blamed is None or o.blamed is None else blamed | set(o.blamed)
    blamed_list = sorted(recs) if blamed is None else sorted(blamed & set(recs))
    message = "; ".join(f"{o.check}: {o.message}" for o in failed)
    rec = AuditRecord(scope.job_id, job.job_uuid, app, attempt, audit.digest(), identity(recs), not failed,
                      [o.to_doc() for o in outcomes], stats.summary(), blamed_list if failed else [], message,
                      records.now_iso(), None if audit.approval is None else audit.approval.to_doc())
    if failed and blamed_list:
        scope.refuse_tasks(job, [recs[t] for t in blamed_list], f"audit {rec.ref} failed: {message}"[:500])
    inject("audit.before_record")
    written = rec.write(scope)
    _stand_down_if_moved(scope, job, [written])
    inject("audit.after_record")
    log.info("job %s: audit %s %s (%s tasks, %s rows)%s", scope.job_id, rec.ref,
             "passed" if rec.passed else "FAILED", len(recs), stats.total.rows, f": {message}" if message else "")
    return rec


def _data_outcome(scope: Job, audit: Audit, recs: Mapping[int, TaskCommitRecord], stats: JobStats) -> Any:
    """The data callable's verdict on the staged files (``False`` or :class:`AuditFailed` fail it)."""
    from .checks import Outcome

    assert audit.data is not None
    dataset = staged_dataset(scope.store, [recs[t] for t in sorted(recs)], scope.config.partition_by)
    label = f"data: {getattr(audit.data, '__qualname__', type(audit.data).__name__)}"
    kwargs = {"stats": stats} if "stats" in inspect.signature(audit.data).parameters else {}
    try:
        verdict = audit.data(dataset, **kwargs)
    except AuditFailed as exc:
        tasks = None if exc.tasks is None else tuple(t for t in exc.tasks if t in recs)
        return Outcome(label, False, None, "passes", None, str(exc), tasks)
    if verdict is False:
        return Outcome(label, False, None, "passes", None, "the data callable returned False", None)
    return Outcome(label, True, None if verdict in (None, True) else _plain_verdict(verdict), "passes")


def _plain_verdict(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, list, dict)) else str(value)


def _from_manifest(scope: Job, manifest: Mapping[str, Any], attempt: int) -> AuditRecord:
    """An audit try after the commit fixed its plan (or finished): the verdict the commit took."""
    doc = manifest.get("audit") or {}
    return AuditRecord(scope.job_id, str(manifest.get("job_uuid")), int(manifest.get("app_attempt") or 0), attempt,
                       str(doc.get("spec", "")), dict(doc.get("tasks") or {}), True, list(doc.get("checks") or []),
                       dict(doc.get("summary") or {}), [], "the job commit took this verdict already",
                       records.now_iso(), doc.get("approval"))


def _stand_down_if_moved(scope: Job, job: JobRecord, written: Sequence[str]) -> None:
    """After writing into the job's directory: a try paused before its write and woken after the generation
    committed (or was purged) would leave a record there, re-creating ``_temporary/<job>`` in a committed output.
    It takes back what it wrote and stops (:class:`JobAlreadyCommitted`)."""
    now = scope.job_record()
    if now is not None and now.job_uuid == job.job_uuid:
        return
    scope.store.delete_files([*written, scope.layout.refused_tasks(job.job_uuid)])
    scope.store.remove_dir_if_empty(scope.layout.job_dir)
    scope.store.remove_dir_if_empty(TEMPORARY)
    raise JobAlreadyCommitted(f"job {scope.job_id}: generation {job.generation} was committed or purged while its "
                              "audit ran; this audit took back its record and changes nothing")


class AuditGate:
    """What a job commit of an audited stage requires before its plan: the newest audit record of the
    generation passed, for *spec* (:meth:`~.spec.Audit.digest`) and exactly the commits the job commit recovered,
    and, with *approval*, was approved. Called by :func:`~..jobcommit.run_job_commit` with the recovered records;
    returns the verdict the plan and ``_SUCCESS`` keep."""

    def __init__(self, spec: str, approval: bool = False) -> None:
        self.spec = spec
        self.approval = approval

    def __call__(self, scope: Job, job: JobRecord, recs: Mapping[int, TaskCommitRecord]) -> dict[str, Any]:
        rec = latest_audit(scope, job.job_uuid)
        again = "run the audit again (clear the stage's audit task)"
        if rec is None:
            raise AuditFailed(f"job {scope.job_id} cannot commit: generation {job.generation} has no audit record; "
                              f"the stage's audit did not run: {again}")
        if rec.spec != self.spec:
            raise AuditFailed(f"job {scope.job_id} cannot commit: its newest audit ({rec.ref}) checked another "
                              f"audit specification ({rec.spec}, the stage's is {self.spec}): {again}")
        if not rec.passed:
            raise AuditFailed(f"job {scope.job_id} cannot commit: its audit {rec.ref} failed: {rec.message}",
                              rec.blamed)
        now = identity(recs)
        if rec.tasks != now:
            differ = sorted((set(now.items()) ^ set(rec.tasks.items())), key=lambda kv: int(kv[0]))
            raise AuditFailed(f"job {scope.job_id} cannot commit: its audit {rec.ref} checked other task commits "
                              f"than those it would publish ({dict(differ[:5])}): {again}")
        verdict: dict[str, Any] = {"passed": True, "ref": rec.ref, "spec": rec.spec, "at": rec.at,
                                   "tasks": rec.tasks, "checks": rec.checks, "summary": rec.summary}
        if self.approval:
            answer = read_approval(scope, rec) or {}
            if answer.get("state") != "approved":
                raise AuditFailed(f"job {scope.job_id} cannot commit: audit {rec.ref} is "
                                  f"{answer.get('state') or 'not yet asked for approval'}, not approved")
            verdict["approval"] = {k: answer.get(k) for k in ("state", "by", "at", "deadline")}
        return verdict


def request_approval(scope: Job, deadline: str | None, expires: str | None) -> AuditRecord:
    """Before an approver is asked: the newest audit record, which must have passed (:class:`AuditFailed`
    otherwise), and its approval recorded ``waiting`` until *deadline* (the view shows it; *expires*: when the
    store drops the staged data, if it does)."""
    job = scope.require_job()
    rec = latest_audit(scope, job.job_uuid)
    if rec is None or not rec.passed:
        raise AuditFailed(f"job {scope.job_id}: no passing audit to approve "
                          f"({'none ran' if rec is None else f'audit {rec.ref} failed: {rec.message}'})")
    write_approval(scope, rec, {"state": "waiting", "deadline": deadline, "expires": expires,
                                "asked": records.now_iso(), "by": None, "at": None})
    return rec


def decide_approval(scope: Job, state: str, by: str | None, reason: str = "") -> AuditRecord:
    """Record the answer to the approval asked for the newest audit (:func:`request_approval`): ``approved``; or
    ``rejected`` / ``timed_out``, a failed audit, whose every task is refused for recovery (a clear of the run
    computes the output again; a clear of the approval alone asks again about the same data). An answer to a
    request that is no longer the newest audit's (the audit ran again meanwhile) is refused: ask again."""
    job = scope.require_job()
    rec = latest_audit(scope, job.job_uuid)
    asked = read_approval(scope, rec) if rec is not None else None
    if rec is None or asked is None:
        raise AuditFailed(f"job {scope.job_id}: the approval answered a request the newest audit "
                          f"({rec.ref if rec else None}) did not make (it ran again meanwhile): ask again (clear the "
                          "approval task)")
    write_approval(scope, rec, {**{k: v for k, v in asked.items() if k not in ("format", "version", "audit")},
                                "state": state, "by": by, "at": records.now_iso(), "reason": reason})
    if state != "approved":
        app = scope.current_app_attempt(job)
        recs = scope.task_records(app, [int(t) for t in rec.tasks], job.job_uuid)
        if recs:
            scope.refuse_tasks(job, list(recs.values()), f"approval of audit {rec.ref} {state}: {reason}"[:500])
    return rec


def audit_status(scope: Job, job_uuid: str | None) -> dict[str, Any] | None:
    """The newest audit of generation *job_uuid* as the Commit status view shows it (the shape of the verdict a
    commit keeps in ``_SUCCESS``, plus ``blamed`` and the approval's state and deadline); ``None``: none ran."""
    if job_uuid is None:
        return None
    rec = latest_audit(scope, job_uuid)
    if rec is None:
        return None
    answer = read_approval(scope, rec) if rec.approval is not None else None
    approval = None
    if rec.approval is not None:
        approval = {k: (answer or {}).get(k) for k in ("state", "deadline", "expires", "by", "at")}
        approval["state"] = approval["state"] or ("not asked" if rec.passed else "not asked: the audit failed")
    return {"passed": rec.passed, "ref": rec.ref, "spec": rec.spec, "at": rec.at, "message": rec.message,
            "blamed": rec.blamed, "checks": rec.checks, "summary": rec.summary, "approval": approval}


__all__ = ["AuditGate", "AuditRecovery", "audit_status", "audited_records", "decide_approval", "request_approval",
           "run_audit"]
