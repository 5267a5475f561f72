"""One call that builds a whole write stage: ``setup >> write(s) >> commit``, with abort as the teardown."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow.sdk import TaskGroup

from .commit import (
    CommitAbortOperator,
    CommitJobOperator,
    CommitSetupOperator,
    CommitWriteOperator,
    check_commit_args,
)
from .ensure_target import EnsureTargetOperator


def commit_stage(group_id: str, *, target: Any, python_callable: Callable[..., Any] | None = None,
                 writer_callable: Callable[..., Any] | None = None,
                 expand_op_kwargs: Sequence[Mapping[str, Any]] | Any = None, op_kwargs: Mapping[str, Any] | None = None,
                 conn_id: str | None = None, algorithm: int | str = 1, mode: str = "error",
                 partition_by: Collection[str] | str = (), commit_threads: int | None = None,
                 ensure_target: bool = False, purge_on_failure: bool = False, write_retries: int | None = None,
                 write_kwargs: Mapping[str, Any] | None = None, outlets: Sequence[Any] = (),
                 durable: bool = True) -> TaskGroup:
    """Build the stage as a TaskGroup named *group_id* (which is also the job name).

    With *expand_op_kwargs* (a list of dicts, or an XComArg resolving to one) the write is mapped: one task per
    element, task number = map index. ``ensure_target=True`` puts an :class:`EnsureTargetOperator` first.
    *outlets* go on the commit task, so an asset event is emitted only when the data is committed.
    ``durable=False`` fsyncs nothing on a local disk (a scratch target a power cut may lose).

    Example::

        with DAG("events", ...):
            stage = commit_stage("write_events", target="/data/events", python_callable=load_day,
                                 expand_op_kwargs=[{"day": d} for d in days], mode="dynamic",
                                 partition_by=["day"])
    """
    # the shared parameters, validated once here (a bad one names commit_stage), given to every operator as they are
    common = check_commit_args({"target": target, "conn_id": conn_id, "algorithm": algorithm, "mode": mode,
                                "partition_by": partition_by, "commit_threads": commit_threads, "job_name": group_id,
                                "durable": durable},
                               f"commit_stage({group_id!r})")
    with TaskGroup(group_id) as group:
        setup = CommitSetupOperator(task_id="setup", **common)
        if ensure_target:
            EnsureTargetOperator(task_id="ensure_target", target=target, conn_id=conn_id) >> setup
        write_args = {"python_callable": python_callable, "writer_callable": writer_callable, **common,
                      **(write_kwargs or {})}
        if write_retries is not None:
            write_args["retries"] = write_retries
        if expand_op_kwargs is not None:
            write = CommitWriteOperator.partial(task_id="write", **write_args).expand(op_kwargs=expand_op_kwargs)
        else:
            write = CommitWriteOperator(task_id="write", op_kwargs=op_kwargs, **write_args)
        commit = CommitJobOperator(task_id="commit", write_task_id=f"{group_id}.write", trigger_rule="none_failed",
                                   outlets=list(outlets), **common)
        abort = CommitAbortOperator(task_id="abort", purge=purge_on_failure, commit_task_id=commit.task_id,
                                    **common)
        setup >> write >> commit >> abort.as_teardown(setups=setup)
    return group
