"""Random schedules over the whole Airflow lifecycle of one write stage, checked against a model and two readers.

One schedule is one write stage (one job) of one DAG run, driven through everything Airflow can do to it. Each
public method of :class:`Lifecycle` is one *rule*: one Airflow event, one protocol call. The model predicts the
outcome of every call and the data every reader must see; after **every** step the output is read back by

- the *plain reader*: pyarrow's dataset over the directory (hive partitioning, ``_``/``.`` names skipped), whose
  rows must be exactly what the model says (nothing lost, nothing duplicated, partition values as written), and
- the *``_SUCCESS``-gated reader*: every ``_SUCCESS`` under the root (the root's and each partition's) that exists
  must be a valid manifest whose ``files`` plus ``retained`` are exactly the visible data files under its
  directory, with their sizes (I9).

The rules, and the Airflow event each stands for:

============================  =================================================================================
``setup()``                   the setup task runs: the run's first setup, a setup retry, or a clear of the whole
                              run (a new application attempt; after a successful commit, a new generation)
``start(n, task, parts)``     try *n* of the write task with map index *task* begins (``run_task_attempt``):
                              recovery first; if the task is not committed, ``setup_task`` (which records every
                              earlier uncommitted try of the task in this application attempt as failed)
``write(n)``                  try *n*'s user code writes its rows (its partitions are *parts*)
``close(n)``                  try *n*'s writer closes its files
``commit(n)``                 try *n* asks to commit (``commit_task``); a try whose heartbeat was lost long ago
                              (a zombie) does this after anything else happened: a teardown, a clear, a job
                              commit, a new generation
``fail(n)``                   try *n*'s user code raises: ``run_task_attempt`` aborts it (``abort_task``)
``recommit(n)``               try *n*, which committed, asks again (the API says a winner may; a zombie whose
                              first request went through does)
``teardown(purge)``           the teardown task after a failed run: ``abort_job(keep_committed=True)``, or
                              ``abort_job()`` when the stage is configured to purge
``commit_job(point, nth)``    the commit task; with *point*, it dies at the *nth* time it reaches that
                              ``commit_job.*`` fault point (a retry of the commit task resumes it); an audited
                              stage's commit requires the newest audit to have passed for exactly its commits
``audit(point, nth)``         an audited stage (``Config.audit``): the audit task (``run_audit``), dying at an
                              ``audit.*`` point when given; it fails on the tries :func:`is_bad` makes write a
                              negative ``ok``, blaming their tasks (refused for recovery: the next application
                              attempt runs them again)
``approve(answer)``           ``Config.audit="approval"``: the approval task asks (``request_approval``) and
                              records *answer* (``decide_approval``); a rejection refuses every audited task
============================  =================================================================================

"Clear only failed" is no call of its own: the failed tries start again in the same application attempt, then the
commit task runs (the driver does exactly that). A schedule is the list of rules applied; :func:`shrink` removes
steps while the same violation still shows, and :func:`render` prints the result as a plain test. The
:class:`Driver` picks rules at random from a seed (``run_schedule(seed, store)``; a failure names its seed).

Table targets (``store="delta"`` or ``"iceberg"``, on the local disk, algorithm 1): the plain reader is the
format's own (deltalake; pyiceberg's scan through a catalog of its own), whose rows must be exactly the committed
state, or during a job commit exactly the state before or after it (the transaction is the one visibility point);
the old data is a first job's table commit; the root ``_SUCCESS``, when there is one, must name the table's
current version or snapshot; the job commit may die at the table transaction's points too.

Where it runs: tests/protocol/test_lifecycle_schedules.py (memory and local disk, CI), tests/s3/test_lifecycle_s3.py
(moto's server: v1, v2, magic), tests/protocol/test_lifecycle_processes.py (every call in a worker process that a
rule ``kill_next`` SIGKILLs at a fault point or by a timer), and the long run ``python -m tests.schedules``.
Exploring past a known violation: ``LIFECYCLE_IGNORE=<kind prefix>,...`` counts those instead of failing, and
``LIFECYCLE_MODES``, ``LIFECYCLE_ALGORITHMS``, ``LIFECYCLE_OLD_DATA=0``, ``LIFECYCLE_AUDIT=0`` narrow the random
configurations.

The model (the intended semantics, issue 11):

- a try that was recorded failed (``fail``, teardown, a later try's ``setup_task``) or belongs to an older
  application attempt or generation can never commit (``CommitDenied``, ``winner is None``); a try whose task is
  already committed in its application attempt is denied with that record as the winner;
- recovery, and therefore job commit, picks for every task the record of the current application attempt, else
  the newest earlier one; a teardown keeps v1/magic records and removes v2's (and v2's visible files); a purge
  removes everything of the job;
- after a successful job commit the output holds the old rows the mode keeps plus exactly the rows of the picked
  attempts; before it, v1/magic show nothing of the job, v2 shows each committed task's rows (documented exposure);
  a job commit that died shows a mix of old and new, never anything else, and the next ``commit_job`` finishes it;
- an audited stage (``Config.audit``, about a third of the random configurations; issue 35): the audit judges the
  commits the job commit would take (adopting them first, as it does) and fails when one of them is a bad try's,
  blaming those tasks: their commits are refused for recovery (a later application attempt runs them again; the
  current one keeps them, so a retried audit finds the same); an approval's rejection refuses every audited task;
  the job commit refuses (``AuditFailed``, nothing changed) unless the newest audit passed for exactly its
  commits (and was approved, when asked for), and its ``_SUCCESS`` names that audit.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_commit_provider.protocol import (
    CommitDenied,
    CorruptRecord,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    JobIncomplete,
    JobNotSetUp,
    TaskAttemptWriter,
    faults,
    make_committer,
    read_success_marker,
    run_task_attempt,
    store_for,
)
from airflow_commit_provider.protocol.audit import Approval, Audit, AuditFailed, checks
from airflow_commit_provider.protocol.audit.run import AuditGate, decide_approval, request_approval, run_audit
from airflow_commit_provider.protocol.paths import is_hidden, partition_dir

JOB = "j"
OLD_JOB = "old"
OLD_TASK = 99
#: the stores that are tables (on the local disk): the name is the table format
TABLE_STORES = ("delta", "iceberg")
#: object stores: no directories, listings by prefix (S3 on moto, GCS on fake-gcs-server, Azure on Azurite)
OBJECT_STORES = ("s3", "gcs", "azure")
ROWS_PER_PARTITION = 2
COMMIT_POINTS = tuple(p for p in faults.POINTS if p.startswith("commit_job."))
AUDIT_POINTS = faults.AUDIT_POINTS
TABLE_COMMIT_POINTS = COMMIT_POINTS + faults.TABLE_POINTS
#: where a job commit that died at the point leaves the job
_STATE_AFTER = {"commit_job.after_recovery": "running", "commit_job.after_cleanup": "committed"}

#: Partition values. Escaping (Spark's escapePathName) is being implemented; until then only safe values are
#: accepted. ``PARTITION_VALUES = ESCAPED_VALUES`` (or ``SAFE_VALUES``) forces one alphabet; ``None`` detects.
SAFE_VALUES = ("a", "b", "c")
ESCAPED_VALUES: tuple[str | None, ...] = ("a%b", "x/y", "k=v", "s p", "ü€", "_x", ".", None)   # None: null
PARTITION_VALUES: tuple[str | None, ...] | None = None


def escaping_supported() -> bool:
    try:
        partition_dir(["p"], ["x/y=%"])
        return True
    except InvalidOutputSpec:
        return False


def partition_values() -> tuple[str | None, ...]:
    if PARTITION_VALUES is not None:
        return PARTITION_VALUES
    return ESCAPED_VALUES if escaping_supported() else SAFE_VALUES


# ---------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class Config:
    store: str = "memory"               # local | memory | s3 | gcs | azure | delta | iceberg (tables: local disk)
    algorithm: int | str = 1            # 1 | 2 | "magic" (S3)
    mode: str = "append"                # error | append | overwrite | dynamic
    tasks: int = 3
    partition_by: tuple[str, ...] = ("p",)
    max_rows_per_file: int | None = None
    old_data: bool = True               # files in the target before the job (not in mode error)
    values: tuple[str | None, ...] = ()   # partition value alphabet; () = partition_values()
    audit: str | None = None            # None | checks | data (a data callable) | approval (checks, then a person)

    def alphabet(self) -> tuple[str | None, ...]:
        return self.values or partition_values()

    @property
    def table_format(self) -> str | None:
        """``"delta"`` or ``"iceberg"`` for a table target, else ``None``."""
        return self.store if self.store in TABLE_STORES else None

    def code(self) -> str:
        fields = [f"{k}={getattr(self, k)!r}" for k in ("store", "algorithm", "mode", "tasks", "partition_by")]
        if self.max_rows_per_file:
            fields.append(f"max_rows_per_file={self.max_rows_per_file}")
        if not self.old_data:
            fields.append("old_data=False")
        if self.values:
            fields.append(f"values={self.values!r}")
        if self.audit:
            fields.append(f"audit={self.audit!r}")
        return f"Config({', '.join(fields)})"

    def audits(self) -> tuple[str, ...]:
        """The audits this committer takes (a data callable needs readable staged files; an approval, nothing
        visible before the job commit)."""
        return {1: ("checks", "data", "approval"), 2: ("checks",), "magic": ("checks", "approval")}[self.algorithm]

    def fitted(self) -> Config:
        """This configuration with an audit the committer takes (``checks`` instead of one it refuses)."""
        return self if self.audit in (None, *self.audits()) else replace(self, audit="checks")

    def audit_spec(self, seen: list[pa.Table] | None = None) -> Audit | None:
        """The stage's :class:`Audit`: ``ok >= 0`` as a declarative check, or the same judged by a data callable
        on the staged files (which appends what it read to *seen*: the model compares it with the winners)."""
        if self.audit is None:
            return None
        if self.audit == "data":
            return Audit(data=_data_check(seen if seen is not None else []))
        approval = Approval(timeout=timedelta(hours=1)) if self.audit == "approval" else None
        return Audit(checks=[checks.Between("ok", min=0)], approval=approval)


def random_config(rng: random.Random, store: str) -> Config:
    """A random configuration. Exploration knobs (comma-separated environment variables, never needed in CI):
    ``LIFECYCLE_MODES``, ``LIFECYCLE_ALGORITHMS``, ``LIFECYCLE_OLD_DATA=0``, ``LIFECYCLE_AUDIT=0``."""
    algorithms: list[int | str] = [1] if store in TABLE_STORES else [1, 2] + (["magic"] if store == "s3" else [])
    modes = ["error", "append", "append", "overwrite", "dynamic", "dynamic"]
    if os.environ.get("LIFECYCLE_MODES"):
        modes = os.environ["LIFECYCLE_MODES"].split(",")
    if os.environ.get("LIFECYCLE_ALGORITHMS") and store not in TABLE_STORES:
        algorithms = [int(a) if a.isdigit() else a for a in os.environ["LIFECYCLE_ALGORITHMS"].split(",")]
    mode = rng.choice(modes)
    if mode == "dynamic":
        partition_by = rng.choice([("p",), ("p",), ("p", "q")])
    else:
        partition_by = rng.choice([(), ("p",), ("p",), ("p", "q")])
    cfg = Config(store=store, algorithm=rng.choice(algorithms), mode=mode, tasks=rng.choice([2, 3, 3, 4]),
                 partition_by=partition_by, max_rows_per_file=rng.choice([None, None, 1]),
                 old_data=mode != "error" and os.environ.get("LIFECYCLE_OLD_DATA") != "0")
    audit = rng.choice([None, None, *cfg.audits()])   # an audited stage in about a third of the schedules
    return replace(cfg, audit=None if os.environ.get("LIFECYCLE_AUDIT") == "0" else audit)


# ---------------------------------------------------------------------------------------------------- target
class Target:
    """The output root of one schedule, and the two readers, independent of the committer's own listing code."""

    def __init__(self, store: str, *, bucket: str | None = None) -> None:
        self.kind = store
        tag = uuid.uuid4().hex[:12]
        self._tmp = None
        self.table: Any = None
        if store in TABLE_STORES:
            from airflow_commit_provider.protocol.tables import table_target

            self._tmp = tempfile.mkdtemp(prefix=f"lifecycle-{store}-")
            self.location = os.path.join(self._tmp, "events" if store == "delta" else "warehouse")
            self.table = table_target(store, self.location, table_name="ns.events" if store == "iceberg" else None)
            self.url = self.path = self.table.data_root
            self.fs = None
        elif store == "local":
            self._tmp = tempfile.mkdtemp(prefix="lifecycle-")
            self.url = self.path = os.path.join(self._tmp, "out")
            self.fs = None
        elif store == "memory":
            import fsspec

            self.fs = fsspec.filesystem("memory")
            self.path = f"/lc-{tag}/out"
            self.url = f"memory://{self.path}"
        elif store == "s3":
            assert bucket, "S3 targets need a bucket"
            self.fs = _reader_s3fs()
            self.path = f"{bucket}/lc-{tag}/out"
            self.url = f"s3://{self.path}"
        elif store in ("gcs", "azure"):
            from airflow_commit_provider.protocol.stores.azure import azure_filesystem
            from airflow_commit_provider.protocol.stores.gcs import gcs_filesystem

            assert bucket, f"{store} targets need a bucket"
            self.fs = gcs_filesystem() if store == "gcs" else azure_filesystem()
            self.path = f"{bucket}/lc-{tag}/out"
            self.url = f"{'gs' if store == 'gcs' else 'abfs'}://{self.path}"
        else:
            raise ValueError(f"unknown store {store!r}")

    def committer(self, cfg: Config, job_id: str = JOB) -> Any:
        if self.table is not None:
            return make_committer(self.url, job_id, algorithm=1, mode=cfg.mode, partition_by=list(cfg.partition_by),
                                  commit_threads=2, table=self.table, durable=False)
        kwargs: dict[str, Any] = {"part_size": 5 * 2**20} if cfg.algorithm == "magic" else {}
        if self.kind == "s3":
            kwargs["fs"] = _committer_s3fs()
        return make_committer(self.url, JOB, algorithm=cfg.algorithm, mode=cfg.mode,
                              partition_by=list(cfg.partition_by), commit_threads=2, **kwargs)

    def all_files(self) -> dict[str, int]:
        """Every file under the root, hidden ones included: relative path -> size."""
        out: dict[str, int] = {}
        if self.fs is None:
            for dirpath, _dirs, files in os.walk(self.path):
                rel_dir = os.path.relpath(dirpath, self.path).replace(os.sep, "/")
                for name in files:
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    try:
                        out[rel] = os.lstat(os.path.join(dirpath, name)).st_size
                    except FileNotFoundError:
                        pass
            return out
        if self.kind in OBJECT_STORES:
            self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.path, detail=True)
        except FileNotFoundError:
            return out
        prefix = self.path.rstrip("/") + "/"
        for p, info in found.items():
            p = p.lstrip("/") if self.kind in OBJECT_STORES else p
            if info.get("type") == "directory" or not p.startswith(prefix.lstrip("/") if self.kind in OBJECT_STORES
                                                                    else prefix):
                continue
            rel = p[len(prefix.lstrip("/") if self.kind in OBJECT_STORES else prefix):]
            if rel and not rel.endswith("/"):
                out[rel] = int(info.get("size") or 0)
        return out

    def holds_data(self) -> bool:
        """Whether a reader sees data (mode ``error`` refuses such a target): visible files, or the table's."""
        if self.table is not None:
            return bool(self.table_state()[0])
        return bool(self.visible())

    def table_state(self) -> tuple[list[dict[str, Any]], int | None]:
        """A table's rows as the format's own reader reads them now, and its version (Delta) or current snapshot
        id (Iceberg); ``([], None)`` before the first commit created it. The reader opens the table afresh (Iceberg:
        through a catalog of its own on the same database), sharing nothing with the committer."""
        if self.kind == "delta":
            import deltalake
            from deltalake.exceptions import TableNotFoundError

            try:
                dt = deltalake.DeltaTable(self.location)
            except TableNotFoundError:
                return [], None
            return pa.table(dt.to_pyarrow_table()).to_pylist(), dt.version()
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError

        catalog = load_catalog("commit_provider", type="sql", uri=f"sqlite:///{self.location}/catalog.db",
                               warehouse=f"file://{self.location}")
        try:
            table = catalog.load_table("ns.events")
        except NoSuchTableError:
            return [], None
        finally:
            catalog.engine.dispose()
        snapshot = table.current_snapshot()
        if snapshot is None:
            return [], None
        return table.scan().to_arrow().to_pylist(), snapshot.snapshot_id

    def visible(self, files: dict[str, int] | None = None) -> dict[str, int]:
        """Data files a reader sees: no component starting with ``_`` or ``.``."""
        files = self.all_files() if files is None else files
        return {rel: size for rel, size in files.items() if not is_hidden(rel)}

    def rows(self, partition_by: tuple[str, ...], visible: dict[str, int] | None = None) -> list[dict[str, Any]]:
        """The plain reader: pyarrow's dataset over the root, hive partitioning.

        On S3 it reads a mirror: the *visible* files fetched in one parallel ``cat`` into a private in-memory tree
        of the same names, which pyarrow then discovers and reads as it would the bucket (a third of the requests,
        and S3 schedules are bounded by moto's ~5 ms per request)."""
        fs, path = self.fs, self.path
        mirror = None
        if self.kind in OBJECT_STORES:
            import fsspec

            visible = self.visible() if visible is None else visible
            if not visible:
                return []
            data = self.fs.cat([f"{self.path}/{rel}" for rel in visible])
            fs, path = fsspec.filesystem("memory"), f"/lc-mirror-{uuid.uuid4().hex}"
            mirror = path
            for rel in visible:
                fs.pipe_file(f"{path}/{rel}", data[f"{self.path}/{rel}"])
        elif fs is None:
            if not os.path.isdir(path):
                return []
        elif not fs.exists(path):
            return []
        try:
            schema = table_schema(partition_by)
            part = ds.partitioning(pa.schema([(k, pa.string()) for k in partition_by]), flavor="hive") \
                if partition_by else None
            dataset = ds.dataset(path, schema=schema, format="parquet", partitioning=part, filesystem=fs)
            # no pyarrow threads: over a Python file system (memory, s3fs) they can outlive the interpreter and
            # abort it
            return dataset.to_table(use_threads=False).to_pylist()
        finally:
            if mirror:
                fs.rm(mirror, recursive=True)

    def marker(self, directory: str) -> dict[str, Any]:
        """``read_success_marker`` for the root (``""``) or a partition directory."""
        if self.fs is None:
            return read_success_marker(os.path.join(self.path, directory) if directory else self.path)
        sub = f"{self.path}/{directory}" if directory else self.path
        return read_success_marker(store_for(f"{self.kind}://{sub}", fs=self.fs))

    def write_file(self, rel: str, table: pa.Table) -> None:
        if self.fs is None:
            os.makedirs(os.path.dirname(os.path.join(self.path, rel)), exist_ok=True)
            pq.write_table(table, os.path.join(self.path, rel))
        else:
            with self.fs.open(f"{self.path}/{rel}", "wb") as fh:
                pq.write_table(table, fh)

    def cleanup(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        elif self.fs is not None:
            try:
                self.fs.rm(self.path.rsplit("/", 1)[0], recursive=True)
            except (FileNotFoundError, OSError):
                pass


_S3FS: dict[str, Any] = {}


def _committer_s3fs() -> Any:
    """One s3fs client per process and endpoint for the committers: s3fs's defaults (listing cache included) but a
    single retry. moto answers a part upload to an aborted upload (a magic zombie after the teardown) with 500,
    which botocore retries with back-off for seconds, where S3 answers 404 NoSuchUpload at once."""
    import s3fs

    key = f"{os.getpid()}:{os.environ.get('AWS_ENDPOINT_URL_S3', '')}"
    if key not in _S3FS:
        _S3FS[key] = s3fs.S3FileSystem(skip_instance_cache=True,
                                       config_kwargs={"retries": {"max_attempts": 2, "mode": "standard"}})
    return _S3FS[key]


def _reader_s3fs() -> Any:
    """The readers' s3fs client (one per process and endpoint): never a cached listing."""
    import s3fs

    key = f"reader:{os.getpid()}:{os.environ.get('AWS_ENDPOINT_URL_S3', '')}"
    if key not in _S3FS:
        _S3FS[key] = s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)
    return _S3FS[key]


