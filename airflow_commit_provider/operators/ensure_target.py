"""The pre-task that guarantees an output target exists (before our stage, or before Spark, Hive, ...).

Spark's ``INSERT OVERWRITE`` on S3 deletes the table path first; when the application attempt dies and is
retried, the retry fails with "Path does not exist". Running this task before every attempt of such a writer
re-creates the path (on S3 as a directory marker), so the retry finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.storage import CommitStorageHook


class EnsureTargetOperator(BaseOperator):
    """Create the target directory (or S3 directory marker) if missing; never touches what is in it."""

    template_fields = ("target", "conn_id")
    ui_color = "#e8daef"

    def __init__(self, *, target: Any, conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.conn_id = conn_id

    def execute(self, context: Mapping[str, Any]) -> str:
        store = CommitStorageHook(self.conn_id).get_store(self.target)
        existed = store.exists("") and store.isdir("")
        if store.exists("") and not store.isdir(""):
            from ..protocol import InvalidOutputSpec

            raise InvalidOutputSpec(f"target {store.url()} is a file, not a directory")
        store.ensure_root()
        self.log.info("target %s %s", store.url(), "exists" if existed else "created")
        return store.url()
