"""The audit of a stage as the Commit status view shows it: passed or failed, each check, what it observed, the
tasks a failure blames, and the approval (waiting until when, or who answered).

Read from the storage only: the newest audit record of the stage's generation while the job is not committed
(:func:`~..protocol.audit.run.audit_status`), the verdict kept in ``_SUCCESS`` once it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field


class AuditCheck(BaseModel):
    check: str
    passed: bool
    observed: Any = None
    expected: Any = None
    column: str | None = None
    message: str = ""


class AuditApproval(BaseModel):
    """``waiting`` (until ``deadline``; the store drops the staged data after ``expires``, if it does),
    ``approved``, ``rejected``, ``timed_out``, or ``not asked``."""

    state: str
    deadline: str | None = None
    expires: str | None = None
    by: str | None = None
    at: str | None = None


class AuditView(BaseModel):
    state: Literal["passed", "failed"]
    ref: str | None = None
    at: str | None = None
    message: str = ""
    #: the tasks a failure blames: a clear of the run runs them again (the others are recovered)
    blamed_tasks: list[int] = Field(default_factory=list)
    checks: list[AuditCheck] = Field(default_factory=list)
    rows: int | None = None
    files: int | None = None
    bytes: int | None = None
    approval: AuditApproval | None = None


def audit_view(verdict: Any) -> AuditView | None:
    """The view of an audit verdict (``None`` for a stage without an audit, or one whose audit has not run)."""
    if not isinstance(verdict, Mapping):
        return None
    summary = verdict.get("summary") if isinstance(verdict.get("summary"), Mapping) else {}
    approval = verdict.get("approval") if isinstance(verdict.get("approval"), Mapping) else None
    return AuditView(
        state="passed" if verdict.get("passed") else "failed", ref=verdict.get("ref"), at=verdict.get("at"),
        message=str(verdict.get("message") or ""), blamed_tasks=list(verdict.get("blamed") or []),
        checks=[AuditCheck(**{k: c.get(k) for k in AuditCheck.model_fields if k in c})
                for c in verdict.get("checks") or [] if isinstance(c, Mapping)],
        rows=summary.get("rows"), files=summary.get("files"), bytes=summary.get("bytes"),
        approval=AuditApproval(**{k: approval.get(k) for k in AuditApproval.model_fields if k in approval})
        if approval and approval.get("state") else None)


def blame_rows(rows: list[Any], audit: AuditView | None) -> list[Any]:
    """The task rows, those a failed audit blamed saying so: their commit stays hidden like any kept task's, but a
    clear of the run runs them again instead of recovering them (a clear of only the failed tasks audits the same
    commits again)."""
    if audit is None or audit.state != "failed" or not audit.blamed_tasks:
        return rows
    blamed = set(audit.blamed_tasks)
    why = (f"; the audit {audit.ref} blamed it ({audit.message[:200]}): a clear of the run runs it again instead "
           "of recovering this commit, a clear of only the failed tasks audits it again as it is")
    return [r.model_copy(update={"why": r.why + why}) if r.task in blamed and r.committed_attempt else r
            for r in rows]