def table_schema(partition_by: tuple[str, ...]) -> pa.Schema:
    fields = [("task", pa.int32()), ("attempt", pa.int32()), ("row", pa.int32()), ("ok", pa.int32())]
    fields += [(f"o{k}", pa.string()) for k in partition_by]   # the partition values, kept inside the file
    fields += [(k, pa.string()) for k in partition_by]
    return pa.schema(fields)


Row = tuple  # (task, attempt, row, partition values)


def make_table(rows: Iterable[Row], partition_by: tuple[str, ...]) -> pa.Table:
    rows = list(rows)
    cols: dict[str, list[Any]] = {"task": [r[0] for r in rows], "attempt": [r[1] for r in rows],
                                  "row": [r[2] for r in rows], "ok": [-1 if is_bad(r[1]) else 1 for r in rows]}
    for i, k in enumerate(partition_by):
        cols[f"o{k}"] = [r[3][i] for r in rows]
    for i, k in enumerate(partition_by):
        cols[k] = [r[3][i] for r in rows]
    return pa.table(cols, schema=table_schema(partition_by))


def is_bad(n: int) -> bool:
    """Whether try *n* writes data its stage's audit fails (``ok`` = -1 in every row): one try in six."""
    return n % 6 == 5


def _data_check(seen: list[pa.Table]) -> Callable[..., Any]:
    def ok_is_not_negative(dataset: Any) -> None:
        table = dataset.to_table()
        seen.append(table)
        bad = sorted({t for t, ok in zip(table.column("task").to_pylist(), table.column("ok").to_pylist())
                      if ok < 0})
        if bad:
            raise AuditFailed(f"ok < 0 in tasks {bad}", tasks=bad)

    return ok_is_not_negative


