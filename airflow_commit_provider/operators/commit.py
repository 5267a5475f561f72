"""Operators for one write stage: setup, write (one task attempt per Airflow try), commit, abort.

How Airflow maps onto Hadoop's model (see the README for the full table):

- job: one write stage (``job_name``) of one DAG run into one target; its id is derived from dag id, job key
  (default: the run id) and job name, so it is the same for every try and every clear of that run, and, with
  ``job_key="{{ data_interval_start }}"``, for every run of one data interval;
- application attempt: one run of the setup task. The first run is attempt 0; a setup retry or a clear of the DAG
  run (which re-runs setup) is the next one. "Clear only failed tasks" re-runs neither setup nor teardown, so the
  retried writes and commit continue in the same application attempt: the protocol reads the current attempt
  from storage, never from XCom (XComs are wiped at every try);
- task: one mapped write task instance (task number = ``map_index``; 0 when unmapped); with
  ``shards_per_task=N``, N tasks per task instance: shard ``s`` of map index ``i`` is task ``i * N + s``
  (``shards.py``);
- task attempt: one Airflow try (attempt number = ``ti.try_number``, unique per try, so a zombie try and its
  successor never share a work directory); every shard of a try has that attempt number.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseHook, BaseOperator

from ..hooks.storage import CommitStorageHook
from ..links.commit_status import CommitStatusLink, CommitTargetLink
from ..protocol import (
    CommitConfig,
    CommitDenied,
    FileOutputCommitter,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    OverlappingRun,
    run_task_attempt,
)
from ..protocol.config import check_threads, normalize_algorithm, partition_columns
from ..protocol.modes import check_mode
from ..protocol.stores import S3_SCHEMES, process_local, target_scheme
from ..protocol.tables import FORMATS as TABLE_FORMATS
from ..protocol.tables import TableTarget, check_table_location, table_target
from .failures import DETERMINISTIC_ERRORS, AirflowFailException, fail_fast_on_deterministic_errors
from .hints import leftover_hint, purge_command
from .identity import job_names, make_job_id
from .inputs import inputs_digest
from .lineage import CommitLineageMixin
from .overlap import run_finished, run_owner
from .setup_context import REFUSED_KEY, SetupContext
from .shards import check_job_shards, check_shard_callable, check_shards, run_shards
from .summary import CommitSummary

#: Task state store key holding a write task's commit outcome (Airflow 3.3+: the task instance's "Storage" tab).
STATE_KEY = "commit"


def check_user_callables(python_callable: Any, writer_callable: Any, owner: str) -> None:
    """Exactly one of the two, and a plain callable: an ``@task``-decorated function is not one (calling it builds
    a task, it does not run the code), so it is refused here, where the DAG is parsed, not at run time."""
    if (python_callable is None) == (writer_callable is None):
        raise InvalidOutputSpec(f"{owner}: give exactly one of python_callable (returns pyarrow data) or "
                                "writer_callable (receives a writer)")
    for name, func in (("python_callable", python_callable), ("writer_callable", writer_callable)):
        if func is None:
            continue
        if getattr(func, "_airflow_is_task_decorator", False) or getattr(func, "_commit_stage_decorator", False):
            inner = getattr(func, "function", None)
            label = getattr(inner, "__name__", None) or repr(func)
            raise InvalidOutputSpec(
                f"{owner}: {name}={label} is an @task-decorated function, not a plain callable: calling it builds "
                f"a task instead of running your code. Decorate it with @task.commit_stage(target=..., ...) "
                f"instead of @task (the whole stage, usable with .expand()), or pass the undecorated function "
                f"({label}.function)")
        if not callable(func):
            raise InvalidOutputSpec(f"{owner}: {name} must be callable, got {type(func).__name__}")


def _call(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Call *func* like PythonOperator does: positional *args*, and those of *kwargs* it names (all with **kw)."""
    params = inspect.signature(func).parameters.values()
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        names = {p.name for p in params}
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    return func(*args, **kwargs)


