"""The write task (:class:`CommitWriteOperator`): one task of the stage, every Airflow try of it one task attempt
(with ``shards_per_task=N``, N tasks: ``shards.py``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..protocol import CommitDenied, FileOutputCommitter, run_task_attempt
from .base import CommitBaseOperator
from .checks import check_user_callables, check_write_shards
from .failures import DETERMINISTIC_ERRORS, fail_fast_on_deterministic_errors
from .inputs import inputs_digest
from .shards import run_shards, run_shards_together

#: Task state store key holding a write task's commit outcome (Airflow 3.3+: the task instance's "Storage" tab).
STATE_KEY = "commit"

class CommitWriteOperator(CommitBaseOperator):
    """One task of the stage; every Airflow try of it is one task attempt.

    Give either *python_callable*, returning (or yielding) pyarrow Tables / RecordBatches, or *writer_callable*,
    which receives ``writer`` (a :class:`~airflow_commit_provider.protocol.TaskAttemptWriter`: ``write(table)`` or
    ``open_file(name)`` for arbitrary files). Both are called PythonOperator-style with *op_args*, *op_kwargs* and
    the context keys they name.

    If the task is already committed (by an earlier try, or by an earlier application attempt) the callable is
    **not** called: the recorded summary is returned. Use ``.partial(...).expand(op_kwargs=[...])`` for many tasks
    (task number = map index).

    With ``shards_per_task=N`` the task instance runs N protocol tasks (shards, ``shards.py``), at most
    *shard_threads* at once (default ``min(N, 4)``): the callable is called once per shard not committed yet, with
    the keyword arguments it names of ``shard_index`` (0 .. N-1), ``shards_per_task`` (N) and ``task_number``
    (``map_index * N + shard_index``, unique in the stage); it must name ``shard_index`` or ``task_number`` (or take
    ``**kwargs``), or every shard would write the same rows. With N = 1 it receives them too (0, 1, the map
    index) unless its own arguments have those names. A shard that fails does not stop the others; the try
    fails after they finished, and its retry runs only the shards that did not commit. With
    ``shard_commit="together"`` the shards write side by side into one task attempt (task number = map index)
    committed in one record: a retry after a failed shard writes every shard again, and a committed task
    instance is recovered whole.
    """

    template_fields = (*CommitBaseOperator.template_fields, "op_args", "op_kwargs")
    ui_color = "#d5f5e3"

    def __init__(self, *, python_callable: Callable[..., Any] | None = None,
                 writer_callable: Callable[..., Any] | None = None, op_args: Sequence[Any] | None = None,
                 op_kwargs: Mapping[str, Any] | None = None, compression: str = "snappy",
                 max_rows_per_file: int | None = None, shard_threads: int | None = None, **kwargs: Any) -> None:
        # before the base class adds the task to the DAG: a refused operator is not left half-built there
        owner = f"{type(self).__name__}(task_id={kwargs.get('task_id')!r})"
        check_user_callables(python_callable, writer_callable, owner)
        check_write_shards({**kwargs, "python_callable": python_callable, "writer_callable": writer_callable,
                            "shard_threads": shard_threads}, owner)
        super().__init__(**kwargs)
        self.shard_threads = shard_threads
        self.python_callable = python_callable
        self.writer_callable = writer_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        self.compression = compression
        self.max_rows_per_file = max_rows_per_file

    @classmethod
    def check_partial(cls, kwargs: Mapping[str, Any], owner: str) -> None:
        check_user_callables(kwargs.get("python_callable"), kwargs.get("writer_callable"), owner)
        check_write_shards(kwargs, owner)

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with fail_fast_on_deterministic_errors():
            return self._write(context)

    def _produce(self, call_kwargs: Mapping[str, Any], writer: Any) -> None:
        if self.writer_callable is not None:
            _call(self.writer_callable, self.op_args, {**call_kwargs, "writer": writer})
            return
        result = _call(self.python_callable, self.op_args, call_kwargs)  # type: ignore[arg-type]
        if result is not None:
            writer.write(_to_arrow(result))

    def _write(self, context: Mapping[str, Any]) -> dict[str, Any]:
        ti = context["ti"]
        task = max(ti.map_index if ti.map_index is not None else -1, 0)
        attempt = ti.try_number
        committer = self.committer(context)
        self._check_shards(committer)   # before the user's code: the DAG may have changed since the setup
        # what this task instance was given (rendered): a commit made for other inputs is not recovered
        inputs = inputs_digest(self.op_args, self.op_kwargs)
        if self.shards_per_task != 1 and self.shard_commit == "each":
            return self._write_shards(committer, context, task, attempt, {**context, **self.op_kwargs}, inputs)
        if self.shards_per_task != 1:
            return self._write_together(committer, context, task, attempt, {**context, **self.op_kwargs}, inputs)
        # one shard: the same callable runs at any shards_per_task (the user's own arguments of those names win)
        call_kwargs = {"shard_index": 0, "shards_per_task": 1, "task_number": task, **context, **self.op_kwargs}

        def produce(writer: Any) -> None:
            self._produce(call_kwargs, writer)

        try:
            outcome = run_task_attempt(committer, task, attempt, produce, compression=self.compression,
                                       max_rows_per_file=self.max_rows_per_file, inputs=inputs)
        except CommitDenied as denied:
            self.log.error("task attempt %s of task %s was denied: %s", attempt, task, denied)
            raise
        summary = outcome.to_dict()
        self.log.info("task %s attempt %s: %s (committed attempt %s, application attempt %s, recovered from %s); "
                      "%s files, %s rows", task, attempt, outcome.status, summary["committed_attempt"],
                      summary["app_attempt"], summary["recovered_from_app"], summary["files"], summary["rows"])
        _save_state(context, summary)
        return summary

    def _write_shards(self, first: FileOutputCommitter, context: Mapping[str, Any], map_index: int, attempt: int,
                      call_kwargs: Mapping[str, Any], inputs: str) -> dict[str, Any]:
        # *first*: the task instance's committer; every shard's is its twin (store, connection, table)
        n = self.shards_per_task

        def produce(shard: int, task: int, writer: Any) -> None:
            self._produce({**call_kwargs, "shard_index": shard, "shards_per_task": n, "task_number": task}, writer)

        outcome = run_shards(first.twin, map_index, n, attempt, produce, threads=self.shard_threads,
                             compression=self.compression, max_rows_per_file=self.max_rows_per_file,
                             fatal=DETERMINISTIC_ERRORS, inputs=inputs)
        summary = outcome.to_dict()
        self.log.info("task instance %s attempt %s: %s shards (tasks %s-%s): %s; ran the callable for shards %s; "
                      "%s files, %s rows", map_index, attempt, n, summary["tasks"][0], summary["tasks"][-1],
                      summary["statuses"], summary["ran_shards"] or "none", summary["files"], summary["rows"])
        _save_state(context, summary)
        return summary


    def _write_together(self, committer: FileOutputCommitter, context: Mapping[str, Any], map_index: int,
                        attempt: int, call_kwargs: Mapping[str, Any], inputs: str) -> dict[str, Any]:
        n = self.shards_per_task

        def produce(shard: int, task_number: int, writer: Any) -> None:
            self._produce({**call_kwargs, "shard_index": shard, "shards_per_task": n, "task_number": task_number},
                          writer)

        outcome = run_shards_together(committer, map_index, n, attempt, produce, threads=self.shard_threads,
                                      compression=self.compression, max_rows_per_file=self.max_rows_per_file,
                                      fatal=DETERMINISTIC_ERRORS, inputs=inputs)
        summary = {**outcome.to_dict(), "shards_per_task": n, "shard_commit": "together"}
        self.log.info("task %s attempt %s: %s shards committed together: %s (committed attempt %s, application "
                      "attempt %s); %s files, %s rows", map_index, attempt, n, outcome.status,
                      summary["committed_attempt"], summary["app_attempt"], summary["files"], summary["rows"])
        _save_state(context, summary)
        return summary


def _call(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Call *func* like PythonOperator does: positional *args*, and those of *kwargs* it names (all with **kw)."""
    params = inspect.signature(func).parameters.values()
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        names = {p.name for p in params}
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    return func(*args, **kwargs)


def _to_arrow(result: Any) -> Any:
    """pandas DataFrames are accepted too; everything else goes to the writer as is (Tables, batches, iterables)."""
    if type(result).__module__.startswith("pandas") and hasattr(result, "to_records"):
        import pyarrow as pa

        return pa.Table.from_pandas(result, preserve_index=False)
    return result


def _save_state(context: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
    """Record the outcome in the task state store (survives retries and clears; has its own UI tab)."""
    store = context.get("task_state_store")
    if store is None:  # Airflow 3.1 and 3.2 have no task state store: degrade, never fail
        import logging

        logging.getLogger(__name__).info("task state store not available (Airflow < 3.3): the commit outcome is kept "
                                         "in XCom, _SUCCESS and the Commit status tab")
        return
    try:
        store.set(STATE_KEY, dict(summary))
    except Exception as exc:  # the store is a convenience for the UI; the commit record is the truth
        import logging

        logging.getLogger(__name__).warning("could not save the commit outcome in the task state store: %s", exc)