def try_rows(task: int, n: int, parts: Iterable[tuple[str, ...]]) -> frozenset[Row]:
    return frozenset((task, n, i * ROWS_PER_PARTITION + j, tuple(part)) for i, part in enumerate(parts)
                     for j in range(ROWS_PER_PARTITION))


# ---------------------------------------------------------------------------------------------------- model
class Violation(AssertionError):
    """The protocol did something the model forbids. *kind* is a stable name (used to shrink schedules)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"[{kind}] {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Rec:
    """A task commit record in the model: the try whose files it names, and where that try committed."""

    n: int
    origin: int


@dataclass
class Plan:
    app: int
    winners: dict[int, Rec]
    new: frozenset[Row]            # the job's rows
    target: frozenset[Row]         # the committed state once the commit is done


@dataclass
class Gen:
    """One job record's lifetime (a generation, or a run of gen 0 that a purge ended)."""

    serial: int                    # the model's count of job records
    uuid: str
    number: int
    app: int                       # current application attempt (-1: none yet, after a setup killed midway)
    records: dict[int, dict[int, Rec]] = field(default_factory=dict)
    plan: Plan | None = None
    v2: set[int] = field(default_factory=set)   # tries whose files v2 made visible at task commit
    v2_maybe: set[int] = field(default_factory=set)   # tries whose v2 files may or may not be visible (a kill)
    parts: dict[tuple[str, ...], None] = field(default_factory=dict)
    refused: dict[int, Rec] = field(default_factory=dict)   # task -> the commit an audit (or approval) refused
    audit: Verdict | None = None   # the newest audit record's verdict
    approval: str | None = None    # the answer to the newest audit's approval (None: not asked)


@dataclass(frozen=True)
class Verdict:
    """An audit record in the model: whether it passed, and exactly the commits it judged."""

    passed: bool
    winners: dict[int, Rec]
    ref: str


@dataclass
class Try:
    n: int
    task: int
    parts: tuple[tuple[str, ...], ...]
    rows: frozenset[Row]
    serial: int | None             # the job record it began under (None: no job)
    app: int | None = None
    stage: str = "new"             # new | written | closed | committed | denied | failed | noop | error
    claim: str | None = None       # the model's attempt claim: committing | failed
    files_gone: bool = False       # a committed try whose files a v2 teardown removed
    ta: Any = None
    writer: Any = None


SKIP = object()


class Killed(Exception):
    """The worker process running a protocol call was SIGKILLed (test_lifecycle_processes.py)."""


class Paused(Killed):
    """The worker process running a protocol call stopped itself at a fault point (SIGSTOP): a zombie that may be
    woken later (test_lifecycle_processes.py)."""


