"""The base of a stage's operators (:class:`CommitBaseOperator`): the parameters they share, validated where the
DAG is parsed (also by ``.partial(...)``), and what every one derives from them: the job's names and id, its
table, its committer."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseHook, BaseOperator

from ..hooks.storage import CommitStorageHook
from ..links.commit_status import CommitStatusLink, CommitTargetLink
from ..protocol import CommitConfig, FileOutputCommitter, InvalidOutputSpec, JobAlreadyCommitted
from ..protocol.tables import TableTarget, table_target
from .checks import SHARED_ARGS, check_commit_args
from .identity import job_names, make_job_id
from .hints import purge_command
from .overlap import run_owner
from .shards import check_job_shards, shard_labels, tasks_per_instance


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
            cls.check_partial(kwargs, owner)
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
    :param shards_per_task: shards per write task instance (default 1): the write calls its callable once per
        shard (``shards.py``), the setup records it
    :param shard_commit: ``"each"`` (default): every shard is a protocol task of its own, committed and recovered
        alone (the commit expects ``N`` per write task instance); ``"together"``: a task instance's shards commit
        in one task commit, one record (far fewer requests per file on an object store; a failed try writes every
        shard again)
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
                 shards_per_task: int = 1, shard_commit: str = "each", table_format: str | None = None,
                 table_name: str | None = None, catalog: Mapping[str, Any] | None = None,
                 catalog_conn_id: str | None = None, **kwargs: Any) -> None:
        args = check_commit_args({"target": target, "conn_id": conn_id, "algorithm": algorithm, "mode": mode,
                                  "partition_by": partition_by, "commit_threads": commit_threads,
                                  "job_name": job_name, "durable": durable, "job_key": job_key,
                                  "shards_per_task": shards_per_task, "shard_commit": shard_commit,
                                  "table_format": table_format,
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
        self.shard_commit = args["shard_commit"]
        self.table_format = table_format
        self.table_name = table_name
        self.catalog = dict(catalog) if catalog is not None else None
        self.catalog_conn_id = catalog_conn_id

    @classmethod
    def check_partial(cls, kwargs: Mapping[str, Any], owner: str) -> None:
        """What ``.partial(**kwargs)`` checks besides the shared parameters: a subclass's own (none here)."""

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
        except JobAlreadyCommitted:
            # a late try after the commit runs nothing but reports what was committed under its task numbers:
            # those of the committed generation's shards only
            log = committer.job.commit_log()
            if log is not None:
                check_job_shards(log.manifest.get("labels") or {}, self.shards_per_task, self.shard_commit,
                                 committer.job_id, f"{type(self).__name__} {self.task_id!r}", committed=True)
            return
        if record is None:
            return
        committer.job.check_record_names(record)   # a job named by another: say so, not that its shards differ
        check_job_shards(record.labels, self.shards_per_task, self.shard_commit, committer.job_id,
                         f"{type(self).__name__} {self.task_id!r}", purge_command(committer, self.conn_id))

    @property
    def tasks_per_instance(self) -> int:
        """Protocol tasks per write task instance (:func:`~.shards.tasks_per_instance`): what the commit counts."""
        return tasks_per_instance(self.shards_per_task, self.shard_commit)

    def committer(self, context: Mapping[str, Any]) -> FileOutputCommitter:
        # the rendered target: a template may render to one the parsed DAG could not be refused for
        check_commit_args({"target": self.target, "table_format": self.table_format, "catalog": self.catalog,
                           "catalog_conn_id": self.catalog_conn_id}, f"{type(self).__name__}(task_id={self.task_id!r})")
        labels = {"dag_id": context["dag"].dag_id, "run_id": context["run_id"], "job_name": self._job_name()}
        if self.job_key is not None:
            labels["job_key"] = self._job_key(context)
        labels.update(shard_labels(self.shards_per_task, self.shard_commit))
        names = self.job_names(context)
        config = CommitConfig(algorithm=self.algorithm, mode=self.mode, partition_by=self.partition_by,
                              commit_threads=self.commit_threads, labels=labels, durable=self.durable, names=names,
                              owner=run_owner(context))
        return CommitStorageHook(self.conn_id).make_committer(self.target, make_job_id(**names), config,
                                                              table=self.table())
