"""The audit step of a stage, in Airflow: ``setup >> write >> audit [>> approve] >> commit``, abort the teardown.

:class:`CommitAuditOperator` runs the audit (:func:`~..protocol.audit.run.run_audit`) on exactly the task commits
the job commit would publish; a failed audit fails the task at once (the same commits and specification give
the same verdict on every try), so the commit is ``upstream_failed`` and the teardown aborts as for any failed run:
nothing is visible. The verdict is the task's XCom (``return_value`` when it passed, ``audit`` always).

:class:`CommitApprovalOperator` is Airflow's own ``ApprovalOperator`` (standard provider, Airflow 3.1+): the
approver sees the audit's summary in the request's body; "Reject" (or no answer before the timeout) is a failed
audit. The wait is bounded by the staged data's life at the store: the setup refuses (or warns, by option) an
approval whose timeout a bucket lifecycle rule could outlive, and the request itself never waits past the moment
the store may drop the staged uploads.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..protocol.audit import Approval, Audit
from ..protocol.audit.spec import stage_spec
from ..protocol.audit.expiry import approval_wait
from ..protocol.audit.record import AuditRecord
from ..protocol.audit.run import decide_approval, request_approval, run_audit
from ..protocol.errors import InvalidOutputSpec
from .base import CommitBaseOperator
from .commit import expected_task_count
from .failures import AirflowFailException, fail_fast_on_deterministic_errors

#: the XCom key holding the audit's verdict, passed or failed (a failed task has no ``return_value``)
AUDIT_KEY = "audit"


def stage_audit(audit: Any, owner: str, common: Mapping[str, Any]) -> Audit | None:
    """``commit_stage(audit=...)`` as the stage's tasks take it, checked where the DAG is parsed against the
    stage's committer (:meth:`~..protocol.audit.spec.Audit.for_stage`); an approval on an Airflow without
    human-in-the-loop operators is refused here too."""
    spec = stage_spec(audit, owner, algorithm=common.get("algorithm", 1), table_format=common.get("table_format"),
                      partition_by=common.get("partition_by") or ())
    if spec is not None and spec.approval is not None:
        approval_operator_class(owner)
    return spec



def verdict_xcom(rec: AuditRecord) -> dict[str, Any]:
    """The audit's verdict as its XCom (and the approver's body) read it."""
    return {"passed": rec.passed, "ref": rec.ref, "job_id": rec.job_id, "job_uuid": rec.job_uuid,
            "message": rec.message, "blamed_tasks": rec.blamed, "checks": rec.checks, "summary": rec.summary,
            "spec": rec.spec, "tasks": len(rec.tasks)}


class CommitAuditOperator(CommitBaseOperator):
    """The audit of a write stage (``commit_stage(audit=...)`` puts it between the writes and the commit).

    :param audit: an :class:`~..protocol.audit.Audit` (or a list of checks, or a data callable)
    :param write_task_id: the stage's write task (the expected tasks are its task instances)
    :param expected_tasks: or their number
    """

    template_fields = (*CommitBaseOperator.template_fields, "expected_tasks")
    ui_color = "#e8daef"

    def __init__(self, *, audit: Any, write_task_id: str | None = None, expected_tasks: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if write_task_id is None and expected_tasks is None:
            raise InvalidOutputSpec("CommitAuditOperator needs write_task_id or expected_tasks to know which tasks "
                                    "it audits")
        owner = f"{type(self).__name__}(task_id={self.task_id!r})"
        spec = stage_audit(audit, owner, {"algorithm": self.algorithm, "table_format": self.table_format,
                                          "partition_by": self.partition_by})
        if spec is None:
            raise InvalidOutputSpec(f"{owner}: audit is required")
        self.audit = spec
        self.write_task_id = write_task_id
        self.expected_tasks = expected_tasks
        self._audited: tuple[AuditRecord, str] | None = None

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with fail_fast_on_deterministic_errors():
            committer = self.committer(context)
            self._check_shards(committer)
            expected = expected_task_count(self, context, self.write_task_id, self.expected_tasks)
            rec = run_audit(committer.job, self.audit, expected, context["ti"].try_number)
        verdict = verdict_xcom(rec)
        self._audited = (rec, committer.store.url())
        context["ti"].xcom_push(key=AUDIT_KEY, value=verdict)
        if not rec.passed:
            blamed = ("every task" if len(rec.blamed or ()) == len(rec.tasks)
                      else f"task(s) {', '.join(map(str, rec.blamed or []))}")
            raise AirflowFailException(
                f"the audit of job {rec.job_id} failed: {rec.message}. Nothing was published. Blamed: {blamed} "
                "(a clear of the run runs them again and recovers the rest; with the audit changed instead, clear "
                "only the failed tasks: the audit then judges the same commits again)")
        self.log.info("audit %s of job %s passed: %s rows in %s files", rec.ref, rec.job_id,
                      rec.summary.get("rows"), rec.summary.get("files"))
        return verdict

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed audit reports its failed assertions on the target it kept unchanged."""
        return self._lineage()

    def _lineage(self) -> Any:
        from .lineage import audit_lineage

        return audit_lineage(*self._audited) if self._audited is not None else audit_lineage(None, None)