def step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A rule: recorded in the schedule, run, then every reader checked. A rule that does not apply in the
    current state (a replay after shrinking) returns ``SKIP`` and is not recorded."""

    def wrapper(self: Lifecycle, *args: Any, **kwargs: Any) -> Any:
        if args:
            names = fn.__code__.co_varnames[1:fn.__code__.co_argcount]
            kwargs = {**dict(zip(names, args)), **kwargs}
        self.actions.append((fn.__name__, kwargs))
        self.expect_markers = set()
        try:
            result = fn(self, **kwargs)
        except Paused:
            self.events[f"worker paused in {fn.__name__}"] += 1
            result = None
            self.after_pause(fn.__name__, kwargs)
        except Killed:
            self.events[f"worker killed in {fn.__name__}"] += 1
            result = None
            self.after_kill(fn.__name__, kwargs)
        except Violation:
            raise
        except Exception as exc:
            raise Violation(f"exception:{type(exc).__name__}@{fn.__name__}",
                            f"{exc}\n{traceback.format_exc(limit=-4)}") from exc
        finally:
            faults.disarm()
        if result is SKIP:
            self.actions.pop()
            return result
        self.steps += 1
        self.check()
        return result

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class Lifecycle:
    """One write stage on one target, its model, and the rules (see the module docstring)."""

    #: violation kinds to count instead of raising (exploration past a known violation; never in CI)
    ignore: frozenset[str] = frozenset(k for k in os.environ.get("LIFECYCLE_IGNORE", "").split(",") if k)

    def __init__(self, cfg: Config, target: Target | None = None, *, bucket: str | None = None) -> None:
        self.cfg = cfg
        self.target = target or Target(cfg.store, bucket=bucket)
        self.c = self.target.committer(cfg)
        self.actions: list[tuple[str, dict[str, Any]]] = []
        self.steps = 0
        self.events: Counter[str] = Counter()
        self.job: Gen | None = None
        self.serial = 0
        self.log_gen: int | None = None         # generation of the commit log; None: never committed
        self.log_uuid: str | None = None
        self.last_app = -1                      # newest application attempt ever (numbers keep counting)
        self.prev: frozenset[Row] = frozenset()  # the last committed generation's rows (its files get replaced)
        self.tries: dict[int, Try] = {}
        self.S: frozenset[Row] = frozenset()    # committed state: rows every reader sees when nothing is in flight
        self.expect_markers: set[str] = set()   # directories that must hold a valid _SUCCESS right now
        self.pending_plan: Plan | None = None   # what the job commit under way will do
        self.audit_tries = 0                    # the audit task's try numbers (they only grow, as Airflow's)
        self.audit_seen: list[pa.Table] = []    # what the data callable read
        if cfg.old_data and cfg.mode != "error":
            self._write_old_data()
        self.check()

    # ------------------------------------------------------------------------------------ helpers
    def _write_old_data(self) -> None:
        values, keys = self.cfg.alphabet(), self.cfg.partition_by
        old: set[Row] = set()
        for i in range(2):
            part = tuple(values[(i + j) % len(values)] for j in range(len(keys)))
            rows = [(OLD_TASK, 0, 10 * i + j, part) for j in range(2)]
            old.update(rows)
            if self.target.table is not None:
                continue
            rel = f"old-{i:02d}.parquet"
            if keys:
                rel = f"{partition_dir(keys, part)}/{rel}"
            self.target.write_file(rel, make_table(rows, keys).drop_columns(list(keys)))
        if self.target.table is not None:   # an earlier job's table commit (in append mode: it only adds)
            c = self.target.committer(replace(self.cfg, mode="append"), OLD_JOB)
            c.setup_job()
            run_task_attempt(c, 0, 1, lambda w: w.write(make_table(sorted(old, key=repr), keys)))
            c.commit_job(1)
        self.S = frozenset(old)

    def dispose(self) -> None:
        """Close what is still open and remove the target."""
        for t in self.tries.values():
            if t.writer is not None and t.stage in ("new", "written"):
                with contextlib.suppress(Exception):
                    t.writer.close()
        self.target.cleanup()

    def winner(self, task: int) -> Rec | None:
        """What recovery picks: the current application attempt's record, else the newest earlier one."""
        job = self.job
        if job is None:
            return None
        for app in sorted(job.records, reverse=True):
            if app <= job.app and task in job.records[app]:
                rec = job.records[app][task]
                # an audit's refusal stops the commit's adoption into a later application attempt, not its own
                return None if app != job.app and job.refused.get(task) == rec else rec
        return None

    def rows_of(self, recs: Iterable[Rec]) -> frozenset[Row]:
        return frozenset(r for rec in recs for r in self.tries[rec.n].rows)

    def _fail(self, kind: str, detail: str) -> None:
        if any(kind.startswith(prefix) for prefix in self.ignore):
            self.events[f"ignored: {kind}"] += 1
            return
        raise Violation(kind, detail)

    def _expect(self, cond: bool, kind: str, detail: str) -> None:
        if not cond:
            self._fail(kind, detail)

    def live_tries(self, serial: int | None = None) -> list[Try]:
        return [t for t in self.tries.values() if serial is None or t.serial == serial]

    def part_of(self, row: Row) -> str:
        return partition_dir(self.cfg.partition_by, row[3]) if self.cfg.partition_by else ""

    def target_after(self, new: frozenset[Row]) -> frozenset[Row]:
        """The committed state after a job commit whose rows are *new* (the mode's rule)."""
        mode, base = self.cfg.mode, self.S - self.prev    # a generation's commit replaces the previous one's files
        if mode in ("overwrite", "error"):
            return new
        if mode == "dynamic":
            written = {self.part_of(r) for r in new}
            return frozenset(r for r in base if self.part_of(r) not in written) | new
        return base | new

    def after_kill(self, rule: str, kwargs: dict[str, Any]) -> None:
        """A worker died in the middle of *rule*: bring the model in line with what the store shows."""
        raise NotImplementedError("in-process schedules have no workers to kill")

    def after_pause(self, rule: str, kwargs: dict[str, Any]) -> None:
        """A worker stopped itself in the middle of *rule*: what it did so far, as after a kill; it may wake."""
        raise NotImplementedError("in-process schedules have no workers to pause")

    # ------------------------------------------------------------------------------------ protocol calls
    # Every call the rules make goes through these, in this process; test_lifecycle_processes.py runs them in
    # worker processes instead, which it SIGKILLs.
    def call_setup_job(self) -> Any:
        return self.c.setup_job()

    def call_recover(self, t: Try) -> dict[str, Any] | None:
        return self.c.recover_task(t.task)

    def call_setup_task(self, t: Try) -> tuple[int, str]:
        t.ta = self.c.setup_task(t.task, t.n)
        t.writer = TaskAttemptWriter(self.c, t.ta, partition_by=self.cfg.partition_by,
                                     max_rows_per_file=self.cfg.max_rows_per_file)
        return t.ta.app_attempt, t.ta.job_uuid

    def call_write(self, t: Try) -> None:
        t.writer.write(make_table(sorted(t.rows, key=repr), self.cfg.partition_by))

    def call_close(self, t: Try) -> None:
        t.writer.close()

    def call_commit(self, t: Try) -> tuple[str, Any]:
        """``("committed", record)``, ``("denied", CommitDenied)`` or ``("gone", JobAlreadyCommitted |
        JobNotSetUp)``."""
        w = t.writer
        kwargs = {"sizes": w.sizes} if getattr(w, "sizes", None) is not None else {}
        if self.cfg.audit:   # what run_task_attempt passes: the audit judges the statistics
            kwargs.update(schema=w.schema, stats=w.stats)
        try:
            return "committed", self.c.commit_task(t.ta, w.rows, **kwargs)
        except CommitDenied as denied:
            return "denied", denied
        except (JobAlreadyCommitted, JobNotSetUp) as exc:
            return "gone", exc

    def call_abort_task(self, t: Try, close_first: bool = False) -> bool:
        if close_first:
            with contextlib.suppress(Exception):   # run_task_attempt's `with writer` closes it
                t.writer.close()
        return self.c.abort_task(t.ta)

    def call_abort_job(self, purge: bool) -> dict[str, Any]:
        return self.c.abort_job(keep_committed=not purge)

    def call_commit_job(self, point: str | None = None, nth: int = 1) -> dict[str, Any]:
        """The job commit, dying (``InjectedFault``) at the *nth* time it reaches *point*."""
        if point:
            faults.arm(point, "raise", nth)
        spec = self.cfg.audit_spec()
        gate = None if spec is None else AuditGate(spec.digest(), approval=spec.approval is not None)
        try:
            return self.c.commit_job(self.cfg.tasks, gate=gate)
        finally:
            faults.disarm()

    def call_audit(self, attempt: int, point: str | None = None, nth: int = 1) -> Any:
        """Try *attempt* of the audit task (``run_audit``), dying at the *nth* time it reaches *point*."""
        if point:
            faults.arm(point, "raise", nth)
        try:
            return run_audit(self.c.job, self.cfg.audit_spec(self.audit_seen), self.cfg.tasks, attempt)
        finally:
            faults.disarm()

    def call_approve(self, answer: str) -> None:
        """The approval task: asks for the newest audit's approval, then records *answer*."""
        request_approval(self.c.job, None, None)
        decide_approval(self.c.job, answer, "approver" if answer == "approved" else None, answer)

    # ------------------------------------------------------------------------------------ rules
    @step
    def setup(self) -> None:
        """The setup task runs (first run, setup retry, or a clear of the whole run)."""
        job = self.job
        fresh = job is None
        if fresh and self.cfg.mode == "error" and self.log_gen is None and self.target.holds_data():
            try:
                self.call_setup_job()
            except InvalidOutputSpec:
                self.events["setup refused: target not empty"] += 1
                return
            self._fail("setup", "mode error: setup accepted a target holding data")
        ctx = self.call_setup_job()
        if fresh:
            number = 0 if self.log_gen is None else self.log_gen + 1
            self._expect(ctx.state == "running" and ctx.generation == number, "setup",
                         f"new job record: expected generation {number} running, got {ctx}")
            self.serial += 1
            self.job = Gen(self.serial, ctx.job_uuid, ctx.generation, ctx.app_attempt)
            self.events["setup: new generation" if number else "setup: new job"] += 1
        elif job.plan is not None:
            self._expect(ctx.state == "committing" and ctx.app_attempt == job.plan.app, "setup",
                         f"setup during a job commit must change nothing: got {ctx}")
            self.events["setup while committing"] += 1
        else:
            self._expect(ctx.state == "running" and ctx.app_attempt > job.app and ctx.job_uuid == job.uuid,
                         "setup", f"expected application attempt > {job.app} of {job.uuid}, got {ctx}")
            job.app = ctx.app_attempt
            self.events["setup: next application attempt"] += 1
        self.last_app = max(self.last_app, ctx.app_attempt)

    @step
    def start(self, n: int, task: int, parts: list[list[str]] | list[tuple[str, ...]]) -> None:
        """Try *n* of task *task* begins: recovery first, else ``setup_task``."""
        if n in self.tries or task >= self.cfg.tasks or any(t.n > n for t in self.tries.values() if t.task == task):
            return SKIP   # try numbers only grow
        width = len(self.cfg.partition_by)
        parts_t = tuple(dict.fromkeys(tuple(p)[:width] for p in parts)) if width else ((),)
        t = Try(n, task, parts_t, try_rows(task, n, parts_t), self.job.serial if self.job else None)
        self.tries[n] = t
        job = self.job
        try:
            rec = self.call_recover(t)
        except JobAlreadyCommitted:
            self._expect(job is None and self.log_gen is not None, "recover",
                         "recover_task said the job committed, but it did not")
            t.stage = "noop"
            self.events["start after job commit: already committed"] += 1
            return
        except JobNotSetUp:
            self._expect((job is None and self.log_gen is None) or (job is not None and job.app < 0), "recover",
                         "recover_task said the job is not set up, but it is")
            t.stage = "noop"
            return
        self._expect(job is not None, "recover", f"recover_task answered {rec} for a job that is "
                     f"{'committed' if self.log_gen is not None else 'absent'}")
        expected = self.winner(task)
        got = None if rec is None else rec["attempt"]
        self._expect((expected and expected.n) == got, "recover",
                     f"task {task}: recovery gave try {got}, the model says {expected and expected.n}")
        if rec is not None:
            self._expect(rec["app_attempt"] == job.app, "recover", f"record not in the current attempt: {rec}")
            job.records.setdefault(job.app, {})[task] = expected
            t.stage = "noop"
            self.events["start: recovered" if expected.origin != job.app else "start: already committed"] += 1
            return
        app, job_uuid = self.call_setup_task(t)
        self._expect(app == job.app and job_uuid == job.uuid, "setup_task",
                     f"try {n} set up in application attempt {app}, the model says {job.app}")
        # I10: setup_task records every earlier try of the task in this application attempt as failed, unless it
        # committed or is already recorded
        for other in self.tries.values():
            if other.task == task and other.serial == job.serial and other.app == job.app and other.n != n \
                    and other.claim is None:
                other.claim = "failed"
        t.app = app
        self.events["start: runs"] += 1

    def dead(self, t: Try) -> bool:
        """The try can no longer commit: recorded failed, or its job record is gone or replaced."""
        return t.claim == "failed" or self.job is None or t.serial != self.job.serial

    def _write_step(self, t: Try, action: Callable[[], Any], stage: str) -> None:
        """A write or close of try *t*. A dead try's may fail (magic: the teardown or job commit aborted its pending
        uploads, and the next part upload is refused): that zombie then dies as ``run_task_attempt`` makes it."""
        try:
            action()
        except Killed:
            raise
        except Exception as exc:
            if not self.dead(t):
                raise
            self.events[f"zombie {stage} failed: {type(exc).__name__}"] += 1
            t.stage = "error"
            with contextlib.suppress(Exception):
                self.call_abort_task(t)
            return
        t.stage = stage

    @step
    def write(self, n: int) -> None:
        """Try *n*'s user code writes its rows."""
        t = self.tries.get(n)
        if t is None or t.stage != "new":
            return SKIP
        self._write_step(t, lambda: self.call_write(t), "written")

    @step
    def close(self, n: int) -> None:
        """Try *n*'s writer closes its files."""
        t = self.tries.get(n)
        if t is None or t.stage != "written":
            return SKIP
        self._write_step(t, lambda: self.call_close(t), "closed")

    def _predict_commit(self, t: Try) -> tuple[str, Rec | None]:
        """``("commit", None)``, ``("winner", rec)``, ``("failed", None)``, ``("stale", None)`` or ``("missing",
        None)`` (the files the writer reported are not there: the commit is refused, the try recorded failed)."""
        job = self.job
        if job is None or t.serial != job.serial:
            return "stale", None
        if job.plan is not None:
            rec = job.records.get(job.plan.app, {}).get(t.task)
            if rec is not None and rec.n == t.n and job.plan.app == t.app:
                return "commit", None
            return ("winner", rec) if t.app == job.app else ("stale-or-winner", rec)
        if t.app != job.app:
            return "stale", None
        if t.claim == "failed":
            return "failed", None
        if t.files_gone:
            return "missing", None
        rec = job.records.get(job.app, {}).get(t.task)
        if rec is not None and rec.n != t.n:
            return "winner", rec
        return "commit", None

    @step
    def commit(self, n: int) -> None:
        """Try *n* asks to commit (``commit_task``)."""
        t = self.tries.get(n)
        if t is None or t.stage != "closed":
            return SKIP
        expect, winner = self._predict_commit(t)
        got, value = self.call_commit(t)
        job = self.job
        label = f"try {n} of task {t.task} (application attempt {t.app})"
        if expect == "commit":
            if got != "committed":
                self._fail(f"commit_task: expected commit, got {got}", f"{label}: {value}")
            rec = value
            self._expect(rec["attempt"] == n, "commit_task: record", f"{label}: record names try {rec['attempt']}")
            rows = sum(f.get("rows") or 0 for f in rec["files"])
            self._expect(rows == len(t.rows), "commit_task: record rows",
                         f"{label} wrote {len(t.rows)} rows, its record holds {rows} in {len(rec['files'])} files")
            t.stage, t.claim = "committed", "committing"
            job.records.setdefault(job.app, {})[t.task] = Rec(n, job.app)
            if self.cfg.algorithm == 2:
                # the task's refused commit (an audit's) is replaced file by file: its rows may linger until the
                # job commit sweeps what this try did not write again
                job.v2_maybe.update(m for m in job.v2 if self.tries[m].task == t.task)
                job.v2.add(n)
            self.events["commit: committed"] += 1
            return
        if got == "committed":
            self._fail(f"commit_task: expected {expect}, got committed",
                       f"{label} committed ({len(value['files'])} files); the model says {expect}"
                       + (f" (winner try {winner.n})" if winner else ""))
        if expect in ("stale", "stale-or-winner"):
            ok = got == "gone" or (got == "denied" and (value.winner is None or (
                expect == "stale-or-winner" and value.winner["attempt"] == winner.n)))
            self._expect(ok, "commit_task: stale try", f"{label}: expected a denial without winner, got {value!r}")
            self.events["commit: zombie of an older attempt/generation denied"] += 1
        elif expect in ("failed", "missing"):
            self._expect(got == "denied" and value.winner is None and value.attempt_failed,
                         "commit_task: failed try", f"{label}: expected CommitDenied(attempt_failed=True, "
                         f"winner=None), got {got} {value!r} winner={getattr(value, 'winner', None)}")
            self.events["commit: try recorded failed denied"] += 1
        else:
            self._expect(got == "denied" and value.winner is not None and winner is not None
                         and value.winner["attempt"] == winner.n, "commit_task: loser",
                         f"{label}: expected a denial naming try {winner and winner.n}, got {got} {value!r} "
                         f"winner={getattr(value, 'winner', None)}")
            t.claim = t.claim or "committing"
            self.events["commit: denied, another try won"] += 1
        t.stage = "denied"
        if got == "gone":   # run_task_attempt aborts the try on any error other than CommitDenied
            self.call_abort_task(t)

    @step
    def fail(self, n: int) -> None:
        """Try *n*'s user code raises; ``run_task_attempt`` calls ``abort_task``."""
        t = self.tries.get(n)
        if t is None or t.stage not in ("new", "written", "closed"):
            return SKIP
        result = self.call_abort_task(t, close_first=t.stage != "closed")
        job = self.job
        if job is not None and t.serial == job.serial:
            expected = t.claim != "committing"
            self._expect(result == expected, "abort_task", f"try {n}: abort_task returned {result}, expected "
                         f"{expected} (claim {t.claim})")
            t.claim = t.claim or "failed"
        t.stage = "failed"
        self.events["fail: try aborted"] += 1

    @step
    def recommit(self, n: int) -> None:
        """Try *n* committed and asks again (``commit_task`` is documented to return the record to a winner)."""
        t = self.tries.get(n)
        if t is None or t.stage != "committed":
            return SKIP
        expect, _winner = self._predict_commit(t)
        got, value = self.call_commit(t)
        if expect == "commit":
            self._expect(got == "committed" and value["attempt"] == n, "recommit",
                         f"try {n} asked again as the winner: {got} {value!r}")
        elif expect == "missing":
            self._expect(got == "denied" and value.winner is None, "recommit: files gone",
                         f"try {n}, whose files a v2 teardown removed, asked again: {got} "
                         f"{value if got != 'committed' else value['files']!r}")
            t.claim = "failed"
        else:
            self._expect(got != "committed" or value["attempt"] == n, "recommit",
                         f"try {n} asked again: {got} {value!r}")
        self.events[f"recommit: {expect}"] += 1

    @step
    def teardown(self, purge: bool = False) -> None:
        """The teardown task after a failed run: ``abort_job(keep_committed=not purge)``."""
        result = self.call_abort_job(purge)
        job = self.job
        if job is None:
            self._expect(not result["aborted"], "teardown", f"no job, but abort_job says {result}")
            return
        if job.plan is not None:
            self._expect(not result["aborted"] and result["state"] == "committing", "teardown",
                         f"abort_job during a job commit must refuse: {result}")
            self.events["teardown refused: committing"] += 1
            return
        self._expect(result["aborted"], "teardown", f"abort_job did not abort: {result}")
        for t in self.tries.values():   # I10: every uncommitted try of the job is recorded failed first
            if t.serial == job.serial and t.app is not None and t.claim is None:
                t.claim = "failed"
        if self.cfg.algorithm == 2:   # v2 withdraws its task commits: recorded failed, record and files removed
            for n in job.v2 | job.v2_maybe:
                self.tries[n].files_gone = True
                self.tries[n].claim = "failed"
            job.records, job.v2, job.v2_maybe = {}, set(), set()
        if purge:
            job.records = {}
            self.job = None
            self.events["teardown: purge"] += 1
        else:
            self.events["teardown: keep committed"] += 1

    @step
    def commit_job(self, point: str | None = None, nth: int = 1) -> None:
        """The commit task (dying at *point* the *nth* time it is reached, when given)."""
        job = self.job
        if job is None or job.app < 0:   # no job; or (a killed setup) a job record without application attempt
            try:
                manifest = self.call_commit_job()
            except JobNotSetUp:
                self._expect(self.log_gen is None or job is not None, "commit_job",
                             "JobNotSetUp, but the job committed before")
                return
            self._expect(job is None, "commit_job", "committed a job that has no application attempt")
            self._expect(self.log_gen is not None and manifest["job_uuid"] == self.log_uuid, "commit_job",
                         f"commit_job without a job returned {manifest.get('job_uuid')}")
            return   # the committed generation's manifest; its _SUCCESS may since have been withdrawn (I9)
        plan = job.plan
        if plan is None:
            winners = {t: self.winner(t) for t in range(self.cfg.tasks)}
            missing = sorted(t for t, w in winners.items() if w is None)
            for task, rec in winners.items():   # job commit adopts every recoverable task first
                if rec is not None:
                    job.records.setdefault(job.app, {})[task] = rec
            if missing:
                try:
                    self.call_commit_job()
                except JobIncomplete as exc:
                    self._expect(sorted(exc.missing) == missing, "commit_job: incomplete",
                                 f"missing {exc.missing}, the model says {missing}")
                    self.events["commit_job refused: incomplete"] += 1
                    return
                except Killed:
                    raise
                except Exception as exc:  # noqa: BLE001 - any other outcome is the finding
                    self._fail(f"commit_job: {type(exc).__name__}", f"expected JobIncomplete {missing}: {exc}")
                    return
                self._fail("commit_job: committed incomplete", f"tasks {missing} have no committed try")
            refusal = self._gate_refusal(winners)
            if refusal is not None:
                try:
                    self.call_commit_job()
                except AuditFailed:
                    self.events[f"commit_job refused: {refusal}"] += 1
                    return
                except Killed:
                    raise
                except Exception as exc:  # noqa: BLE001 - any other outcome is the finding
                    self._fail(f"commit_job: {type(exc).__name__}", f"expected AuditFailed ({refusal}): {exc}")
                    return
                self._fail("commit_job: committed unaudited", f"the job committed, but {refusal}")
            new = self.rows_of(winners.values())
            plan = Plan(job.app, dict(winners), new, self.target_after(new))
        self.pending_plan = plan
        try:
            manifest = self.call_commit_job(point, nth)
        except faults.InjectedFault:
            state = _STATE_AFTER.get(point, "committing")
            self.events[f"commit_job died at {point}"] += 1
            if state == "running":
                return
            if state == "committing":
                job.plan = plan
                return
            manifest = None
        except Killed:
            raise
        except Exception as exc:  # noqa: BLE001 - any other outcome is the finding
            self._fail(f"commit_job: {type(exc).__name__}", f"expected the commit to succeed: {exc}")
        finally:
            faults.disarm()
        self.committed(plan, manifest)

    def _gate_refusal(self, winners: dict[int, Rec | None]) -> str | None:
        """Why an audited stage's job commit refuses these winners (``None``: it commits)."""
        job = self.job
        if self.cfg.audit is None:
            return None
        if job.audit is None:
            return "no audit"
        if not job.audit.passed:
            return "the audit failed"
        if job.audit.winners != winners:
            return "the audit judged other commits"
        if self.cfg.audit == "approval" and job.approval != "approved":
            return f"approval {job.approval or 'not asked'}"
        return None

    @step
    def audit(self, point: str | None = None, nth: int = 1) -> None:
        """The audit task (an audited stage), dying at *point* the *nth* time it is reached, when given."""
        if self.cfg.audit is None:
            return SKIP
        self.audit_tries += 1
        attempt, job = self.audit_tries, self.job
        if job is None or job.app < 0 or job.plan is not None:
            # none set up, committed (the commit's verdict is returned), or committing (its plan's verdict)
            try:
                rec = self.call_audit(attempt)
            except JobNotSetUp:
                self._expect(job is None and self.log_gen is None or job is not None and job.app < 0, "audit",
                             "JobNotSetUp, but the job was set up")
                return
            self._expect(rec.passed and (job is not None or self.log_gen is not None), "audit",
                         f"an audit with nothing to judge returned {rec}")
            self.events["audit: the commit's verdict"] += 1
            return
        winners = {t: self.winner(t) for t in range(self.cfg.tasks)}
        missing = sorted(t for t, w in winners.items() if w is None)
        for task, rec in winners.items():   # the audit runs the job commit's recovery first
            if rec is not None:
                job.records.setdefault(job.app, {})[task] = rec
        if missing:
            try:
                self.call_audit(attempt)
            except JobIncomplete as exc:
                self._expect(sorted(exc.missing) == missing, "audit: incomplete",
                             f"missing {exc.missing}, the model says {missing}")
                self.events["audit refused: incomplete"] += 1
                return
            self._fail("audit: judged incomplete", f"tasks {missing} have no committed try")
        bad = sorted(t for t, r in winners.items() if is_bad(r.n))
        self.audit_seen.clear()
        try:
            rec = self.call_audit(attempt, point, nth)
        except faults.InjectedFault:
            self.events[f"audit died at {point}"] += 1
            if point != "audit.after_recovery":   # it refused the blamed tasks before its record
                job.refused.update({t: winners[t] for t in bad})
            if point == "audit.after_record":
                job.audit, job.approval = Verdict(not bad, dict(winners), f"{job.app}.{attempt}"), None
            return
        judged = {str(t): f"{r.origin}.{r.n}" for t, r in winners.items()}
        self._expect(rec.tasks == judged, "audit: commits", f"judged {rec.tasks}, the model says {judged}")
        self._expect(rec.passed == (not bad) and (rec.blamed or []) == bad, "audit: verdict",
                     f"passed={rec.passed} blamed={rec.blamed}; the model says bad tasks {bad}")
        if self.audit_seen:   # the data callable read exactly the winners' rows
            table = self.audit_seen[-1]
            keys = self.cfg.partition_by
            read = Counter((r["task"], r["attempt"], r["row"], tuple(r[f"o{k}"] for k in keys))
                           for r in table.to_pylist())
            want = self.rows_of(winners.values())
            self._expect(set(read) == want and max(read.values(), default=1) == 1, "audit: staged dataset",
                         f"read {len(read)} rows ({sorted(set(read) - want, key=repr)[:4]} not the winners'), "
                         f"the winners wrote {len(want)} ({sorted(want - set(read), key=repr)[:4]} not read)")
            self.events["audit: the data callable read the winners' rows"] += 1
        job.refused.update({t: winners[t] for t in bad})
        job.audit, job.approval = Verdict(not bad, dict(winners), f"{job.app}.{attempt}"), None
        self.events[f"audit: {'failed' if bad else 'passed'}"] += 1

    @step
    def approve(self, answer: str = "approved") -> None:
        """The approval task of an audited stage that asks for one: asks, and records *answer*."""
        job = self.job
        if self.cfg.audit != "approval" or job is None or job.app < 0:
            return SKIP
        if job.audit is None or not job.audit.passed:
            try:
                self.call_approve(answer)
            except AuditFailed:
                self.events["approve refused: no passing audit"] += 1
                return
            self._fail("approve", f"asked to approve {'no audit' if job.audit is None else 'a failed audit'}")
        self.call_approve(answer)
        job.approval = answer
        if answer != "approved":   # every audited task's commit in the current application attempt is refused
            current = job.records.get(job.app, {})
            job.refused.update({t: current[t] for t in job.audit.winners if t in current})
        self.events[f"approve: {answer}"] += 1

    def committed(self, plan: Plan, manifest: dict[str, Any] | None) -> None:
        """The job commit of *plan* is done: its target is the committed state."""
        job = self.job
        assert job is not None
        if manifest is not None and self.cfg.audit is not None:
            ref = (manifest.get("audit") or {}).get("ref")
            self._expect(job.audit is not None and ref == job.audit.ref, "commit_job: audit",
                         f"_SUCCESS names audit {ref}, the model's newest is {job.audit and job.audit.ref}")
        if manifest is not None:
            tasks = {t["task"]: t["attempt"] for t in manifest["tasks"]}
            self._expect(tasks == {t: r.n for t, r in plan.winners.items()}, "commit_job: winners",
                         f"committed {tasks}, the model says {({t: r.n for t, r in plan.winners.items()})}")
        self.S = plan.target
        self.prev = plan.new
        self.log_gen, self.log_uuid = job.number, job.uuid
        self.job = None
        self.expect_markers = {""} | ({self.part_of(r) for r in plan.new} if self.cfg.mode == "dynamic" else set())
        self.events["commit_job: committed"] += 1

    # ------------------------------------------------------------------------------------ checks
    def expected_rows(self) -> tuple[frozenset[Row], frozenset[Row]]:
        """(rows that must be visible, rows that may be visible)."""
        job = self.job
        if job is None:
            return self.S, self.S
        v2 = frozenset(r for n in job.v2 - job.v2_maybe for r in self.tries[n].rows)
        maybe = frozenset(r for n in job.v2_maybe for r in self.tries[n].rows)
        now = self.S | v2
        if job.plan is None:
            return now, now | maybe
        return now & job.plan.target, now | maybe | job.plan.new

    def check(self) -> None:
        if self.target.table is not None:
            self.check_table()
            return
        files = self.target.all_files()
        visible = self.target.visible(files)
        rows = self.target.rows(self.cfg.partition_by, visible)
        keys = self.cfg.partition_by
        seen: Counter[Row] = Counter()
        for r in rows:
            part = tuple(r[k] for k in keys)
            if part != tuple(r[f"o{k}"] for k in keys):
                self._fail("partition-value", f"row {r}: the reader's partition values differ from the written ones")
            seen[(r["task"], r["attempt"], r["row"], part)] += 1
        dupes = {k: c for k, c in seen.items() if c > 1}
        self._expect(not dupes, "duplicate-rows", f"rows seen more than once: {sorted(dupes, key=repr)[:6]}")
        must, may = self.expected_rows()
        got = frozenset(seen)
        if not (must <= got <= may):
            lost, extra = sorted(must - got, key=repr), sorted(got - may, key=repr)
            self._fail("rows", f"lost {len(lost)} rows {lost[:6]}; unexpected {len(extra)} rows {extra[:6]} "
                       f"(state: {self._state()})")
        markers = sorted(head for head, _, name in (rel.rpartition("/") for rel in files)
                         if name == "_SUCCESS" and not is_hidden(head))
        for d in self.expect_markers:
            self._expect(d in markers, "marker-missing", f"no _SUCCESS in {d or 'the root'} after the job commit")
        for d in markers:
            self._check_marker(d, visible)

    def check_table(self) -> None:
        """A table target: the format's reader sees exactly the committed state, or during a job commit exactly the
        state before or after its transaction; the root ``_SUCCESS``, when there is one, names the table's current
        version."""
        try:
            rows, version = self.target.table_state()
        except Exception as exc:  # noqa: BLE001 - a table its own reader cannot read is the finding
            self._fail(f"table-unreadable:{type(exc).__name__}", f"{exc} (state: {self._state()})")
            return
        keys = self.cfg.partition_by
        seen: Counter[Row] = Counter()
        for r in rows:
            part = tuple(r[k] for k in keys)
            if part != tuple(r[f"o{k}"] for k in keys):
                self._fail("partition-value", f"row {r}: the table's partition values differ from the written ones")
            seen[(r["task"], r["attempt"], r["row"], part)] += 1
        dupes = {k: c for k, c in seen.items() if c > 1}
        self._expect(not dupes, "duplicate-rows", f"rows seen more than once: {sorted(dupes, key=repr)[:6]}")
        got = frozenset(seen)
        job = self.job
        allowed = [self.S] + ([job.plan.target] if job is not None and job.plan is not None else [])
        if got not in allowed:
            lost, extra = sorted(allowed[-1] - got, key=repr), sorted(got - allowed[0], key=repr)
            self._fail("rows", f"the table holds neither the state before nor after the job commit: lost "
                       f"{len(lost)} rows {lost[:6]}; unexpected {len(extra)} rows {extra[:6]} (state: {self._state()})")
        if "" in self.expect_markers or self.target.all_files().get("_SUCCESS") is not None:
            try:
                doc = self.target.marker("")
            except FileNotFoundError:
                self._expect("" not in self.expect_markers, "marker-missing", "no _SUCCESS after the job commit")
                return
            except CorruptRecord as exc:
                self._fail("marker-corrupt", f"_SUCCESS: {exc}")
                return
            table = doc.get("table") or {}
            named = table.get("version", table.get("snapshot_id"))
            self._expect(named == version, "marker-lies:table-version",
                         f"_SUCCESS of job {doc.get('job_id')} generation {doc.get('generation')} names "
                         f"{named}, the table is at {version} (state: {self._state()})")

    def _check_marker(self, d: str, visible: dict[str, int]) -> None:
        try:
            doc = self.target.marker(d)
        except CorruptRecord as exc:
            self._fail("marker-corrupt", f"_SUCCESS in {d or 'the root'}: {exc}")
        except FileNotFoundError:
            return
        listed: dict[str, int | None] = {}
        for f in list(doc["files"]) + list(doc.get("retained") or []):
            path, size = (f["path"], f.get("size")) if isinstance(f, dict) else (f, None)
            self._expect(path not in listed, "marker-lies:twice", f"_SUCCESS in {d or 'the root'} lists {path} twice")
            listed[path] = size
        under = {p: s for p, s in visible.items() if not d or p.startswith(d + "/")}
        unlisted = set(under) - set(listed)
        missing = set(listed) - set(under)
        resized = {p for p in set(listed) & set(under) if listed[p] is not None and listed[p] != under[p]}
        wrong = unlisted | missing | resized
        if wrong:
            what = "unlisted" if unlisted else "missing" if missing else "size"
            kind = f"marker-lies:{'partition' if d else 'root'}:{what}:{self._state().split()[0]}"
            self._fail(kind, f"_SUCCESS in {d or 'the root'} (job {doc.get('job_uuid')}, mode "
                       f"{doc.get('mode')}) lists {len(listed)} files, {len(under)} are visible; not listed: "
                       f"{sorted(set(under) - set(listed))[:4]}, listed but not visible (or other size): "
                       f"{sorted(p for p in wrong if p in listed)[:4]} (state: {self._state()})")

    def _state(self) -> str:
        job = self.job
        if job is None:
            return "committed" if self.log_gen is not None else "absent"
        return f"{'committing' if job.plan else 'running'} gen {job.number} app {job.app}"


