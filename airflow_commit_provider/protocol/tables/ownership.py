"""Whose files these are: the Delta or Iceberg table a target is, lies inside, or holds, for the maintenance and
the plain file jobs that must not touch them (DESIGN section 10: whatever owns the files owns their deletion).

A table's data files are Parquet files like any other, but the table's log (Delta's ``_delta_log``, Iceberg's
metadata and manifests) names each one: a file deleted or merged behind the log's back leaves it naming a file
that is gone, and every read of the table fails from then on (``FileNotFoundError``), while the log says nothing
changed; a file added behind its back is invisible to the table's readers and counted by every reader of the
plain directory. So a compaction or a deduplication asks :func:`table_at` first and refuses (:func:`refuse_table`)
before it writes, claims or withdraws anything, and so does the setup of a job that publishes files, not into a
table (:func:`refuse_file_job`), before its job record. What shows a table, cheapest first:

- at the target or any directory above it, up to the top the store can see (a bucket; the file system's root):
  a ``_delta_log`` directory (the Delta table's location: its data files are under it), or a ``metadata``
  directory holding ``*.metadata.json`` (an Iceberg table's location: this provider's table committer and
  pyiceberg put its data files in ``<location>/data``);
- anywhere below the target: the same two, or a job record (``_temporary/<job>/_job.json``) or commit log
  (``_commits/<job>.json``) of this provider whose job published into a table: its files are that table's even
  where its metadata is kept elsewhere (Iceberg's ``write.metadata.path``, a catalog that places it itself).

A file job's setup runs once per application attempt, so it reads less. In ``append`` and ``error`` mode, whose
commits delete nothing, it looks only at the target, the directories above it and the target's own records: files
added beside a table (in a warehouse, a parent directory) are not in it, and the whole tree below a big append
target is not listed at every setup. In ``overwrite`` and ``dynamic`` mode, whose commits delete what the target
held, it looks below too. Either way it reads every job record (only jobs under way have one), but only one commit
log per ``_commits`` directory (the last by name), not all of them. A
commit log stays for good, one per job ever committed there: reading each would cost a daily job one more request
per day of its history (on S3, a target of 1,000 files and 100 commit logs: 8 listings and 100 GetObject, against
8 and 1). One tells a table's data directory whose commit logs are all the table jobs': once one is there, no
file job commits beside it. Missed: a directory file jobs wrote before the table's first job, whose last log by
name is a file job's; that matters only for an Iceberg table whose metadata is kept elsewhere (with the metadata
beside the data, or with Delta's log, the names show the table whatever the logs say).

No table library is imported here: the question is one of names and records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OwnedByTable
from ..layout import COMMITS, TEMPORARY
from ..paths import is_hidden, join
from ..records.job import CommitLog, JobRecord
from ..stores import Store

DELTA_LOG = "_delta_log"
ICEBERG_METADATA = "metadata"
#: maintenance operations, as the refusal names them
OPERATIONS = ("compaction", "deduplication")


@dataclass(frozen=True)
class FoundTable:
    """A table found around a target: its format, its location (a URL: where its log or metadata is, or, found by
    a record only, where its data files are), its name (the location, or the Iceberg identifier a record gives),
    how the target relates to it (``is``, ``lies inside``, ``holds``) and what showed it."""

    format: str
    location: str
    name: str
    relation: str
    evidence: str

    @property
    def path(self) -> str:
        """The location as the table libraries take it (a local path without ``file://``)."""
        return self.location.removeprefix("file://")

    @property
    def identifier(self) -> str:
        """The catalog's identifier of an Iceberg table, where a record gave it; metadata found by name tells the
        location only."""
        return self.name if self.name != self.location else "<namespace>.<table>"


def _is_iceberg_metadata(name: str) -> bool:
    """A table metadata file's name: ``00001-<uuid>.metadata.json``, ``v1.metadata.json``, gzipped or not."""
    return ".metadata.json" in name


def _at_level(store: Store, relation: str) -> FoundTable | None:
    """The table whose location is *store*'s root, if its own entries show one."""
    if DELTA_LOG in store.list_dir_prefix("", DELTA_LOG):
        return FoundTable("delta", store.url(), store.url(), relation,
                          f"{store.url(DELTA_LOG)} holds a Delta transaction log")
    if ICEBERG_METADATA in store.list_dir_prefix("", ICEBERG_METADATA):
        found = sorted(n for n in store.list_dir(ICEBERG_METADATA) if _is_iceberg_metadata(n))
        if found:
            return FoundTable("iceberg", store.url(), store.url(), relation,
                              f"{store.url(ICEBERG_METADATA)} holds Iceberg table metadata ({found[-1]})")
    return None


def _around(store: Store) -> FoundTable | None:
    """The table the root is or lies inside: the root's entries, then each directory's above it that the store
    can read."""
    level: Store | None = store
    relation = "is"
    while level is not None:
        try:
            found = _at_level(level, relation)
        except PermissionError:   # a directory above that this identity may not list: the top it can see
            return None
        if found is not None:
            return found
        level, relation = level.parent(), "lies inside"
    return None


def _records(names: list[str], every_log: bool) -> Iterator[tuple[str, str, str]]:
    """``(kind, path, data root)`` of every job record and commit log (without *every_log*: the last one by name
    of each ``_commits`` directory) of this provider in a listing, at any depth but never inside another one's
    records (task commit records are ``_commits/task_*.json`` under ``_temporary``)."""
    logs_of: set[str] = set()
    for rel in sorted(names, reverse=True):
        parts = rel.split("/")
        if len(parts) >= 2 and parts[-2] == COMMITS and parts[-1].endswith(".json") and not is_hidden(parts[-1]):
            kind, head = "commit log", "/".join(parts[:-2])
            if not every_log and head in logs_of:
                continue
            logs_of.add(head)
        elif len(parts) >= 3 and parts[-3] == TEMPORARY and parts[-1] == "_job.json" and not is_hidden(parts[-2]):
            kind, head = "job record", "/".join(parts[:-3])
        else:
            continue
        if not is_hidden(head):
            yield kind, rel, head


def _record_table(store: Store, kind: str, rel: str) -> Mapping[str, Any] | None:
    """The table a job record or commit log says its job published into (``format``, ``name``), or ``None``."""
    if kind == "job record":
        job = JobRecord.read(store, rel)
        return None if job is None or job.table is None else job.table
    log = CommitLog.read(store, rel)
    table = None if log is None else log.manifest.get("table")
    return None if not isinstance(table, dict) else {"format": table.get("format"), "name": table.get("table")}


def _below(store: Store, every_log: bool = True) -> FoundTable | None:
    """A table inside the root (a warehouse, a parent directory of tables), or the records of a job that
    published into one (see :func:`_records` for *every_log*), from one listing."""
    names = store.list_names("")
    for rel in names:
        parts = rel.split("/")
        if DELTA_LOG in parts[:-1]:
            head = "/".join(parts[:parts.index(DELTA_LOG)])
            if not is_hidden(head):
                return FoundTable("delta", store.url(head), store.url(head), "holds",
                                  f"{store.url(join(head, DELTA_LOG))} holds a Delta transaction log")
        if len(parts) >= 2 and parts[-2] == ICEBERG_METADATA and _is_iceberg_metadata(parts[-1]):
            head = "/".join(parts[:-2])
            if not is_hidden(head):
                return FoundTable("iceberg", store.url(head), store.url(head), "holds",
                                  f"{store.url(rel)} is Iceberg table metadata")
    return _recorded_table(store, names, every_log)


def _recorded_table(store: Store, names: list[str], every_log: bool) -> FoundTable | None:
    """The first table a job record or commit log among *names* says its job published into."""
    for kind, rel, data_root in _records(names, every_log):
        table = _record_table(store, kind, rel)
        if table is not None:
            location = store.url(data_root)
            return FoundTable(str(table.get("format")), location, str(table.get("name") or location),
                              "is" if not data_root else "holds",
                              f"{store.url(rel)} ({kind}) says its job published into {table.get('format')} table "
                              f"{table.get('name') or location}, whose data files are at {location}")
    return None


def _root_records(store: Store) -> FoundTable | None:
    """The table the root's own records name (its last commit log, the job records of its jobs under way): an
    Iceberg table whose metadata is kept elsewhere, or a new table whose first job is under way, without a listing
    of the tree below."""
    names = [f"{COMMITS}/{n}" for n in store.list_dir(COMMITS)]
    names += [f"{TEMPORARY}/{j}/_job.json" for j in store.list_dir(TEMPORARY)]
    return _recorded_table(store, names, every_log=False)


def table_at(store: Store) -> FoundTable | None:
    """The table *store*'s root is, lies inside, or holds (see the module docstring), or ``None`` for a directory
    of plain files. Only reads."""
    return _around(store) or _below(store)


def _advice(found: FoundTable, operation: str) -> str:
    """The table's own way to do *operation*, as its library spells it."""
    if found.format == "delta":
        uri = found.path
        if operation == "compaction":
            return (f"compact it through its log: deltalake.DeltaTable({uri!r}).optimize.compact() rewrites the "
                    f"small files in one transaction; then DeltaTable({uri!r}).vacuum(dry_run=False) deletes the "
                    "files no version within the retention period still needs")
        return (f"remove duplicate rows through its log: write the deduplicated rows back in one transaction "
                f"(deltalake.write_deltalake({uri!r}, rows, mode='overwrite'), or DeltaTable.merge / .delete with a "
                f"predicate); then DeltaTable({uri!r}).vacuum(dry_run=False) deletes the files no version within "
                "the retention period still needs")
    ident = found.identifier
    if operation == "compaction":
        return (f"compact it with the table's own maintenance: pyiceberg (0.12) has no compaction; Spark's procedure "
                f"CALL <catalog>.system.rewrite_data_files(table => '{ident}') rewrites the small files in one "
                "snapshot, and expire_snapshots (pyiceberg: table.maintenance.expire_snapshots()) with Spark's "
                "remove_orphan_files deletes the files no snapshot needs")
    return (f"remove duplicate rows through the table: pyiceberg's table.overwrite(rows) of {ident} with the "
            "deduplicated rows (or table.delete(filter)) commits one snapshot; expire_snapshots "
            "(table.maintenance.expire_snapshots()) with Spark's remove_orphan_files deletes the files no snapshot "
            "needs")


def _refusal(found: FoundTable, what: str, store: Store, harm: str, advice: str) -> OwnedByTable:
    """The one wording of every refusal: *what* of the target refused, the table and what showed it, the *harm*
    it would do, and the way out."""
    where = found.location if found.relation != "is" else ""
    return OwnedByTable(
        f"{what} {store.url()} refused: it {found.relation} the {found.format} table {found.name}"
        f"{f' at {where}' if where and where != found.name else ''} ({found.evidence}). A table's files are "
        f"added and deleted by the table's own transactions: {harm}. Nothing was changed. Instead, {advice}.",
        table_format=found.format, location=found.location, name=found.name)


def refuse_table(store: Store, operation: str) -> None:
    """:class:`OwnedByTable` when *store*'s root is, lies inside, or holds a table (:func:`table_at`): naming the
    table, what showed it, and the table's own way to do *operation* (one of :data:`OPERATIONS`). Raised before
    the operation changes anything."""
    assert operation in OPERATIONS, operation
    found = table_at(store)
    if found is not None:
        raise _refusal(found, f"{operation} of", store, f"{operation} here would delete files its log still "
                       "names, and every read of the table would fail from then on", _advice(found, operation))


#: what a file job of each mode would do to a table's files
#: the modes whose job commit deletes what the target held: only for them does a file job's setup look for a table
#: anywhere below its target (a warehouse, a parent of tables); an append or error job there adds files beside the
#: tables, never in them, and pays no listing of the whole tree at every setup (one LIST per 1,000 keys on S3)
_DELETING_MODES = ("overwrite", "dynamic")
_FILE_JOB_HARM = {
    "overwrite": "its job commit would delete the table's files, which its log still names, and every read of the "
                 "table would fail from then on",
    "dynamic": "its job commit would delete the table's files in every partition it writes, which its log still "
               "names, and every read of the table would fail from then on",
}
_FILE_JOB_HARM["append"] = _FILE_JOB_HARM["error"] = (
    "its Parquet files would be ones the table's log does not name: invisible to the table's readers, and counted "
    "by every reader of the plain directory")


def refuse_file_job(store: Store, mode: str) -> None:
    """:class:`OwnedByTable` when a job that publishes files (not into a table) in *mode* would write into a table
    (*store*'s root is, lies inside, or holds one; records read as the module docstring says for setup): naming
    the table and the two ways out, the table job (``table_format``) or a target outside it. Only reads."""
    deletes = mode in _DELETING_MODES
    found = _around(store) or (_below(store, every_log=False) if deletes else _root_records(store))
    if found is None:
        return
    if found.format == "delta":
        way = f"give table_format='delta' (with the table's location {found.path} as target) to commit into the table"
    else:
        way = (f"give table_format='iceberg' with table_name={found.identifier!r} (and the catalog that holds it) to "
               "commit into the table")
    raise _refusal(found, f"a file job in {mode} mode into", store,
                   _FILE_JOB_HARM[mode], f"{way}, or choose a target outside it")


__all__ = ["OPERATIONS", "FoundTable", "refuse_file_job", "refuse_table", "table_at"]
