"""One call that builds a whole write stage: ``setup >> write(s) >> commit``, with abort as the teardown.

:func:`commit_stage` and the TaskFlow decorator ``@task.commit_stage`` (``decorators/commit_stage.py``) build the
same TaskGroup through :func:`build_stage`; they differ only in how the write task is made (a
``CommitWriteOperator``, or the decorated function as a TaskFlow task).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow.sdk import TaskGroup

from .audit import CommitApprovalOperator, CommitAuditOperator, stage_audit
from .checks import check_commit_args, check_user_callables, check_write_shards
from .commit import CommitAbortOperator, CommitJobOperator, CommitSetupOperator
from .ensure_target import EnsureTargetOperator
from .write import CommitWriteOperator


def commit_stage(group_id: str, *, target: Any, python_callable: Callable[..., Any] | None = None,
                 writer_callable: Callable[..., Any] | None = None,
                 expand_op_kwargs: Sequence[Mapping[str, Any]] | Any = None, op_kwargs: Mapping[str, Any] | None = None,
                 conn_id: str | None = None, algorithm: int | str = 1, mode: str = "error",
                 partition_by: Collection[str] | str = (), commit_threads: int | None = None,
                 ensure_target: bool = False, purge_on_failure: bool = False, write_retries: int | None = None,
                 write_kwargs: Mapping[str, Any] | None = None, outlets: Sequence[Any] = (),
                 durable: bool = True, job_key: str | None = None, shards_per_task: int = 1,
                 shard_threads: int | None = None, shard_commit: str = "each", table_format: str | None = None,
                 table_name: str | None = None, catalog: Mapping[str, Any] | None = None,
                 catalog_conn_id: str | None = None, audit: Any = None) -> TaskGroup:
    """Build the stage as a TaskGroup named *group_id* (which is also the job name).

    With *expand_op_kwargs* (a list of dicts, or an XComArg resolving to one) the write is mapped: one task per
    element, task number = map index. ``ensure_target=True`` puts an :class:`EnsureTargetOperator` first.
    *outlets* go on the commit task, so an asset event is emitted only when the data is committed.
    ``durable=False`` fsyncs nothing on a local disk (a scratch target a power cut may lose). *job_key*
    (templated) names the job across runs: default the run id; ``"{{ data_interval_start }}"`` makes every run of
    one data interval the same job, so a second run replaces the first's files instead of adding them again.
    ``shards_per_task=N`` makes every write task instance run N protocol tasks (shards, at most *shard_threads* at
    once): the callable is called once per shard with ``shard_index`` (0 .. N-1), shard ``s`` of map index ``i``
    is task ``i * N + s``, and a retry runs only the shards that did not commit (``shards.py``);
    ``shard_commit="together"`` commits a task instance's shards in one record instead (fewer requests per file;
    a retry writes every shard of the task instance again).
    *table_format* (``"delta"``, ``"iceberg"``) publishes into a table in one transaction at job commit: Delta
    at *target*; Iceberg *table_name* in *catalog* / *catalog_conn_id* (default: SQLite catalog in *target*).
    *audit* (an :class:`~..protocol.audit.Audit`, a list of checks, or a data callable) puts an audit task
    (and, with ``Audit(approval=...)``, an approval) between the writes and the commit: nothing is published
    unless it passes (docs/user-guide.md, "Write, audit, publish").

    Example::

        with DAG("events", ...):
            stage = commit_stage("write_events", target="/data/events", python_callable=load_day,
                                 expand_op_kwargs=[{"day": d} for d in days], mode="dynamic",
                                 partition_by=["day"])
    """
    owner = f"commit_stage({group_id!r})"
    check_user_callables(python_callable, writer_callable, owner)
    stage = StageArgs.checked(owner, target=target, conn_id=conn_id, algorithm=algorithm, mode=mode,
                              partition_by=partition_by, commit_threads=commit_threads, durable=durable,
                              job_key=job_key, table_format=table_format, table_name=table_name, catalog=catalog,
                              catalog_conn_id=catalog_conn_id, ensure_target=ensure_target,
                              purge_on_failure=purge_on_failure,
                              write_retries=write_retries, write_kwargs=write_kwargs, outlets=outlets,
                              shards_per_task=shards_per_task, shard_threads=shard_threads,
                              shard_commit=shard_commit, audit=audit)
    check_write_shards({"python_callable": python_callable, "writer_callable": writer_callable,
                        "shards_per_task": shards_per_task}, owner)

    def write(args: dict[str, Any]) -> Any:
        args = {"python_callable": python_callable, "writer_callable": writer_callable, **args}
        if expand_op_kwargs is not None:
            return CommitWriteOperator.partial(task_id="write", **args).expand(op_kwargs=expand_op_kwargs)
        return CommitWriteOperator(task_id="write", op_kwargs=op_kwargs, **args)

    group, _ = build_stage(group_id, stage, write)
    return group


class StageArgs:
    """A stage's parameters, validated once (a bad one names *owner*: ``commit_stage('x')``, the decorator), as
    ``build_stage`` hands them to the operators."""

    def __init__(self, common: dict[str, Any], ensure_target: bool, purge_on_failure: bool,
                 write_retries: int | None, write_kwargs: Mapping[str, Any] | None, outlets: Sequence[Any],
                 shard_threads: int | None = None, audit: Any = None) -> None:
        self.common = common
        #: the stage's audit (:class:`~..protocol.audit.Audit`, checked against its committer), or ``None``
        self.audit = audit
        self.shard_threads = shard_threads
        self.ensure_target = ensure_target
        self.purge_on_failure = purge_on_failure
        self.write_retries = write_retries
        self.write_kwargs = dict(write_kwargs or {})
        self.outlets = list(outlets)

    @classmethod
    def checked(cls, owner: str, *, target: Any, ensure_target: bool = False, purge_on_failure: bool = False,
                write_retries: int | None = None, write_kwargs: Mapping[str, Any] | None = None,
                outlets: Sequence[Any] = (), shard_threads: int | None = None, audit: Any = None,
                **shared: Any) -> StageArgs:
        common = check_commit_args({"target": target, **shared}, owner)
        check_write_shards({"shards_per_task": common.get("shards_per_task", 1), "shard_threads": shard_threads},
                           owner)
        return cls(common, ensure_target, purge_on_failure, write_retries, write_kwargs, outlets, shard_threads,
                   stage_audit(audit, owner, common))

    def write_args(self) -> dict[str, Any]:
        """What the write task gets besides its callable and its arguments."""
        args = {**self.common, **self.write_kwargs}
        if self.write_retries is not None:
            args["retries"] = self.write_retries
        if self.shard_threads is not None:
            args["shard_threads"] = self.shard_threads
        return args


def build_stage(group_id: str, stage: StageArgs, write: Callable[[dict[str, Any]], Any], *,
                add_suffix_on_collision: bool = False) -> tuple[TaskGroup, CommitJobOperator]:
    """The stage's TaskGroup and its commit task. *write* builds the write task(s) inside the group from the
    write arguments (``StageArgs.write_args`` plus ``job_name``) and returns the task, its mapped form or its
    XComArg. The job name is the group's full id (with ``__1``... when *add_suffix_on_collision* renamed it):
    unique in the DAG, so stages of one name nested in two other groups are two jobs; for a group at the top of
    the DAG it is its label, as in earlier releases."""
    with TaskGroup(group_id, add_suffix_on_collision=add_suffix_on_collision) as group:
        common = {**stage.common, "job_name": group.group_id}
        setup = CommitSetupOperator(task_id="setup", audit=stage.audit, **common)
        if stage.ensure_target:
            EnsureTargetOperator(task_id="ensure_target", target=common["target"],
                                 conn_id=common["conn_id"]) >> setup
        written = write({**stage.write_args(), "job_name": group.group_id})
        write_task = getattr(written, "operator", written)   # a TaskFlow write returns its XComArg
        # the write's full task id (a stage inside another TaskGroup is prefixed by the outer group's id too)
        commit = CommitJobOperator(task_id="commit", write_task_id=write_task.task_id, trigger_rule="none_failed",
                                   outlets=stage.outlets, audit=stage.audit, **common)
        abort = CommitAbortOperator(task_id="abort", purge=stage.purge_on_failure, commit_task_id=commit.task_id,
                                    **common)
        commit.teardown_task_id = abort.task_id
        setup >> write_task
        before_commit = write_task
        if stage.audit is not None:   # write >> audit [>> approve] >> commit: nothing published unless it passes
            before_commit = write_task >> CommitAuditOperator(task_id="audit", audit=stage.audit,
                                                              write_task_id=write_task.task_id, **common)
            if stage.audit.approval is not None:
                before_commit = before_commit >> CommitApprovalOperator(task_id="approve",
                                                                        approval=stage.audit.approval, **common)
        before_commit >> commit >> abort.as_teardown(setups=setup)
    return group, commit
