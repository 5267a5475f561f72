"""The stage's operators and ``commit_stage``, importable from here (``from airflow_commit_provider.operators
import CommitWriteOperator``) as from their modules.

Each name is imported when first used (PEP 562), so importing a module of this package that needs no Airflow
operator (``setup_context``, ``summary``: the api-server plugin and the triggerer read them) does not import them.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module of this package that defines it
_EXPORTS = {
    "CommitBaseOperator": "base",
    "CommitWriteOperator": "write",
    **dict.fromkeys(("CommitSetupOperator", "CommitJobOperator", "CommitAbortOperator"), "commit"),
    **dict.fromkeys(("CommitAuditOperator", "CommitApprovalOperator"), "audit"),
    "commit_stage": "stage",
    **dict.fromkeys(("EnsureTargetOperator", "ensure_target_before_each_try"), "ensure_target"),
    **dict.fromkeys(("DeduplicateOutputOperator", "CompactOutputOperator"), "maintenance"),
    "CommitSummary": "summary",
    "SetupContext": "setup_context",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
