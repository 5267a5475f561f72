"""``@task.commit_stage``: a whole write stage from one TaskFlow function (registered in the provider info).

::

    @task.commit_stage(target="s3://lake/events", conn_id="aws_lake", mode="dynamic", partition_by=["day"])
    def load_shard(shard: int, ti=None) -> pa.Table:      # or a ``writer`` parameter: the function writes itself
        return read_source(shard)

    summary = load_shard.expand(shard=shards())   # setup >> write[mapped] >> commit, abort as the teardown
    report(summary)                               # receives the commit summary (operators/summary.py)

Airflow's decorator machinery turns a function into one task; a stage is a TaskGroup of four. So
``@task.commit_stage(...)`` returns a :class:`CommitStageTask`: calling it, ``.expand()``, ``.expand_kwargs()``
and ``.partial()`` build the same TaskGroup as :func:`~airflow_commit_provider.operators.stage.commit_stage`
(``build_stage``), whose write task is the decorated function as a TaskFlow task (Airflow's own
``_TaskDecorator``, so mapping, argument checks and the task's rendering are Airflow's), and return the commit
task's XComArg: a downstream task receives the summary, and ``upstream >> summary`` puts ``upstream`` before the
whole stage, not only before its commit.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, task_decorator_factory
from airflow.sdk.definitions.xcom_arg import PlainXComArg

from ..operators.checks import check_user_callables, check_write_shards
from ..operators.shards import SHARD_KWARGS
from ..operators.stage import StageArgs, build_stage
from ..operators.write import CommitWriteOperator


class CommitWriteDecoratedOperator(DecoratedOperator, CommitWriteOperator):
    """The write task of a ``@task.commit_stage`` stage: the decorated function, called like any TaskFlow task.

    A function with a ``writer`` parameter is a ``writer_callable`` (it receives the task attempt's writer and
    writes itself); any other is a ``python_callable`` (returns or yields pyarrow data). The shard's keyword
    arguments it names (``shard_index``, ``shards_per_task``, ``task_number``) are given at run time, as the
    writer is.
    """

    custom_operator_name = "@task.commit_stage"
    template_fields: Sequence[str] = CommitWriteOperator.template_fields
    template_fields_renderers = {"op_args": "py", "op_kwargs": "py"}
    shallow_copy_attrs: Sequence[str] = ("python_callable", "writer_callable")

    def __init__(self, *, python_callable: Callable[..., Any], op_args: Collection[Any] | None = None,
                 op_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.pop("multiple_outputs", None)   # the write's XCom is its outcome, never unrolled
        as_writer = takes_writer(python_callable)
        upstream = {"python_callable": None if as_writer else python_callable,
                    "writer_callable": python_callable if as_writer else None,
                    "op_args": op_args, "op_kwargs": op_kwargs}
        # DecoratedOperator checks the call binds to the signature; the writer and the shard are given at run time
        given = inspect.signature(python_callable).parameters
        runtime = [name for name in ("writer", *SHARD_KWARGS) if name in given and (name != "writer" or as_writer)]
        bound = {**dict.fromkeys(runtime), **(op_kwargs or {})} if runtime else op_kwargs
        super().__init__(python_callable=python_callable, op_args=op_args, op_kwargs=bound,
                         kwargs_to_upstream=upstream, **kwargs)

    def _hook_apply_defaults(self, *args: Any, **kwargs: Any) -> Any:
        # DecoratedOperator's hook reads python_callable's signature; CommitWriteOperator's __init__ (the upstream
        # one) gets python_callable=None for a writer function
        if kwargs.get("python_callable") is None:
            return args, kwargs
        return super()._hook_apply_defaults(*args, **kwargs)


def takes_writer(func: Callable[..., Any]) -> bool:
    """A function that names a ``writer`` parameter writes its files itself (``writer_callable``)."""
    return "writer" in inspect.signature(func).parameters


class CommitStageOutput(PlainXComArg):
    """The commit task's XComArg (the summary), standing for the whole stage in dependencies: ``x >> output``
    (or ``output << x``) puts *x* before the stage's first task, ``output >> y`` puts *y* after the commit."""

    def __init__(self, commit: Any, group: Any) -> None:
        super().__init__(operator=commit)
        self.stage_group = group

    @property
    def roots(self) -> list[Any]:
        return self.stage_group.roots

    def update_relative(self, other: Any, upstream: bool = True, edge_modifier: Any = None) -> None:
        if upstream:
            self.stage_group.update_relative(other, upstream, edge_modifier)

    def set_upstream(self, task_or_task_list: Any, edge_modifier: Any = None) -> None:
        self.stage_group.set_upstream(task_or_task_list, edge_modifier)