# ---------------------------------------------------------------------------------------------------- open bugs
def _did(result: Result, rule: str) -> bool:
    return any(name == rule for name, _ in result.actions)


#: Violations found by these schedules and not fixed yet, each with how to recognise a random schedule that hits it
#: (its pinned minimal schedule is an xfail(strict=True) test). Remove an entry when its fix lands. 2127eed fixed
#: the two found at 3f3371f, and issue 19 the one found at 34b2158, which were recognised by:
#:
#:   "v2-teardown-keeps-adopted-record": lambda r: r.cfg.algorithm == 2 and _did(r, "teardown")
#:       and r.violation.kind in ("recover", "commit_job: incomplete", "commit_job: CorruptRecord"),
#:   "stale-winner-reask-deletes-committed-data": lambda r: r.cfg.store != "local" and r.cfg.algorithm != 2
#:       and _did(r, "recommit") and r.violation.kind == "commit_job: CorruptRecord",
#:   "v2-teardown-stray-blocks-rerun": lambda r: r.cfg.algorithm == 2 and _did(r, "teardown")
#:       and r.violation.kind == "exception:InvalidOutputSpec@commit" and "would replace" in r.violation.detail,
KNOWN_OPEN: dict[str, Callable[[Result], bool]] = {}


def known_open(result: Result) -> str | None:
    """The name of the known open bug *result*'s violation is, if it is one."""
    return next((name for name, hit in KNOWN_OPEN.items() if hit(result)), None)