#: The parameters every operator of a stage takes (:class:`CommitBaseOperator`'s own).
SHARED_ARGS = ("target", "conn_id", "algorithm", "mode", "partition_by", "commit_threads", "job_name", "durable",
               "job_key", "shards_per_task", "table_format", "table_name", "catalog", "catalog_conn_id")


def check_commit_args(args: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """The shared parameters of a stage's operators in *args*, validated and normalised (``algorithm="v2"`` -> 2,
    ``partition_by="day"`` -> ``["day"]``); only those given are checked (a mapped operator's ``partial`` may give
    some only). Raises :class:`~airflow_commit_provider.protocol.InvalidOutputSpec` naming *owner*, the parameter
    and its value."""
    out = dict(args)

    def bad(name: str, why: str) -> InvalidOutputSpec:
        return InvalidOutputSpec(f"{owner}: {name}={args[name]!r}: {why}")

    if "target" in args:
        target = args["target"]
        iceberg_elsewhere = args.get("table_format") == "iceberg" and (args.get("catalog") is not None or
                                                                        args.get("catalog_conn_id") is not None)
        if (target is None or (isinstance(target, str) and not target.strip())) and not iceberg_elsewhere:
            raise bad("target", "target is required: a local path, a URL such as s3://bucket/prefix, or an "
                                "ObjectStoragePath")
        if process_local(target):
            raise bad("target", "a memory:// file system lives inside one process, and Airflow runs a stage's "
                                "setup, writes and commit in different processes: the commit would see none of "
                                "the writes. Use a local path every worker shares (e.g. '/data/events') or an "
                                "object store URL such as s3://bucket/prefix")
    checks = {"algorithm": normalize_algorithm, "mode": check_mode,
              "partition_by": lambda v: list(partition_columns(v)), "commit_threads": check_threads}
    for name, check in checks.items():
        if name in args:
            try:
                out[name] = check(args[name])
            except InvalidOutputSpec as exc:
                raise bad(name, str(exc)) from None
    if "job_key" in args and args["job_key"] is not None and not _text(args["job_key"]):
        raise bad("job_key", "give a non-empty string (a template such as '{{ data_interval_start }}'), or None: "
                             "the run id")
    if "shards_per_task" in args:
        try:
            check_shards(args["shards_per_task"], None)
        except InvalidOutputSpec as exc:
            raise InvalidOutputSpec(f"{owner}: {exc} (protocol tasks per write task instance; 1: one)") from None
    if "durable" in args and not isinstance(args["durable"], bool):
        raise bad("durable", "give True (the default: a committed output survives a power cut) or False (a "
                             "scratch target on a local disk: nothing is fsynced)")
    scheme = target_scheme(args.get("target"))
    if out.get("algorithm") == "magic" and scheme is not None and scheme not in S3_SCHEMES:
        raise bad("algorithm", f"the magic committer needs S3 multipart uploads and the target {args['target']!r} is "
                               f"on {scheme!r}: use algorithm 1 or 2 there")
    if out.get("mode") == "dynamic" and "partition_by" in args and not out["partition_by"]:
        raise bad("partition_by", "mode='dynamic' replaces the partitions a job writes, so it needs partition_by")
    _check_table_args(args, out, bad)
    _check_keyed_v2(args, out, bad)
    return out


#: modes whose job commit deletes nothing but the job's own earlier generation (a re-run's)
_KEEPING_MODES = ("append", "error")


def _check_keyed_v2(args: Mapping[str, Any], out: Mapping[str, Any],
                    bad: Callable[[str, str], InvalidOutputSpec]) -> None:
    """Algorithm 2 with a ``job_key`` in ``append`` or ``error`` mode is refused (when all three are given). Every
    run of the key after the first is a new generation of one job that replaces the last one's files at its job
    commit; algorithm 2 publishes each task's files at its task commit, so for the whole write stage a reader
    would see the key's rows twice, the old generation's and the new one's. In ``overwrite`` and ``dynamic`` mode,
    old files beside new ones until the job commit is what algorithm 2 does in every run (README), key or not."""
    if not {"algorithm", "job_key", "mode"} <= set(args) or args["job_key"] is None:
        return
    if out["algorithm"] == 2 and out["mode"] in _KEEPING_MODES:
        raise bad("algorithm", f"with job_key={args['job_key']!r} in mode={out['mode']!r}, every run of the key "
                               "after the first replaces the last one's rows at its job commit, and algorithm 2 "
                               "publishes each task's files at its task commit: readers would see the key's rows "
                               "twice until then. Use algorithm=1 (nothing is visible before the job commit; on S3 "
                               "also 'magic'), or no job_key (each run its own job)")


def _check_table_args(args: Mapping[str, Any], out: Mapping[str, Any],
                      bad: Callable[[str, str], InvalidOutputSpec]) -> None:
    """``table_format`` and the Iceberg parameters that go with it (only those given: a ``partial`` may give
    some only)."""
    fmt = args.get("table_format")
    if fmt is None:
        given = [k for k in ("table_name", "catalog", "catalog_conn_id") if args.get(k) is not None]
        if given and "table_format" in args:
            raise bad(given[0], "is a table parameter: give table_format='iceberg' too")
        return
    if fmt not in TABLE_FORMATS:
        raise bad("table_format", f"use one of {', '.join(TABLE_FORMATS)}, or None for a directory of files")
    if "target" in args:
        try:
            check_table_location(fmt, args["target"])
        except InvalidOutputSpec as exc:
            raise bad("table_format", str(exc)) from None
    if out.get("algorithm", 1) != 1:
        raise bad("algorithm", f"a {fmt} table is committed at job commit in one transaction: use algorithm 1")
    if fmt == "delta":
        for k in ("table_name", "catalog", "catalog_conn_id"):
            if args.get(k) is not None:
                raise bad(k, "is an Iceberg parameter; a Delta table is its target location")
        return
    name = args.get("table_name")
    if "table_name" in args and (not isinstance(name, str) or "." not in name.strip(".")):
        raise bad("table_name", "an Iceberg table needs table_name='namespace.table'")
    if args.get("catalog") is not None and args.get("catalog_conn_id") is not None:
        raise bad("catalog", "give catalog (pyiceberg catalog properties) or catalog_conn_id, not both")
    if args.get("catalog") is not None and not isinstance(args["catalog"], Mapping):
        raise bad("catalog", "give a dict of pyiceberg catalog properties ({'type': 'sql', 'uri': ...})")
    if isinstance(args.get("catalog"), Mapping) and process_local(args["catalog"].get("warehouse")):
        raise bad("catalog", "its warehouse is on memory://, which lives inside one process: the table's files "
                             "would be gone for the next task. Give the catalog a local or s3:// warehouse")


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


class _CheckedPartial:
    """``Operator.partial(...)`` that validates the shared parameters it is given, at DAG parse time: Airflow builds
    a mapped task's operator (so runs its constructor) only when each mapped task instance runs."""

    def __get__(self, obj: Any, cls: type[CommitBaseOperator]) -> Callable[..., Any]:
        partial = super(CommitBaseOperator, obj if obj is not None else cls).partial  # type: ignore[misc]
        if obj is not None:  # BaseOperator's: refuses .partial on a task
            return partial

        def checked_partial(**kwargs: Any) -> Any:
            owner = f"{cls.__name__}.partial(task_id={kwargs.get('task_id')!r})"
            check_commit_args({k: v for k, v in kwargs.items() if k in SHARED_ARGS}, owner)
            if issubclass(cls, CommitWriteOperator):
                check_user_callables(kwargs.get("python_callable"), kwargs.get("writer_callable"), owner)
                check_write_shards(kwargs, owner)
            return partial(**kwargs)

        return checked_partial


class CommitBaseOperator(BaseOperator):
    """The base of a stage's operators: owns the parameters they share, and what they derive from them.

    :param target: where the stage writes: a local path, a URL (``s3://bucket/prefix``) or an ObjectStoragePath
        (templated)
    :param conn_id: the Airflow connection of a remote target (templated)
    :param algorithm: ``1``, ``2`` or ``"magic"`` (also ``"v1"``, ``"v2"``)
    :param mode: ``"error"``, ``"append"``, ``"overwrite"`` or ``"dynamic"`` (which needs *partition_by*)
    :param partition_by: partition column(s)
    :param commit_threads: parallel moves at job commit (``None``: the store's default)
    :param job_name: the stage's name in the job id; default: the task group's id, else ``"default"`` (templated)
    :param job_key: what makes one run's job the same as another's (templated): default ``None``, the run id (every
        try and clear of one run is one job); ``"{{ data_interval_start }}"``: every run of one data interval is
        one job, so a second run replaces the first's files (a new generation) instead of adding them again
    :param durable: on a local disk, fsync what a committed output needs to survive a power cut (default);
        ``False`` for scratch targets. Object stores are durable per request either way.
    :param shards_per_task: protocol tasks per write task instance (default 1): the write runs them as shards
        (``shards.py``), the commit expects ``N`` per write task instance, the setup records it
    :param table_format: ``"delta"`` or ``"iceberg"``: job commit publishes into that table in one transaction
        (README, "Delta Lake and Iceberg tables"); ``None`` (default): a directory of files
    :param table_name: the Iceberg table, ``"namespace.table"`` (templated)
    :param catalog: pyiceberg catalog properties; default, with *catalog_conn_id* ``None``: a SQL catalog on SQLite
        in *target* (``<target>/catalog.db``)
    :param catalog_conn_id: an Airflow connection whose extras are the catalog properties (say ``{"type":
        "glue"}``)

    Every one is validated at construction, and by ``.partial(...)`` for a mapped operator (whose constructor runs
    only when its tasks run), so a bad value fails the DAG file's import with
    :class:`~airflow_commit_provider.protocol.InvalidOutputSpec` naming the operator, the parameter and the value.
    Subclasses take their own parameters and pass the rest on (``super().__init__(**kwargs)``), and extend
    ``template_fields`` (``(*CommitBaseOperator.template_fields, ...)``).
    """

    template_fields: Sequence[str] = ("target", "conn_id", "job_name", "job_key", "table_name")
    #: kept for subclasses written against earlier releases: the shared template fields
    commit_template_fields: tuple[str, ...] = tuple(template_fields)
    operator_extra_links = (CommitStatusLink(), CommitTargetLink())
    partial = _CheckedPartial()  # type: ignore[assignment]

    def __init__(self, *, target: Any, conn_id: str | None = None, algorithm: int | str = 1, mode: str = "error",
                 partition_by: Collection[str] | str = (), commit_threads: int | None = None,
                 job_name: str | None = None, durable: bool = True, job_key: str | None = None,
                 shards_per_task: int = 1, table_format: str | None = None, table_name: str | None = None,
                 catalog: Mapping[str, Any] | None = None, catalog_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        args = check_commit_args({"target": target, "conn_id": conn_id, "algorithm": algorithm, "mode": mode,
                                  "partition_by": partition_by, "commit_threads": commit_threads,
                                  "job_name": job_name, "durable": durable, "job_key": job_key,
                                  "shards_per_task": shards_per_task, "table_format": table_format,
                                  "table_name": table_name, "catalog": catalog, "catalog_conn_id": catalog_conn_id},
                                 f"{type(self).__name__}(task_id={kwargs.get('task_id')!r})")
        super().__init__(**kwargs)
        self.target = args["target"]
        self.conn_id = args["conn_id"]
        self.algorithm = args["algorithm"]
        self.mode = args["mode"]
        self.partition_by = args["partition_by"]
        self.commit_threads = args["commit_threads"]
        self.job_name = args["job_name"]
        self.durable = args["durable"]
        self.job_key = args["job_key"]
        self.shards_per_task = args["shards_per_task"]
        self.table_format = table_format
        self.table_name = table_name
        self.catalog = dict(catalog) if catalog is not None else None
        self.catalog_conn_id = catalog_conn_id

    def _stage_audit(self, audit: Any) -> Any:
        """The stage's audit as each of its tasks holds it (:func:`~..protocol.audit.spec.stage_spec`: one
        specification, one digest, however the stage was built); ``None`` without one."""
        if audit is None:
            return None
        from ..protocol.audit.spec import stage_spec

        return stage_spec(audit, f"{type(self).__name__}(task_id={self.task_id!r})", algorithm=self.algorithm,
                          table_format=self.table_format, partition_by=self.partition_by)

    def _job_name(self) -> str:
        if self.job_name:
            return self.job_name
        group = getattr(self, "task_group", None)
        group_id = getattr(group, "group_id", None)
        return group_id or "default"

    def _job_key(self, context: Mapping[str, Any]) -> str:
        """The rendered job key (the run id by default); a key that renders empty is refused, naming it."""
        if self.job_key is None:
            return context["run_id"]
        key = str(self.job_key).strip()
        if not key:
            raise InvalidOutputSpec(f"{type(self).__name__}(task_id={self.task_id!r}): job_key rendered empty: "
                                    "it must name the job (say '{{ data_interval_start }}')")
        return key

    def job_names(self, context: Mapping[str, Any]) -> dict[str, str]:
        """What names this run's job (:func:`~.identity.job_names`): its id derives from it, its record keeps it."""
        return job_names(context["dag"].dag_id, self._job_key(context), self._job_name())

    def job_id(self, context: Mapping[str, Any]) -> str:
        return make_job_id(**self.job_names(context))

    def task_state(self, context: Mapping[str, Any], task_id: str | None, otherwise: str) -> str | None:
        """The state of another task instance of this run (``None`` when there is no such task, or its state
        cannot be read: then *otherwise* says in the log what the caller does instead)."""
        if not task_id:
            return None
        try:
            states = context["ti"].get_task_states(dag_id=context["dag"].dag_id, task_ids=[task_id],
                                                   run_ids=[context["run_id"]])
        except Exception as exc:
            self.log.info("state of %s not readable (%s): %s", task_id, exc, otherwise)
            return None
        return states.get(context["run_id"], {}).get(task_id)

    def table(self) -> TableTarget | None:
        """The table the stage publishes into (``table_format``), or ``None`` for a directory of files."""
        if self.table_format is None:
            return None
        hook = CommitStorageHook(self.conn_id)
        location = str(self.target) if self.target else None
        if self.table_format == "delta":
            return table_target("delta", location, storage_options=hook.delta_storage_options(location or ""))
        catalog = self.catalog
        if self.catalog_conn_id is not None:
            catalog = dict(BaseHook.get_connection(self.catalog_conn_id).extra_dejson)
        if catalog is not None:   # its files on S3 through the stage's connection unless the catalog says otherwise
            catalog = {**hook.iceberg_file_io_options(catalog.get("warehouse") or location), **catalog}
        return table_target("iceberg", location, table_name=self.table_name, catalog=catalog)

    def _check_shards(self, committer: FileOutputCommitter, *, before_setup: bool = False) -> None:
        """The job was set up with this stage's ``shards_per_task`` (:func:`~.shards.check_job_shards`);
        *before_setup*: a job not set up yet (or committed: a new generation) passes, it takes this stage's."""
        try:
            record = committer.job.job_record() if before_setup else committer.job.require_job()
        except JobAlreadyCommitted:   # a late try after the commit: it runs nothing, whatever its shards
            return
        if record is None:
            return
        committer.job.check_record_names(record)   # a job named by another: say so, not that its shards differ
        check_job_shards(record.labels, self.shards_per_task, committer.job_id, f"{type(self).__name__} "
                                                                                f"{self.task_id!r}")

    def committer(self, context: Mapping[str, Any]) -> FileOutputCommitter:
        # the rendered target: a template may render to one the parsed DAG could not be refused for
        check_commit_args({"target": self.target, "table_format": self.table_format, "catalog": self.catalog,
                           "catalog_conn_id": self.catalog_conn_id}, f"{type(self).__name__}(task_id={self.task_id!r})")
        labels = {"dag_id": context["dag"].dag_id, "run_id": context["run_id"], "job_name": self._job_name()}
        if self.job_key is not None:
            labels["job_key"] = self._job_key(context)
        if self.shards_per_task != 1:
            labels["shards_per_task"] = self.shards_per_task
        names = self.job_names(context)
        config = CommitConfig(algorithm=self.algorithm, mode=self.mode, partition_by=self.partition_by,
                              commit_threads=self.commit_threads, labels=labels, durable=self.durable, names=names,
                              owner=run_owner(context))
        return CommitStorageHook(self.conn_id).make_committer(self.target, make_job_id(**names), config,
                                                              table=self.table())


class CommitSetupOperator(CommitBaseOperator):
    """Job setup: allocates the next application attempt, writes the job record, makes sure the target exists.

    Idempotent and never touches committed work. Returns the stage's :class:`~.setup_context.SetupContext` (job id,
    uuid, generation, application attempt, state; target, algorithm, mode ...) as its XCom value.

    With *audit* (the stage's :class:`~..protocol.audit.Audit`) whose approval may wait longer than the store keeps
    the staged data (S3 magic: a bucket lifecycle rule aborting incomplete uploads), the setup refuses before
    anything is written (or warns: ``Approval(on_expiry_risk="warn")``).
    """

    ui_color = "#d6eaf8"

    def __init__(self, *, audit: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.audit = self._stage_audit(audit)

    def _check_approval_expiry(self, committer: FileOutputCommitter) -> None:
        from ..protocol.audit.expiry import approval_risk

        risk = approval_risk(committer.job, self.audit.approval.timeout)
        if risk is None:
            return
        if risk.certain and self.audit.approval.on_expiry_risk == "refuse":
            raise InvalidOutputSpec(risk.message)
        self.log.warning("%s", risk.message)

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        try:
            with fail_fast_on_deterministic_errors():
                return self._setup(context)
        except AirflowFailException as exc:   # refused for good: the Commit status view shows why
            cause = exc.__cause__ or exc
            context["ti"].xcom_push(key=REFUSED_KEY, value={"error": type(cause).__name__, "message": str(cause)})
            raise

    def _setup(self, context: Mapping[str, Any]) -> dict[str, Any]:
        committer = self.committer(context)
        # before setup_job, which would open a new application attempt (fencing the older one's tries) first
        self._check_shards(committer, before_setup=True)
        if self.audit is not None and self.audit.approval is not None:
            self._check_approval_expiry(committer)
        try:
            job = committer.setup_job(run_finished=run_finished(context))
        except OverlappingRun as exc:
            # that run has not ended in Airflow's eyes, so the command needs --force (cli/live.py); marking the run
            # failed in Airflow instead lets its teardown abort the job
            raise OverlappingRun(f"{exc} The command (that run is live in Airflow's eyes: only once its workers are "
                                 f"gone for good): {purge_command(committer, self.conn_id, force=True)}",
                                 exc.owner, exc.app_attempt) from exc
        setup = SetupContext.from_job(job, job_name=self._job_name(), target=committer.store.url(),
                                      conn_id=self.conn_id, algorithm=committer.algorithm_name,
                                      algorithm_value=self.algorithm, mode=committer.mode,
                                      partition_by=self.partition_by, shards_per_task=self.shards_per_task,
                                      clear_number=getattr(context.get("dag_run"), "clear_number", None),
                                      setup_try=context["ti"].try_number)
        self.log.info("job %s: generation %s, application attempt %s (%s) at %s", job.job_id, job.generation,
                      job.app_attempt, job.state, setup.target)
        return setup.to_xcom()


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
    fails after they finished, and its retry runs only the shards that did not commit.
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
        if self.shards_per_task != 1:
            return self._write_shards(committer, context, task, attempt, {**context, **self.op_kwargs}, inputs)
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


def check_write_shards(kwargs: Mapping[str, Any], owner: str) -> None:
    """A write's ``shards_per_task`` and ``shard_threads``, and that its callable can tell its shards apart."""
    n = kwargs.get("shards_per_task", 1)
    try:
        check_shards(n, kwargs.get("shard_threads"))
    except InvalidOutputSpec as exc:
        raise InvalidOutputSpec(f"{owner}: {exc}") from None
    for name in ("python_callable", "writer_callable"):
        if callable(kwargs.get(name)):
            check_shard_callable(kwargs[name], n, owner)


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


class CommitJobOperator(CommitLineageMixin, CommitBaseOperator):
    """Job commit: idempotent and resumable; returns the commit summary, a
    :class:`~.summary.CommitSummary` as its XCom dict (rows, files, bytes, partitions, recovered tasks, timings).

    The expected tasks are *expected_tasks* when given, otherwise the number of task instances of *write_task_id*
    in this DAG run (a mapped write expanded to zero tasks commits an empty output), times ``shards_per_task``.

    The records the commit renamed into ``_temporary/_trash`` are deleted by the stage's teardown, which runs next;
    with *teardown_task_id* (``commit_stage`` sets it) a commit whose teardown already ran in this run ("clear only
    failed" re-runs neither setup nor teardown) deletes them itself.

    With *audit* (the stage's :class:`~..protocol.audit.Audit`) the commit publishes only after a passing audit of
    that specification for exactly the task commits it publishes (and its approval, if it asks for one): otherwise
    it fails with :class:`~..protocol.errors.AuditFailed` before anything is visible. The verdict goes into
    ``_SUCCESS`` (``audit``).
    """

    template_fields = (*CommitBaseOperator.template_fields, "expected_tasks")
    ui_color = "#fcf3cf"

    def __init__(self, *, write_task_id: str | None = None, expected_tasks: int | None = None,
                 teardown_task_id: str | None = None, audit: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.teardown_task_id = teardown_task_id
        #: the stage's :class:`~..protocol.audit.Audit`: the commit then requires its passing verdict
        self.audit = self._stage_audit(audit)
        if write_task_id is None and expected_tasks is None:
            raise InvalidOutputSpec("CommitJobOperator needs write_task_id or expected_tasks to know which tasks "
                                    "must have committed")
        self.write_task_id = write_task_id
        self.expected_tasks = expected_tasks

    def _expected(self, context: Mapping[str, Any]) -> int:
        if self.expected_tasks is not None:
            return int(self.expected_tasks) * self.shards_per_task
        ti = context["ti"]
        states = ti.get_task_states(dag_id=context["dag"].dag_id, task_ids=[self.write_task_id],
                                    run_ids=[context["run_id"]])
        return count_write_tasks(states.get(context["run_id"], {}), self.write_task_id) * self.shards_per_task

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with fail_fast_on_deterministic_errors():
            return self._commit(context)

    def _commit(self, context: Mapping[str, Any]) -> dict[str, Any]:
        committer = self.committer(context)
        self._check_shards(committer)   # the expected count is in tasks of this N: the DAG may have changed since
        expected = self._expected(context)
        # the records' deletion is left to the teardown, which runs next anyway: downstream tasks do not wait for it
        manifest = committer.commit_job(expected, defer_cleanup=True, gate=self._audit_gate())
        if self._teardown_finished(context):
            removed = committer.remove_trash()
            self.log.info("the stage's teardown ran before this commit (a clear of failed tasks only): removed the "
                          "%d committed job record director%s it would have", removed, "y" if removed == 1 else "ies")
        summary = CommitSummary.from_manifest(manifest)
        self._committed = (manifest, summary, committer.store)   # what the OpenLineage facets report (lineage.py)
        self._commit_log = committer.commit_log
        self.log.info("job %s committed: %s files, %s rows, %s bytes in %s tasks (application attempt %s); "
                      "stages: %s", manifest["job_id"], *(manifest["totals"][k] for k in ("files", "rows", "bytes",
                                                                                         "tasks")),
                      manifest["app_attempt"], manifest["durations"])
        for warning in summary.warnings:
            self.log.warning(warning)
        for outlet in self.outlets or []:   # the asset events are emitted on success only: once data is committed
            context["outlet_events"][outlet].extra = summary.asset_extra()
        return summary.to_xcom()

    def _audit_gate(self) -> Any:
        """What the commit requires of the stage's audit (:class:`~..protocol.audit.run.AuditGate`): a passing
        verdict of this specification for exactly the tasks it publishes, approved if it asks for approval."""
        if self.audit is None:
            return None
        from ..protocol.audit.run import AuditGate

        return AuditGate(self.audit.digest(), approval=self.audit.approval is not None)

    def _teardown_finished(self, context: Mapping[str, Any]) -> bool:
        # unreadable: the teardown deletes them if it is to run, so leaving them is only a delay
        return self.task_state(context, self.teardown_task_id, "its cleanup is left to it") in FINISHED_STATES


#: task instance states after which a teardown will not run again in this run without a clear
FINISHED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


def count_write_tasks(states: Mapping[str, Any], task_id: str) -> int:
    """How many write task instances a run has, from ``get_task_states``: mapped ones are keyed
    ``<task_id>_<map_index>``; an unmapped or zero-length-mapped one is keyed ``<task_id>``."""
    mapped = [k for k in states if k.startswith(f"{task_id}_") and k[len(task_id) + 1:].isdigit()]
    if mapped:
        return len(mapped)
    state = states.get(task_id)
    return 0 if state in (None, "skipped", "removed") else 1


class CommitAbortOperator(CommitBaseOperator):
    """The stage's teardown: cleans up after a failed run, never after a committed one.

    A teardown runs whatever happened (its trigger rule cannot be changed), so it looks at the storage: if the job
    committed, or its commit has started (it can only be finished, not undone), it only deletes the records the
    commit renamed into ``_temporary/_trash`` (local disks; the commit task leaves that to it). Otherwise it
    removes every uncommitted attempt's files and **keeps committed tasks** (hidden under ``_temporary``), so that
    clearing the failed run recovers them instead of recomputing them. ``purge=True`` removes everything
    (Hadoop's abortJob): the target is left exactly as before the job. With algorithm v2, committed tasks' files
    were already visible and are always removed.

    With *commit_task_id* (``commit_stage`` sets it), a teardown whose run's commit task succeeded returns at once,
    from the task state alone: a successful commit task means the job committed, so there is nothing to undo; on
    object stores (no trash: their records are deleted by the commit, in batches) it then skips the storage
    client's start-up and its reads (on Celery about a second of the teardown's ~3 s).
    """

    ui_color = "#fadbd8"

    def __init__(self, *, purge: bool = False, commit_task_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.purge = purge
        self.commit_task_id = commit_task_id

    def _commit_task_succeeded(self, context: Mapping[str, Any]) -> bool:
        # unreadable: the storage is the authority, look there instead
        return self.task_state(context, self.commit_task_id, "checking the storage") == "success"

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with fail_fast_on_deterministic_errors():
            return self._abort(context)

    def _abort(self, context: Mapping[str, Any]) -> dict[str, Any]:
        if self._commit_task_succeeded(context):
            result = {"job_id": self.job_id(context), "state": "committed", "aborted": False,
                      "reason": f"{self.commit_task_id} succeeded in this run"}
            committer = self.committer(context)
            if committer.store.renames_directories:   # the commit left its records in _temporary/_trash
                result["trash_removed"] = committer.remove_trash()
            self.log.info("abort of job %s: nothing to do, %s", result["job_id"], result["reason"])
            return result
        committer = self.committer(context)
        result = committer.abort_job(keep_committed=not self.purge)
        self.log.info("abort of job %s: %s", result["job_id"], result)
        if result.get("aborted") and not self.purge:
            result["hint"] = leftover_hint(committer, self.conn_id, self.target, result["kept_committed_tasks"])
            self.log.warning("%s", result["hint"])
        return result