class CommitStageTask:
    """A function decorated with ``@task.commit_stage(...)``: builds its stage when called or mapped.

    ``fn(*args, **kwargs)``: a one-task stage; ``fn.expand(**lists)`` / ``fn.expand_kwargs(list_of_dicts)``: one
    write task per element (task number = map index); ``fn.partial(**kwargs)``: fixed arguments for the next
    ``expand``; ``fn.override(**stage_parameters)``: the same function with other stage parameters (``group_id``
    among them). Each returns the commit task's :class:`CommitStageOutput`.
    """

    #: marks the object for ``check_user_callables`` (a decorated function is not a python_callable)
    _commit_stage_decorator = True

    def __init__(self, function: Callable[..., Any], group_id: str, stage_params: Mapping[str, Any],
                 partial_kwargs: Mapping[str, Any] | None = None) -> None:
        if not callable(function):
            raise TypeError(f"@task.commit_stage decorates a function, got {type(function).__name__}")
        self.function = function
        self.group_id = group_id
        self.stage_params = dict(stage_params)
        self.partial_kwargs = dict(partial_kwargs or {})
        owner = f"@task.commit_stage on {function.__name__}()"
        self.stage = StageArgs.checked(owner, **self.stage_params)
        check_write_shards({"python_callable": function,
                            "shards_per_task": self.stage.common.get("shards_per_task", 1)}, owner)
        self.__name__ = function.__name__
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    def _build(self, make_write: Callable[[Any], Any], *, mapped: bool) -> CommitStageOutput:
        """The stage, its write task made by *make_write* from Airflow's TaskFlow decorator of the function
        (with the stage's write arguments; for a mapped write, with the partial arguments too)."""

        def write(args: dict[str, Any]) -> Any:
            inner = task_decorator_factory(python_callable=self.function, multiple_outputs=False,
                                           decorated_operator_class=CommitWriteDecoratedOperator, task_id="write",
                                           **args)
            return make_write(inner.partial(**self.partial_kwargs) if mapped and self.partial_kwargs else inner)

        group, commit = build_stage(self.group_id, self.stage, write, add_suffix_on_collision=True)
        return CommitStageOutput(commit, group)

    def __call__(self, *args: Any, **kwargs: Any) -> CommitStageOutput:
        return self._build(lambda write: write(*args, **{**self.partial_kwargs, **kwargs}), mapped=False)

    def expand(self, **map_kwargs: Any) -> CommitStageOutput:
        return self._build(lambda write: write.expand(**map_kwargs), mapped=True)

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> CommitStageOutput:
        return self._build(lambda write: write.expand_kwargs(kwargs, strict=strict), mapped=True)

    def partial(self, **kwargs: Any) -> CommitStageTask:
        duplicate = set(kwargs) & set(self.partial_kwargs)
        if duplicate:
            raise TypeError(f"{self.__name__}.partial(): {', '.join(sorted(duplicate))} given twice")
        # Airflow's own check of the names against the function's signature and the context keys
        task_decorator_factory(python_callable=self.function, decorated_operator_class=CommitWriteDecoratedOperator,
                               task_id="write").partial(**kwargs)
        return CommitStageTask(self.function, self.group_id, self.stage_params, {**self.partial_kwargs, **kwargs})

    def override(self, *, group_id: str | None = None, **stage_params: Any) -> CommitStageTask:
        return CommitStageTask(self.function, group_id or self.group_id, {**self.stage_params, **stage_params},
                               self.partial_kwargs)

    def __repr__(self) -> str:
        return f"<@task.commit_stage {self.__name__} -> stage {self.group_id!r}>"


def commit_stage_task(python_callable: Callable[..., Any] | None = None, *, target: Any = None,
                      group_id: str | None = None, conn_id: str | None = None, algorithm: int | str = 1,
                      mode: str = "error", partition_by: Collection[str] | str = (),
                      commit_threads: int | None = None, ensure_target: bool = False,
                      purge_on_failure: bool = False, write_retries: int | None = None,
                      write_kwargs: Mapping[str, Any] | None = None, outlets: Sequence[Any] = (),
                      durable: bool = True, job_key: str | None = None, shards_per_task: int = 1,
                      shard_threads: int | None = None, shard_commit: str = "each", table_format: str | None = None,
                      table_name: str | None = None, catalog: Mapping[str, Any] | None = None,
                      catalog_conn_id: str | None = None, audit: Any = None) -> Any:
    """``@task.commit_stage(target=..., ...)``: the parameters of
    :func:`~airflow_commit_provider.operators.stage.commit_stage`, but for the callable (the decorated function)
    and its arguments (given by calling or mapping it); *group_id* defaults to the function's name (the job name:
    job id = dag id + run id, or *job_key*, + group id). Every parameter is checked here, where the DAG is parsed.
    With *shards_per_task* the function is called once per shard and names ``shard_index`` to tell them apart.
    *audit*: as ``commit_stage``'s (an audit, and an approval, between the writes and the commit).
    """
    params = {"target": target, "conn_id": conn_id, "algorithm": algorithm, "mode": mode,
              "partition_by": partition_by, "commit_threads": commit_threads, "ensure_target": ensure_target,
              "purge_on_failure": purge_on_failure, "write_retries": write_retries, "write_kwargs": write_kwargs,
              "outlets": outlets, "durable": durable, "job_key": job_key, "shards_per_task": shards_per_task,
              "shard_threads": shard_threads, "shard_commit": shard_commit, "table_format": table_format,
              "table_name": table_name, "catalog": catalog, "catalog_conn_id": catalog_conn_id, "audit": audit}

    def decorate(function: Callable[..., Any]) -> CommitStageTask:
        check_user_callables(function, None, "@task.commit_stage")
        return CommitStageTask(function, group_id or function.__name__, params)

    return decorate(python_callable) if python_callable is not None else decorate