# ---------------------------------------------------------------------------------------------------- driver
@dataclass
class Result:
    seed: int
    cfg: Config
    steps: int
    actions: list[tuple[str, dict[str, Any]]]
    events: Counter[str]
    violation: Violation | None = None


class Driver:
    """Picks rules at random, weighted towards the sequences that matter, from the model's state."""

    def __init__(self, h: Lifecycle, rng: random.Random) -> None:
        self.h, self.rng = h, rng
        self.next_n = 1
        self.pool: tuple[tuple[str, ...], ...] = ()
        self._new_pool()

    def _new_pool(self) -> None:
        """The partitions this generation's tries write into (a re-run may write fewer)."""
        cfg, rng = self.h.cfg, self.rng
        if not cfg.partition_by:
            self.pool = ((),)
            return
        values = cfg.alphabet()
        combos = sorted({tuple(rng.choice(values) for _ in cfg.partition_by) for _ in range(4)}, key=repr)
        self.pool = tuple(rng.sample(combos, rng.randint(1, len(combos))))

    def parts(self) -> list[list[str]]:
        return [list(p) for p in self.rng.sample(self.pool, self.rng.randint(1, min(2, len(self.pool))))]

    def start(self, task: int | None = None) -> int:
        n = self.next_n
        self.next_n += self.rng.choice([1, 1, 2])
        self.h.start(n, task if task is not None else self.rng.randrange(self.h.cfg.tasks), self.parts())
        return n

    def run_try(self, task: int | None = None, upto: str = "commit") -> None:
        n = self.start(task)
        if upto == "start" or n not in self.h.tries:
            return
        for stage in ("write", "close", "commit"):
            if self.h.tries[n].stage in ("noop", "error") or (stage == "commit" and upto != "commit"):
                return
            getattr(self.h, stage)(n)
            if stage == upto:
                return

    def commit_job(self) -> None:
        if self.rng.random() < 0.5:
            points = TABLE_COMMIT_POINTS if self.h.cfg.table_format else COMMIT_POINTS
            self.h.commit_job(self.rng.choice(points), self.rng.choice([1, 1, 2, 3]))
        else:
            self.h.commit_job()

    def audit(self) -> None:
        """The audit task, dying at one of its points about one time in three; then, when the stage asks for
        one, the approval (approved nine times in ten)."""
        if self.h.cfg.audit is None:
            return
        if self.rng.random() < 0.3:
            self.h.audit(self.rng.choice(AUDIT_POINTS), 1)
        else:
            self.h.audit()
        if self.h.cfg.audit == "approval" and self.rng.random() < 0.9:
            self.h.approve("approved" if self.rng.random() < 0.9 else self.rng.choice(["rejected", "timed_out"]))

    def setup(self) -> None:
        new_gen = self.h.job is None
        self.h.setup()
        if new_gen and self.h.cfg.mode == "dynamic" and self.rng.random() < 0.7:
            self._new_pool()

    def one(self) -> None:
        h, rng = self.h, self.rng
        open_tries = [t for t in h.tries.values() if t.stage in ("new", "written", "closed")]
        committed = [t for t in h.tries.values() if t.stage == "committed"]
        if h.job is None and h.log_gen is None and rng.random() < 0.9:
            self.setup()
            return
        choices: list[tuple[float, Callable[[], None]]] = [
            (3.0, lambda: self.run_try()),
            (1.5, lambda: self.run_try(upto=rng.choice(["start", "write", "close"]))),
            (1.0, self.setup),
            (1.5, self.commit_job),
            (1.0, lambda: self.h.teardown(purge=rng.random() < 0.2)),
            (1.0, self.clear_all),
            (1.0, self.clear_failed),
        ]
        if open_tries:
            choices.append((4.0, lambda: self.advance(rng.choice(open_tries))))
            choices.append((0.7, lambda: self.h.fail(rng.choice(open_tries).n)))
        if committed:
            choices.append((0.3, lambda: self.h.recommit(rng.choice(committed).n)))
        if h.cfg.audit is not None:
            choices.append((1.5, self.audit))
        total = sum(w for w, _ in choices)
        x = rng.random() * total
        for w, action in choices:
            x -= w
            if x <= 0:
                action()
                return
        choices[-1][1]()

    def advance(self, t: Try) -> None:
        getattr(self.h, {"new": "write", "written": "close", "closed": "commit"}[t.stage])(t.n)

    def clear_all(self) -> None:
        """A clear of the whole run: setup, every write task tried again, the commit."""
        self.setup()
        for task in range(self.h.cfg.tasks):
            if self.rng.random() < 0.9:
                self.run_try(task)
        self.audit()
        self.commit_job()

    def clear_failed(self) -> None:
        """"Clear only failed": the tasks not committed in this application attempt tried again, then the commit."""
        job = self.h.job
        for task in range(self.h.cfg.tasks):
            if (job is None or task not in job.records.get(job.app, {})) and self.rng.random() < 0.9:
                self.run_try(task)
        self.audit()
        self.commit_job()