def approval_operator_class(owner: str = "commit_stage") -> type:
    """The standard provider's ``ApprovalOperator`` (Airflow 3.1+), or :class:`InvalidOutputSpec` saying what is
    missing."""
    try:
        from airflow.providers.standard.operators.hitl import ApprovalOperator
    except Exception as exc:   # ImportError, or the provider's "needs Airflow 3.1+"
        raise InvalidOutputSpec(f"{owner}: Audit(approval=...) uses Airflow's human-in-the-loop operators (the "
                                "standard provider's ApprovalOperator, Airflow 3.1+), which this installation "
                                f"lacks ({type(exc).__name__}: {exc}); upgrade Airflow, or drop the approval") from None
    return ApprovalOperator


def approval_body(rec: AuditRecord, deadline: datetime | None, expires: datetime | None) -> str:
    """What the approver reads (Markdown): what the audit saw and checked, and until when the stage waits."""
    s = rec.summary
    lines = [f"**Job** `{rec.job_id}` (audit {rec.ref}): **{s.get('rows')} rows** in {s.get('files')} files, "
             f"{s.get('bytes')} bytes, {s.get('tasks')} tasks, {s.get('partitions')} partitions.", "",
             "| check | result | observed | expected |", "|---|---|---|---|"]
    lines += [f"| {c['check']} | {'passed' if c['passed'] else 'FAILED'} | {c.get('observed')} | "
              f"{c.get('expected')} |" for c in rec.checks]
    columns = s.get("columns") or {}
    if columns:
        lines += ["", "| column | type | nulls | min | max |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {c.get('type')} | {c.get('nulls')} | {c.get('min')} | {c.get('max')} |"
                  for name, c in columns.items()]
    lines += ["", "Nothing is visible until you approve; **Reject** fails the audit (nothing is published)."]
    if deadline is not None:
        lines.append(f"The stage waits until {deadline.isoformat(timespec='seconds')}"
                     + (f" (the store drops the staged data after {expires.isoformat(timespec='seconds')})"
                        if expires is not None else "") + ".")
    return "\n".join(lines)


def _base() -> type:
    try:
        return approval_operator_class()
    except InvalidOutputSpec:
        return object


class CommitApprovalOperator(CommitBaseOperator, _base()):  # type: ignore[misc]
    """Airflow's ``ApprovalOperator`` for a stage's audit: asks after the audit passed, with its summary as the
    request's body; "Approve" lets the commit run, "Reject" or no answer in time fails the stage (a failed audit:
    every audited task is refused for recovery, so a clear of the run computes the output again, while a clear
    of this task alone asks again about the same data).

    :param approval: the :class:`~..protocol.audit.Approval` (timeout, subject)
    """

    template_fields = (*CommitBaseOperator.template_fields, "subject")
    ui_color = "#fdebd0"

    def __init__(self, *, approval: Approval, **kwargs: Any) -> None:
        subject = approval.subject or "Publish the audited output of {{ dag.dag_id }} / {{ run_id }}?"
        super().__init__(subject=subject, body="(the audit's summary is filled in when the approval is asked)",
                         fail_on_reject=True, response_timeout=approval.timeout, **kwargs)
        self.approval = approval

    def execute(self, context: Any) -> Any:
        with fail_fast_on_deterministic_errors():
            committer = self.committer(context)
            now = datetime.now(timezone.utc)
            timeout, expires = approval_wait(committer.job, self.approval.timeout, now)
            if timeout != self.approval.timeout:
                self.log.warning("the approval waits %s at most, not %s: the store may drop the staged data at %s",
                                 timeout, self.approval.timeout, expires)
            deadline = None if timeout is None else now + timeout
            rec = request_approval(committer.job, None if deadline is None else deadline.isoformat(),
                                   None if expires is None else expires.isoformat())
        self.response_timeout = timeout
        self.body = approval_body(rec, deadline, expires)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from airflow.providers.standard.exceptions import HITLRejectException, HITLTimeoutError

        committer = self.committer(context)
        try:
            answer = super().execute_complete(context=context, event=event)
        except HITLRejectException:
            who = _user(event)
            decide_approval(committer.job, "rejected", who, f"rejected by {who}")
            raise AirflowFailException(f"the approval of job {committer.job_id} was rejected by {who}: a failed "
                                       "audit, nothing was published") from None
        except HITLTimeoutError:
            decide_approval(committer.job, "timed_out", None, "no answer before the deadline")
            raise AirflowFailException(f"the approval of job {committer.job_id} was not given before its "
                                       "deadline: a failed audit, nothing was published") from None
        who = _user(event)
        decide_approval(committer.job, "approved", who)
        self.log.info("job %s: approved by %s", committer.job_id, who)
        return {"approved": True, "by": who, "job_id": committer.job_id,
                "responded_at": str(answer.get("responded_at")) if isinstance(answer, Mapping) else None}


def _user(event: Mapping[str, Any]) -> str | None:
    user = event.get("responded_by_user")
    if isinstance(user, Mapping):
        return str(user.get("name") or user.get("id"))
    return None if user is None else str(user)


__all__ = ["AUDIT_KEY", "CommitApprovalOperator", "CommitAuditOperator", "approval_body", "stage_audit",
           "verdict_xcom"]
