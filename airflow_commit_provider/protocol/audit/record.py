"""The audit's records: one per try of the audit (``_audit_<job uuid>_<app>_<try>.json``) and the approval of it.

An audit record names exactly the task commits it judged (task -> ``"<application attempt>.<try>"`` of the
attempt that committed, recovered or not) and the specification's digest: a job commit accepts it only for those
very commits and that specification (:class:`~.run.AuditGate`). Records are never rewritten; the newest try's
(highest application attempt, then try) is the audit's verdict, so a paused try waking late (a zombie) writes a
record nobody reads. They live in the job's directory and go with it at the commit or the purge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import records
from ..job import Job
from ..records.task import TaskCommitRecord

KIND = "audit"
APPROVAL_KIND = "approval"


def identity(recs: Mapping[int, TaskCommitRecord] | list[TaskCommitRecord]) -> dict[str, str]:
    """The task commits an audit judged, as it records them: ``{"<task>": "<app>.<try>"}`` of the attempt that
    committed (an adopted record names the application attempt it committed in, so recovery keeps it)."""
    values = recs.values() if isinstance(recs, Mapping) else recs
    return {str(r.task): f"{r.committed_in_app}.{r.attempt}" for r in sorted(values, key=lambda r: r.task)}


@dataclass(frozen=True)
class AuditRecord:
    """What one try of the audit found."""

    job_id: str
    job_uuid: str
    app_attempt: int
    attempt: int
    spec: str
    tasks: dict[str, str]
    passed: bool
    checks: list[dict[str, Any]]
    summary: dict[str, Any]
    #: the tasks a failure blames (refused for recovery); ``None``: every task; empty when it passed
    blamed: list[int] | None = field(default_factory=list)
    message: str = ""
    at: str = ""
    #: the approval the specification asks for after the checks pass (its settings), ``None``: none
    approval: dict[str, Any] | None = None

    @property
    def ref(self) -> str:
        """``"<app>.<try>"``: which try of the audit this is (the approval names it)."""
        return f"{self.app_attempt}.{self.attempt}"

    def to_doc(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "job_uuid": self.job_uuid, "app_attempt": self.app_attempt,
                "attempt": self.attempt, "spec": self.spec, "passed": self.passed, "message": self.message,
                "checks": self.checks, "summary": self.summary, "blamed": self.blamed, "tasks": self.tasks,
                "at": self.at, "approval": self.approval}

    def write(self, scope: Job) -> str:
        rel = scope.layout.audit_record(self.job_uuid, self.app_attempt, self.attempt)
        scope.store.write_bytes(rel, records.dumps(KIND, self.to_doc()))
        return rel

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], where: str) -> AuditRecord:
        def get(key: str, typ: type | tuple[type, ...], **kw: Any) -> Any:
            return records.get_field(doc, key, typ, where, KIND, **kw)

        return cls(get("job_id", str), get("job_uuid", str), get("app_attempt", int), get("attempt", int),
                   get("spec", str), get("tasks", dict), get("passed", bool), get("checks", list),
                   get("summary", dict), get("blamed", list, nullable=True), get("message", str), get("at", str),
                   get("approval", dict, nullable=True, required=False))


def _numbers(name: str, prefix: str) -> tuple[int, int] | None:
    body = name[len(prefix):].removesuffix(".json")
    app, _, attempt = body.partition("_")
    return (int(app), int(attempt)) if app.isdigit() and attempt.isdigit() else None


def latest_audit(scope: Job, job_uuid: str) -> AuditRecord | None:
    """The newest audit record of generation *job_uuid* (highest application attempt, then try), or ``None``."""
    prefix = scope.layout.audit_prefix(job_uuid)
    found = [n for n in (_numbers(name, prefix) for name in scope.store.list_dir_prefix(scope.layout.job_dir, prefix)
                         if name.endswith(".json")) if n is not None]
    if not found:
        return None
    app, attempt = max(found)
    rel = scope.layout.audit_record(job_uuid, app, attempt)
    doc = records.read(scope.store, rel, KIND)
    return None if doc is None else AuditRecord.from_doc(doc, scope.store.url(rel))


def read_approval(scope: Job, audit: AuditRecord) -> dict[str, Any] | None:
    """The approval of *audit*: ``state`` (``waiting``, ``approved``, ``rejected``, ``timed_out``), ``deadline``
    (when the wait ends: the approval's timeout, or sooner the store's expiry of staged data), ``by``, ``at``."""
    return records.read(scope.store, scope.layout.approval_record(audit.job_uuid, audit.app_attempt, audit.attempt),
                        APPROVAL_KIND)


def write_approval(scope: Job, audit: AuditRecord, body: Mapping[str, Any]) -> None:
    rel = scope.layout.approval_record(audit.job_uuid, audit.app_attempt, audit.attempt)
    scope.store.write_bytes(rel, records.dumps(APPROVAL_KIND, {"audit": audit.ref, **body}))


__all__ = ["AuditRecord", "identity", "latest_audit", "read_approval", "write_approval"]
