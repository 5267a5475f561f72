"""Guarantee that an output target exists: before our stage, and before *every try* of any writer (Spark, Hive...).

Spark's ``INSERT OVERWRITE`` on S3 deletes the table path first; when the application attempt dies and is
retried, the retry fails with "Path does not exist". In Airflow that retry is a retry of the writer *task*, and
Airflow re-runs only that task: an upstream :class:`EnsureTargetOperator` runs once per DAG run (and again only
when the run is cleared), never before a retry of its downstream writer. To re-create the path before each try,
give the writer itself the guard::

    SparkSubmitOperator(task_id="insert_overwrite", ..., retries=2,
                        pre_execute=ensure_target_before_each_try("s3://lake/sales", conn_id="aws_lake"))

Airflow 3.3's ``BaseOperator(pre_execute=...)`` takes a callable that the task runner calls with the task's
context right before ``execute``, on every try (and again when a deferred task resumes); an exception there
fails the try before the operator runs. Both the operator and the guard call :func:`ensure_target`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from airflow.sdk import BaseOperator

from ..hooks.storage import CommitStorageHook
from .failures import fail_fast_on_deterministic_errors

log = logging.getLogger(__name__)


class EnsuredTarget(NamedTuple):
    url: str        #: the target's full location (``file://...``, ``s3://bucket/key``)
    created: bool   #: ``True`` if it was missing and this call created it


def ensure_target(target: Any, conn_id: str | None = None) -> EnsuredTarget:
    """Create the target directory (on S3: a zero-byte ``<key>/`` directory marker) if it is missing.

    Never touches what is in it. The store is resolved as every commit operator resolves it
    (``CommitStorageHook(conn_id).get_store(target)``: local path, URL or ObjectStoragePath, credentials from
    the Airflow connection). Raises :class:`~airflow_commit_provider.protocol.InvalidOutputSpec` if the target
    is a file.
    """
    store = CommitStorageHook(conn_id).get_store(target)
    existed = store.exists("")
    if existed and not store.isdir(""):
        from ..protocol import InvalidOutputSpec

        raise InvalidOutputSpec(f"target {store.url()} is a file, not a directory")
    store.ensure_root()
    return EnsuredTarget(store.url(), not existed)


class EnsureTargetBeforeEachTry:
    """A ``pre_execute`` hook: before every try of the task it is given to, :func:`ensure_target` its target.

    *target* and *conn_id* may be Jinja templates; they are rendered with the try's context (``{{ ds }}``,
    ``{{ dag_run.conf[...] }}``, ...). *then* is another ``pre_execute`` callable to run afterwards (a task
    has a single ``pre_execute``). Build it with :func:`ensure_target_before_each_try`.
    """

    def __init__(self, target: Any, conn_id: str | None = None,
                 then: Callable[[Mapping[str, Any]], Any] | None = None) -> None:
        self.target = target
        self.conn_id = conn_id
        self.then = then

    def __call__(self, context: Mapping[str, Any]) -> None:
        task = context.get("task")
        target, conn_id = self.target, self.conn_id
        if task is not None:
            if isinstance(target, str):
                target = task.render_template(target, context)
            if isinstance(conn_id, str):
                conn_id = task.render_template(conn_id, context)
        ensured = ensure_target(target, conn_id or None)
        ti = context.get("ti")
        (task.log if task is not None else log).info(
            "ensure-target before try %s of %s: %s %s", getattr(ti, "try_number", "?"),
            getattr(task, "task_id", "?"), ensured.url,
            "was missing: created it" if ensured.created else "exists (left as it is)")
        if self.then is not None:
            self.then(context)

    def __repr__(self) -> str:
        return f"ensure_target_before_each_try({self.target!r}, conn_id={self.conn_id!r})"


def ensure_target_before_each_try(target: Any, conn_id: str | None = None, *,
                                  then: Callable[[Mapping[str, Any]], Any] | None = None
                                  ) -> EnsureTargetBeforeEachTry:
    """The callable to pass as ``pre_execute=`` to any operator (also in ``.partial(...)`` of a mapped one), so
    that its target exists before each of its tries::

        BashOperator(task_id="insert_overwrite", bash_command="spark-submit overwrite_sales.py", retries=2,
                     pre_execute=ensure_target_before_each_try("s3://lake/sales", conn_id="aws_lake"))

    Each call is logged in the task's log ("ensure-target before try 2 of insert_overwrite: s3://lake/sales was
    missing: created it"). A target that is a file fails the try before the operator runs.
    """
    return EnsureTargetBeforeEachTry(target, conn_id, then)


class EnsureTargetOperator(BaseOperator):
    """A task that creates the target directory (or S3 directory marker) if missing; never touches what is in it.

    It runs when its DAG run (or a clear of it) runs it, i.e. *once* in front of its downstream tasks, not before
    each of their retries: a writer that deletes its own target (Spark's ``INSERT OVERWRITE``) and dies still
    finds the target missing on its retry. For that writer, use :func:`ensure_target_before_each_try` as its
    ``pre_execute``. Returns the target's URL.
    """

    template_fields = ("target", "conn_id")
    ui_color = "#e8daef"

    def __init__(self, *, target: Any, conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.conn_id = conn_id

    def execute(self, context: Mapping[str, Any]) -> str:
        with fail_fast_on_deterministic_errors():   # a file where the target should be stays a file: no retry
            ensured = ensure_target(self.target, self.conn_id)
        self.log.info("target %s %s", ensured.url, "was missing: created it" if ensured.created else "exists")
        return ensured.url