def run_schedule(seed: int, store: str = "memory", steps: int = 40, *, cfg: Config | None = None,
                 bucket: str | None = None, lifecycle: Callable[..., Lifecycle] = Lifecycle,
                 driver: Callable[[Lifecycle, random.Random], Driver] | None = None, **overrides: Any) -> Result:
    """One random schedule (*overrides* fix fields of the random configuration, e.g. ``algorithm=2``); a violation
    is returned in the result, not raised."""
    # the store and the lifecycle class are part of the seed: each part of a long run explores its own schedules
    rng = random.Random(f"{store}-{getattr(lifecycle, '__name__', '')}-{seed}")
    cfg = cfg or random_config(rng, store)
    if overrides:
        cfg = replace(cfg, **overrides).fitted()
    h = lifecycle(cfg, bucket=bucket)
    d = (driver or getattr(lifecycle, "driver", Driver))(h, rng)
    try:
        while h.steps < steps:
            d.one()
        return Result(seed, cfg, h.steps, h.actions, h.events)
    except Violation as v:
        return Result(seed, cfg, h.steps, h.actions, h.events, v)
    finally:
        h.dispose()


def replay(cfg: Config, actions: list[tuple[str, dict[str, Any]]], *, bucket: str | None = None,
           lifecycle: Callable[..., Lifecycle] = Lifecycle) -> Violation | None:
    h = lifecycle(cfg, bucket=bucket)
    try:
        for name, kwargs in actions:
            getattr(h, name)(**kwargs)
        return None
    except Violation as v:
        return v
    finally:
        h.dispose()


