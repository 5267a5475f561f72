"""The checks a stage's parameters pass where the DAG is parsed: ``commit_stage``, the decorator, every
operator's constructor and ``.partial(...)`` call these, so one rule has one wording wherever it is broken."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..protocol import InvalidOutputSpec
from ..protocol.config import check_threads, normalize_algorithm, partition_columns
from ..protocol.modes import check_mode
from ..protocol.stores import STAGING_SCHEMES, process_local, target_scheme
from ..protocol.tables import FORMATS as TABLE_FORMATS
from ..protocol.tables import check_table_location
from .shards import check_shard_callable, check_shard_commit, check_shards


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

#: The parameters every operator of a stage takes (:class:`CommitBaseOperator`'s own).
SHARED_ARGS = ("target", "conn_id", "algorithm", "mode", "partition_by", "commit_threads", "job_name", "durable",
               "job_key", "shards_per_task", "shard_commit", "table_format", "table_name", "catalog",
               "catalog_conn_id")


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
    if "shard_commit" in args:
        try:
            check_shard_commit(args["shard_commit"])
        except InvalidOutputSpec as exc:
            raise InvalidOutputSpec(f"{owner}: {exc}") from None
    if "durable" in args and not isinstance(args["durable"], bool):
        raise bad("durable", "give True (the default: a committed output survives a power cut) or False (a "
                             "scratch target on a local disk: nothing is fsynced)")
    scheme = target_scheme(args.get("target"))
    if out.get("algorithm") == "magic" and scheme is not None and scheme not in STAGING_SCHEMES:
        raise bad("algorithm", f"the magic committer stages files under their final names (S3 multipart uploads, "
                               f"Azure staged blocks) and the target {args['target']!r} is on {scheme!r}: use "
                               "algorithm 1 or 2 there")
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
