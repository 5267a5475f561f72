"""How the writers that fill a table directory name their task output, and what a name proves about its job.

A duplicate is one task of one job present twice. Whether two names can be that depends on the writer's own rules:

========================  ============================================  ===========================================
writer                    a task's output file                          the name identifies
========================  ============================================  ===========================================
Spark (FileFormatWriter)  ``part-<split:05d>-<job uuid>[_<bucket:05d>]``  the job (one uuid per write job, shared by
                          ``-c<n:03d>`` or ``.c<n:03d>``, then the      every attempt), the task (split) and the
                          codec and format (``.snappy.parquet``)        file of the task (``n``)
this provider             ``part-<task:05d>-<job uuid>-c<n:03d>.<ext>``  the same; the commit log lists the files
                                                                        of each committed job
Hive (FileSinkOperator)   ``<task:06d>_<attempt>[.<ext>]``              the task and the attempt, **not the job**
Hadoop (FileOutputFormat) ``<name>-[mr]-<task:05d>[.<ext>]``            the task only
========================  ============================================  ===========================================

Spark's single-directory writer (an unpartitioned write) puts ``-c000`` in the name, its dynamic-partition writer
(partitioned or bucketed) ``.c000`` (``SingleDirectoryDataWriter``, ``DynamicPartitionDataWriter``; both seen
with Spark 4.3 in ``tests/protocol/fixtures/spark43``); Spark 2.0 wrote no counter
(``part-r-00000-<uuid>.snappy.parquet``). Every attempt of a Spark or Hadoop task writes the *same* name into its
own attempt directory, so two of them can never both be visible under their own names.

A second copy of a file does get another name when something moves it into a directory that already holds the
name without replacing it. Hive does that on every ``INSERT INTO`` and ``LOAD DATA`` (``Hive.mvFile``): the new
file becomes ``<name without its last extension>_copy_<n>[.<last extension>]`` (``000000_0_copy_1``,
``part-00001-<uuid>-c000.snappy_copy_1.parquet``); Hive's ``Utilities.moveFile`` appends ``_<n>`` instead.
For a name that identifies its job such a copy is the same file of the same task of the same job again; for a
Hive or Hadoop name, which does not, it is the output of *another* job that happened to reuse the name (two
``INSERT INTO`` jobs give ``000000_0`` and ``000000_0_copy_1``: not duplicates).

Hive's ACID and insert-only tables write each transaction into its own directory (``AcidUtils``:
``base_<write id>``, ``delta_<min>_<max>[_<statement>]``, ``delete_delta_...``, with an optional ``_v<visibility
txn>``), so Hive names inside one such directory are one job's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SPARK = "spark"
HIVE = "hive"
HADOOP = "hadoop"

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_SPARK_RE = re.compile(rf"^part-(?:[rm]-)?(?P<split>\d{{5,}})-(?P<uuid>{_UUID})(?P<bucket>_\d{{5,}})?"
                       r"(?:[-.]c(?P<file>\d{3,}))?(?P<ext>\..+)?$")
#: Hive's task id is Hadoop's zero-padded task number (at least six digits); its attempt id has at most six
_HIVE_RE = re.compile(r"^(?P<task>\d{6,})_(?P<attempt>\d{1,6})(?P<ext>\..+)?$")
_HADOOP_RE = re.compile(r"^(?P<base>[A-Za-z][A-Za-z0-9]*)-(?:(?P<type>[mr])-)?(?P<task>\d{5,})(?P<ext>\..+)?$")
#: ``Hive.mvFile``: ``_copy_<n>`` before the last extension (``FilenameUtils.getBaseName`` / ``getExtension``)
_HIVE_COPY_RE = re.compile(r"^(?P<base>.+)_copy_(?P<n>\d+)(?P<ext>\.[^.]*)?$")
#: ``Utilities.moveFile``: ``_<n>`` after the whole name
_MOVE_COPY_RE = re.compile(r"^(?P<name>.+)_(?P<n>\d+)$")
_ACID_DIR_RE = re.compile(r"^(?:base_\d+|(?:delete_)?delta_\d+_\d+(?:_\d+)?)(?:_v\d+)?$")


@dataclass(frozen=True)
class TaskFile:
    """What a visible file's name says, by its writer's rules."""

    #: :data:`SPARK` (this provider's names are Spark's), :data:`HIVE` or :data:`HADOOP`
    writer: str
    #: the name its writer gave it (copy decorations taken off)
    original: str
    task: int
    #: the job uuid (lower case) for Spark names; ``None`` where the name does not identify the job
    job_uuid: str | None
    #: Hive's attempt id; ``None`` for the other writers (their attempts share a name)
    attempt: int | None
    #: the copy decorations on top of the original name, innermost first (``()``: the writer's own name)
    copies: tuple[int, ...]

    @property
    def names_its_job(self) -> bool:
        """Whether the name identifies the job that wrote it (then a copy of the name is the same job's)."""
        return self.job_uuid is not None


def _undecorate(name: str) -> tuple[str, tuple[int, ...]]:
    """The name under every copy decoration, and the decorations (innermost first)."""
    copies: list[int] = []
    while True:
        m = _HIVE_COPY_RE.match(name)
        if m:
            name = m["base"] + (m["ext"] or "")
            copies.append(int(m["n"]))
            continue
        m = _MOVE_COPY_RE.match(name)
        spark = _SPARK_RE.match(m["name"]) if m else None
        # only on top of a whole Spark name (it ends with its format's extension): on a Hive name (``000000_0_1``)
        # the suffix cannot be told from an attempt id, on ``..._00003`` not from a bucket
        if m and spark and spark["ext"]:
            name = m["name"]
            copies.append(int(m["n"]))
            continue
        return name, tuple(reversed(copies))


def parse_task_file(name: str) -> TaskFile | None:
    """The :class:`TaskFile` a file name (its last path component) is, or ``None`` for a name no writer above
    gives its task output."""
    original, copies = _undecorate(name)
    m = _SPARK_RE.match(original)
    if m:
        return TaskFile(SPARK, original, int(m["split"]), m["uuid"].lower(), None, copies)
    m = _HIVE_RE.match(original)
    if m:
        return TaskFile(HIVE, original, int(m["task"]), None, int(m["attempt"]), copies)
    m = _HADOOP_RE.match(original)
    if m:
        return TaskFile(HADOOP, original, int(m["task"]), None, None, copies)
    return None


def is_hive_transaction_dir(name: str) -> bool:
    """Whether a directory name is one of Hive's per-transaction directories (``base_``, ``delta_``,
    ``delete_delta_``): everything Hive writes in one is one job's."""
    return bool(_ACID_DIR_RE.match(name))


#: Hidden names other writers use for a job that is still writing (or died writing) into the directory that holds
#: them: Hadoop's and Spark's ``_temporary`` (Spark's ``_temporary-<uuid>`` for absolute paths), Spark's dynamic
#: overwrite staging ``.spark-staging-<uuid>``, Hive's ``.hive-staging_hive_...``, ``_tmp.<dir>`` and
#: ``_task_tmp.<dir>``, and the S3A magic committer's ``__magic``.
FOREIGN_STAGING_PREFIXES = ("_temporary", ".spark-staging", ".hive-staging", "_tmp.", "_task_tmp.", "__magic")


def is_foreign_staging(name: str) -> bool:
    """Whether a hidden directory name is another writer's work in progress (:data:`FOREIGN_STAGING_PREFIXES`)."""
    return name.startswith(FOREIGN_STAGING_PREFIXES)