def shrink(cfg: Config, actions: list[tuple[str, dict[str, Any]]], kind: str, *, bucket: str | None = None,
           lifecycle: Callable[..., Lifecycle] = Lifecycle, budget: int = 600
           ) -> tuple[Config, list[tuple[str, dict[str, Any]]]]:
    """A simpler configuration and the shortest sub-schedule that still show *kind*: simpler settings, greedy
    removal of chunks of steps, whole tasks dropped (the others renumbered), simpler arguments."""
    def fails(c: Config, acts: list[tuple[str, dict[str, Any]]]) -> bool:
        nonlocal budget
        budget -= 1
        v = replay(c, acts, bucket=bucket, lifecycle=lifecycle)
        return v is not None and v.kind == kind

    best = list(actions)
    while budget > 0:
        before = (cfg, len(best), repr(best))
        for simpler_cfg in _simpler_configs(cfg):   # no partitions, no old data, one row per file
            if budget > 0 and fails(simpler_cfg, best):
                cfg = simpler_cfg
        best = _remove_chunks(cfg, best, lambda acts, c=cfg: budget > 0 and fails(c, acts))
        for task in reversed(range(cfg.tasks)):
            if cfg.tasks > 1 and budget > 0:
                c2, a2 = _drop_task(cfg, best, task)
                if fails(c2, a2):
                    cfg, best = c2, a2
        for i, (name, kwargs) in enumerate(best):   # simpler arguments: no fault, one partition
            for simpler in _simpler(name, kwargs):
                if budget > 0 and fails(cfg, best[:i] + [(name, simpler)] + best[i + 1:]):
                    best = best[:i] + [(name, simpler)] + best[i + 1:]
                    kwargs = simpler
        if (cfg, len(best), repr(best)) == before:
            break
    return cfg, best


def _remove_chunks(cfg: Config, best: list[tuple[str, dict[str, Any]]],
                   fails: Callable[[list[tuple[str, dict[str, Any]]]], bool]) -> list[tuple[str, dict[str, Any]]]:
    chunk = max(1, len(best) // 2)
    while chunk >= 1:
        i, changed = 0, False
        while i < len(best):
            candidate = best[:i] + best[i + chunk:]
            if fails(candidate):
                best, changed = candidate, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return best


def _drop_task(cfg: Config, actions: list[tuple[str, dict[str, Any]]], task: int
               ) -> tuple[Config, list[tuple[str, dict[str, Any]]]]:
    """The schedule without *task*: its tries' steps removed, higher task numbers shifted down."""
    gone = {kw["n"] for name, kw in actions if name == "start" and kw["task"] == task}
    out = []
    for name, kw in actions:
        if kw.get("n") in gone:
            continue
        if name == "start" and kw["task"] > task:
            kw = {**kw, "task": kw["task"] - 1}
        out.append((name, kw))
    return replace(cfg, tasks=cfg.tasks - 1), out


def _simpler_configs(cfg: Config) -> list[Config]:
    out = []
    if cfg.max_rows_per_file:
        out.append(replace(cfg, max_rows_per_file=None))
    if cfg.mode != "dynamic" and cfg.partition_by:
        out.append(replace(cfg, partition_by=()))
    if cfg.mode == "dynamic":   # not about partition markers after all
        out.append(replace(cfg, mode="append"))
    if len(cfg.partition_by) > 1:
        out.append(replace(cfg, partition_by=cfg.partition_by[:1]))
    if cfg.old_data:
        out.append(replace(cfg, old_data=False))
    return out


def _simpler(name: str, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    if name == "commit_job" and kwargs.get("point"):
        return [{}] + ([{**kwargs, "nth": 1}] if kwargs.get("nth", 1) != 1 else [])
    if name == "start" and len(kwargs["parts"]) > 1:
        return [{**kwargs, "parts": kwargs["parts"][:1]}]
    if name == "teardown" and kwargs.get("purge"):
        return [{}]
    return []


def render(cfg: Config, actions: list[tuple[str, dict[str, Any]]], name: str = "test_schedule",
           lifecycle: Callable[..., Lifecycle] = Lifecycle) -> str:
    """A schedule as a plain pytest function."""
    lines = [f"def {name}():", f"    h = {getattr(lifecycle, '__name__', 'Lifecycle')}({cfg.code()})", "    try:"]
    width = len(cfg.partition_by)
    for act, kwargs in actions:
        if act == "start":
            kwargs = {**kwargs, "parts": [list(p) for p in dict.fromkeys(tuple(p)[:width] for p in kwargs["parts"])]}
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        lines.append(f"        h.{act}({args})")
    lines += ["    finally:", "        h.dispose()"]
    return "\n".join(lines)


@dataclass
class Tally:
    schedules: int = 0
    steps: int = 0
    failures: list[Result] = field(default_factory=list)     # violations nobody knows about: real findings
    known: list[tuple[Result, str]] = field(default_factory=list)   # violations of a known open bug


def run_many(store: str, count: int, *, first_seed: int = 0, steps: int = 40, bucket: str | None = None,
             lifecycle: Callable[..., Lifecycle] = Lifecycle, stop_after: int = 1,
             known: Callable[[Result], str | None] = lambda r: None, report: Callable[[str], None] = print,
             **overrides: Any) -> Tally:
    """*count* schedules from *first_seed*. A violation that *known* names (an open bug) is counted and the run goes
    on; any other is printed with its seed and shrunk schedule, and the run stops after *stop_after* of them
    (0: never)."""
    tally = Tally()
    for seed in range(first_seed, first_seed + count):
        result = run_schedule(seed, store, steps, bucket=bucket, lifecycle=lifecycle, **overrides)
        tally.schedules += 1
        tally.steps += result.steps
        if result.violation is None:
            continue
        bug = known(result)
        if bug:
            tally.known.append((result, bug))
            continue
        tally.failures.append(result)
        report(describe(result, bucket=bucket, lifecycle=lifecycle))
        if stop_after and len(tally.failures) >= stop_after:
            break
    return tally


def describe(result: Result, *, bucket: str | None = None, lifecycle: Callable[..., Lifecycle] = Lifecycle,
             shrink_it: bool = True) -> str:
    v = result.violation
    assert v is not None
    text = [f"seed {result.seed} ({result.cfg.code()}): violation after {result.steps} steps: {v}"]
    if shrink_it:
        cfg, small = shrink(result.cfg, result.actions, v.kind, bucket=bucket, lifecycle=lifecycle)
        text.append(f"minimal schedule ({len(small)} steps):\n" + render(cfg, small, lifecycle=lifecycle))
    return "\n".join(text)


__all__ = ["KNOWN_OPEN", "Config", "Driver", "Killed", "Lifecycle", "Paused", "Result", "Tally", "Target", "Violation",
           "describe", "known_open", "random_config", "render", "replay", "run_many", "run_schedule", "shrink"]
