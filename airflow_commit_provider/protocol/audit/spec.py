"""What an audit checks: declarative checks, a data callable, an approval; validated where the DAG is parsed.

An :class:`Audit` sits between the last task commit and the job commit (docs/protocol.md, "Write, audit,
publish"). Its :meth:`~Audit.digest` names the specification (the checks' parameters, the callable's code, the
approval's settings), so that a job commit takes only an audit of this very specification, and a changed one is
run again, not trusted.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal

from ..errors import InvalidOutputSpec
from .checks import Check, Columns


@dataclass(frozen=True)
class Approval:
    """A person's approval after the audit passed, through Airflow's human-in-the-loop operators.

    *timeout*: how long the stage waits for an answer (``None``: until answered); no answer in time is a failed
    audit, as a rejection is. *on_expiry_risk*: what the setup does when the committer's staged data can expire at
    the store before *timeout* ends (S3 multipart uploads aborted by a bucket lifecycle rule, magic committer):
    ``"refuse"`` (the default: the setup fails before anything is written) or ``"warn"``. *subject*: the
    headline the approver sees (default: the stage and the run)."""

    timeout: timedelta | None = None
    subject: str | None = None
    on_expiry_risk: Literal["refuse", "warn"] = "refuse"

    def __post_init__(self) -> None:
        if self.timeout is not None and (not isinstance(self.timeout, timedelta) or self.timeout <= timedelta(0)):
            raise InvalidOutputSpec(f"Approval(timeout={self.timeout!r}): give a positive timedelta, or None")
        if self.on_expiry_risk not in ("refuse", "warn"):
            raise InvalidOutputSpec(f"Approval(on_expiry_risk={self.on_expiry_risk!r}): use 'refuse' or 'warn'")

    def to_doc(self) -> dict[str, Any]:
        return {"timeout": None if self.timeout is None else self.timeout.total_seconds(), "subject": self.subject,
                "on_expiry_risk": self.on_expiry_risk}


#: why a data callable cannot run, per committer that keeps staged data unreadable
_NO_DATA = {
    "magic": "the magic committer's staged files are pending S3 multipart uploads, which nobody can read before "
             "the job commit completes them: a data callable would see nothing. Use declarative checks (they read "
             "the statistics the task commits recorded, magic included), or algorithm=1 (staged files readable "
             "under _temporary; on S3 each byte is then copied once, at the job commit)",
    2: "algorithm 2 publishes each task's files at its task commit: there is no staged output to check before "
       "readers see it. Use algorithm=1 (nothing visible until the audit passed and the job committed); "
       "declarative checks alone are accepted with algorithm 2 (the job commit and _SUCCESS wait for them, the "
       "files do not)",
}


@dataclass(frozen=True)
class Audit:
    """The audit of a write stage.

    *checks*: declarative :mod:`.checks` on the statistics the task commits recorded (cheap; every committer).
    *data*: a callable given the staged output as a ``pyarrow.dataset.Dataset`` (the committed tasks' files, as the
    job commit would publish them; algorithm 1 and table targets only), and ``stats`` (:class:`~.stats.JobStats`)
    when it names that parameter; it fails the audit by returning ``False`` or raising :class:`AuditFailed`
    (``tasks=[...]`` blames tasks); any other exception is an error of the audit task (retried), not a verdict.
    *approval*: an :class:`Approval` asked for after the checks passed.
    """

    checks: tuple[Check, ...] = ()
    data: Callable[..., Any] | None = None
    approval: Approval | None = None

    def __post_init__(self) -> None:
        checks = tuple(self.checks) if isinstance(self.checks, (list, tuple)) else (self.checks,)
        object.__setattr__(self, "checks", checks)
        bad = [c for c in checks if not isinstance(c, Check)]
        if bad:
            raise InvalidOutputSpec(f"Audit(checks=...): {bad[0]!r} is not a check; use those of "
                                    "airflow_commit_provider.protocol.audit.checks (Rows, NotNull, Between, ...)")
        if self.data is not None and not callable(self.data):
            raise InvalidOutputSpec(f"Audit(data=...): {type(self.data).__name__} is not callable")
        if self.approval is not None and not isinstance(self.approval, Approval):
            raise InvalidOutputSpec("Audit(approval=...): give an Approval(timeout=..., ...)")
        if not checks and self.data is None and self.approval is None:
            raise InvalidOutputSpec("Audit(): give checks, a data callable, an approval, or several")

    def for_stage(self, owner: str, *, algorithm: int | str, table_format: str | None,
                  partition_by: Sequence[str]) -> Audit:
        """This audit for a stage of *algorithm*, checked (:class:`InvalidOutputSpec` naming *owner*): a data
        callable is refused where the committer keeps staged data unreadable (magic) or has none (v2), an
        approval with v2 (the data is visible while it waits). A directory stage's partition columns count as
        present for :class:`~.checks.Columns` (they live in directory names, not in the files)."""
        self.check_algorithm(owner, algorithm)
        if table_format is not None or not partition_by:
            return self
        return replace(self, checks=tuple(c.with_partitions(partition_by) if isinstance(c, Columns) else c
                                          for c in self.checks))

    def check_algorithm(self, owner: str, algorithm: int | str) -> None:
        """:class:`InvalidOutputSpec` when the committer cannot give what this audit needs (see
        :meth:`for_stage`)."""
        if self.data is not None and algorithm in _NO_DATA:
            raise InvalidOutputSpec(f"{owner}: audit=Audit(data=...) with algorithm={algorithm!r}: "
                                    f"{_NO_DATA[algorithm]}")
        if self.approval is not None and algorithm == 2:
            raise InvalidOutputSpec(f"{owner}: audit=Audit(approval=...) with algorithm=2: each task's files are "
                                    "visible from its task commit on, so readers would see the data while the "
                                    "approval waits. Use algorithm=1 (or 'magic' on S3)")

    def to_doc(self) -> dict[str, Any]:
        return {"checks": [c.to_doc() for c in self.checks], "data": callable_identity(self.data),
                "approval": None if self.approval is None else self.approval.to_doc()}

    def digest(self) -> str:
        """What names this specification: equal for an unchanged audit across processes and DAG parses."""
        text = json.dumps(self.to_doc(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def callable_identity(func: Callable[..., Any] | None) -> str | None:
    """A data callable as the digest sees it: its qualified name and its source when Python can read it (a changed
    body is a changed audit). Not its module's name: Airflow imports a DAG file under a name made from its path,
    which may differ between the workers that run the audit and the commit."""
    if func is None:
        return None
    name = getattr(func, "__qualname__", type(func).__name__)
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        return name
    return f"{name}:{hashlib.sha256(source.encode()).hexdigest()[:16]}"


def as_audit(value: Any, owner: str) -> Audit | None:
    """``commit_stage(audit=...)``: an :class:`Audit`, a list of checks (declarative only), a callable (data only),
    or ``None``."""
    if value is None or isinstance(value, Audit):
        return value
    if isinstance(value, Check):
        return Audit(checks=(value,))
    if isinstance(value, (list, tuple)):
        return Audit(checks=tuple(value))
    if callable(value):
        return Audit(data=value)
    raise InvalidOutputSpec(f"{owner}: audit={value!r}: give an Audit(...), a list of checks or a callable")


def stage_spec(value: Any, owner: str, *, algorithm: int | str, table_format: str | None,
               partition_by: Sequence[str]) -> Audit | None:
    """What every task of a stage takes as its audit (the audit task, the setup, the commit): :func:`as_audit`,
    then :meth:`Audit.for_stage`, so that all of them, built by ``commit_stage`` or by hand, hold the same
    specification and its digest."""
    spec = as_audit(value, owner)
    return None if spec is None else spec.for_stage(owner, algorithm=algorithm, table_format=table_format,
                                                    partition_by=partition_by)


__all__ = ["Approval", "Audit", "as_audit", "callable_identity", "stage_spec"]
