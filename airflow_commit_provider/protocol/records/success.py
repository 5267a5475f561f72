"""``_SUCCESS`` markers: what they promise (invariant I9) and every operation on them.

Whenever a ``_SUCCESS`` is present and reads as valid, the visible data files under its directory are exactly the
files it lists: ``files`` (the committing job's) plus ``retained`` (files that were already there and stayed),
with their sizes. Writers keep that true by withdrawing every marker above a file before the file appears or
goes (:func:`withdraw_markers` over :func:`marker_dirs_above`) and writing markers only after the last change;
readers check it with ``read_success_marker(..., verify_files=True)``, which judges a listing only against a
marker that stayed the same across it (a newer job replacing the marker is "not ready", not a lie).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .. import records
from ..errors import CorruptRecord, MarkerChanging
from ..layout import SUCCESS
from ..paths import join, partition_of
from ..stores import Store, store_for


@dataclass(frozen=True)
class SuccessManifest:
    """The ``_SUCCESS`` manifest of a committed job as a type: built once by job commit, never changed after it is
    written; readers get it back through :meth:`validate`. Its JSON is the same as before it had a type (the
    fields in this order, ``format`` and ``version`` first, ``files`` and ``retained`` last on disk)."""

    #: the record versions :meth:`validate` reads (every version written so far)
    VERSIONS = (1,)

    committer: str
    algorithm: int | str
    mode: str
    partition_by: list[str]
    job_id: str
    job_uuid: str
    generation: int
    app_attempt: int
    labels: dict[str, Any]
    started: str
    finished: str
    output: str
    files: list[dict[str, Any]]
    totals: dict[str, Any]
    partitions: list[str]
    tasks: list[dict[str, Any]]
    deleted: dict[str, int]
    replaced_generation: str | None
    durations: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    #: a table target's transaction (:mod:`..tables`): format, table, Delta ``version`` or Iceberg
    #: ``snapshot_id``, files added and removed; ``None`` (and absent on disk) for a directory of files
    table: dict[str, Any] | None = None
    #: what named the job (its job record's ``names``), so that the commit log tells a later set-up of this job id
    #: whether it is the same job; ``None`` (and absent on disk) when the job was named by nothing
    names: dict[str, str] | None = None
    #: what kind of maintenance the job was (``"compaction"``: it rewrote files without changing a row), so that
    #: consumers of the commit history can tell it from a commit of data; ``None`` (and absent on disk) otherwise
    maintenance: str | None = None
    #: the audit the job passed before its commit (:mod:`..audit`): its checks, what it observed, the approval;
    #: ``None`` (and absent on disk) for a stage without an audit
    audit: dict[str, Any] | None = None

    def to_doc(self) -> dict[str, Any]:
        """The manifest as the JSON object it is on disk (without ``format``, ``version`` and ``retained``).

        Its values are JSON already, so nothing is converted: the long lists (``files``, ``tasks``, one entry per
        file and per task) are this manifest's own, shared, not copied (``dataclasses.asdict`` deep-copied every
        entry, three times per commit: most of a 10,000-file commit's time); the small mappings are copies, which
        the caller may change (``commit_job`` adds its last durations)."""
        doc = {name: getattr(self, name) for name in _FIELDS}
        for name in _MAPPINGS:
            doc[name] = dict(doc[name])
        for optional in ("table", "names", "maintenance", "audit"):
            if doc[optional] is None:
                del doc[optional]   # a _SUCCESS without them is what it was before they existed
            elif isinstance(doc[optional], dict):
                doc[optional] = dict(doc[optional])
        return doc

    def encode_long(self) -> dict[str, records.Encoded]:
        """The lists that grow with the job (one entry per file, per task, per partition), encoded: once per
        commit, for the commit log, the root's ``_SUCCESS`` and each partition's (at 10,000 one-file tasks,
        encoding them is as much as a tenth of the renames, each time)."""
        return {name: records.Encoded(records.encode_plain(getattr(self, name))) for name in ("files", "partitions",
                                                                                              "tasks")}

    def with_costs(self, durations: Mapping[str, float], **diagnostics: Any) -> SuccessManifest:
        """This manifest with the commit's durations and more diagnostics (a new object: this one is frozen)."""
        return replace(self, durations=dict(durations), diagnostics={**self.diagnostics, **diagnostics})

    @classmethod
    def validate(cls, doc: Any, where: str) -> SuccessManifest:
        """A parsed ``_SUCCESS`` of any version in :attr:`VERSIONS` as a manifest; :class:`CorruptRecord` naming
        *where* and the first problem. Fields a version did not write are their defaults (``None``, empty)."""
        checked = records.validate_success(doc, where)
        if checked.get("version") not in cls.VERSIONS:
            raise CorruptRecord(f"{where} has unsupported _SUCCESS version {checked.get('version')!r}")
        if not isinstance(checked.get("maintenance", ""), str):
            raise CorruptRecord(f"{where}: field 'maintenance' has type {type(checked['maintenance']).__name__}, "
                                "not str")
        defaults: dict[str, Any] = {"partition_by": [], "generation": 0, "labels": {}, "output": "",
                                    "partitions": [], "tasks": [], "deleted": {}, "replaced_generation": None}
        return cls(**{f.name: checked.get(f.name, defaults.get(f.name)) for f in fields(cls)
                      if f.name in checked or f.name in defaults})


#: the manifest's fields in their order on disk, and those that are small mappings (copied by ``to_doc``)
_FIELDS = tuple(f.name for f in fields(SuccessManifest))
_MAPPINGS = ("labels", "totals", "deleted", "durations", "diagnostics")


def marker_dirs_above(paths: Iterable[str]) -> set[str]:
    """Every directory whose subtree holds one of *paths*, the root (``""``) included: the directories whose
    ``_SUCCESS`` stops telling the truth when one of those files appears or goes."""
    dirs = {""}
    for head in {path.rpartition("/")[0] for path in paths}:   # partition_of, inline: once per file, then per dir
        while head and head not in dirs:
            dirs.add(head)
            head = partition_of(head)
    return dirs


def withdraw_markers(store: Store, dirs: Iterable[str]) -> None:
    """Delete the ``_SUCCESS`` of each directory (missing ones are fine): before the visible files under a marker
    change, the marker goes, so that no reader trusts a marker that describes another directory."""
    store.delete_files([join(d, SUCCESS) for d in sorted(set(dirs))])


def write_markers(store: Store, manifest: SuccessManifest, *, partitions: Iterable[str] = (),
                  encoded: Mapping[str, records.Encoded] | None = None,
                  others: Mapping[str, int] | None = None, root: bool = True) -> int:
    """Write the markers of a committed job, the root one last (none with *root* false: another job's
    uncommitted files are visible, :class:`~..jobcommit.stages.WriteMarkers`); returns how many files the root's
    retains.

    Each lists the job's files under its directory and, as ``retained``, the other visible files there now. Each
    directory of *partitions* gets its own marker first: the partitions a dynamic job wrote (downstream DAGs wait
    for one day, not the whole table), and those whose marker a compaction withdrew and gives back. *encoded*: the
    manifest's long lists as the commit log encoded them (:meth:`SuccessManifest.encode_long`). *others*: the other
    files a reader of the output reads (path -> size), when that is not every visible file under the root: a
    table's version references only some of the files under its data root.
    """
    encoded = encoded if encoded is not None else manifest.encode_long()
    file_list = manifest.files
    ours = {f["path"] for f in file_list}
    visible = dict(store.visible_files_except(ours)) if others is None else \
        {p: size for p, size in others.items() if p not in ours}
    body = {k: encoded.get(k, v) for k, v in manifest.to_doc().items() if k != "files"}
    parts = set(partitions) - {""}
    if parts:
        _write_partition_markers(store, body, file_list, visible, parts)
    if not root:
        return 0
    retained = [{"path": p, "size": visible[p]} for p in sorted(visible)]
    body["diagnostics"] = {**body["diagnostics"], "retained_files": len(retained)}
    store.write_bytes(SUCCESS, records.dumps("success", body, files=encoded["files"],
                                             retained=records.encode(retained)))
    return len(retained)


def retained_count(manifest: Mapping[str, Any]) -> int | None:
    """How many other files the marker *manifest* kept (its ``retained``); ``None`` for a manifest that does not
    come from a marker (a commit log's), which alone lists them."""
    return len(manifest["retained"]) if "retained" in manifest else None


def partition_totals(files: list[dict[str, Any]]) -> dict[str, int]:
    """The totals of one partition's files, as its ``_SUCCESS`` states them (and a watcher of it reports them)."""
    return {"files": len(files), "bytes": sum(f["size"] for f in files), "rows": sum(f["rows"] or 0 for f in files),
            "tasks": len({f["task"] for f in files}), "partitions": 1}


def _write_partition_markers(store: Store, manifest: Mapping[str, Any], file_list: list[dict[str, Any]],
                             visible: Mapping[str, int], partitions: set[str]) -> None:
    """The ``_SUCCESS`` of each of *partitions*, durable together before the root's (one fsync per partition
    directory, not two)."""
    under = _under(partitions, file_list, lambda f: f["path"])
    kept = _under(partitions, [{"path": p, "size": visible[p]} for p in sorted(visible)], lambda f: f["path"])
    with store.batch():
        for part, files in sorted(under.items()):
            doc = {**manifest, "partition": part, "files": files, "partitions": [part], "retained": kept[part],
                   "totals": partition_totals(files)}
            store.write_bytes(f"{part}/{SUCCESS}", records.dumps("success", doc))


def _under(partitions: set[str], entries: list[dict[str, Any]], path: Any) -> dict[str, list[dict[str, Any]]]:
    """Each of *entries* under each of *partitions* above it, in the entries' order (one walk up each path, not
    one pass over the entries per partition)."""
    under: dict[str, list[dict[str, Any]]] = {part: [] for part in partitions}
    for entry in entries:
        head = partition_of(path(entry))
        while head:
            if head in under:
                under[head].append(entry)
            head = partition_of(head)
    return under


#: How many times a verifying read lists the directory before it gives up on a marker that changes under it. A job
#: commit withdraws the markers, publishes, deletes old files and writes ``_SUCCESS`` last; a reader that meets one
#: such change retries and usually finds the marker gone (not ready) or the new one stable. Three listings in a row
#: each overlapping a change means the target is being rewritten continuously: :class:`MarkerChanging`.
VERIFY_ATTEMPTS = 3


def read_success_marker(path: Any, *, fs: Any = None, storage_options: dict[str, Any] | None = None,
                        verify_files: bool = False) -> dict[str, Any]:
    """Load and validate the ``_SUCCESS`` manifest of an output root (or of a partition of it).

    *path* is the output root, the ``_SUCCESS`` file itself, or a :class:`Store`. Raises :class:`FileNotFoundError`
    when there is no ``_SUCCESS`` and :class:`CorruptRecord` naming the problem when it is not a valid manifest.

    With *verify_files*, the visible files under the marker's directory must be exactly the listed ones, with their
    recorded sizes. A listing is not atomic and a newer job may legitimately replace the marker meanwhile (withdraw,
    publish, delete old files, write ``_SUCCESS``), so the marker is read again after the listing and the listing
    is judged only against a marker that stayed byte for byte the same across it: a stable marker that does not
    match is :class:`CorruptRecord` naming the difference. A marker that changed is read and checked again, up to
    :data:`VERIFY_ATTEMPTS` listings; one withdrawn meanwhile is :class:`FileNotFoundError`, one still changing
    after the last listing is :class:`MarkerChanging`. Both mean "not ready yet": ask again later.
    """
    if isinstance(path, Store):
        store = path
    else:
        text = os.fspath(path) if hasattr(path, "__fspath__") else str(path)
        root = text[: -len(SUCCESS) - 1] if text.rstrip("/").endswith("/" + SUCCESS) else text
        store = store_for(root, fs=fs, storage_options=storage_options)
    where = store.url(SUCCESS)
    data = _marker_bytes(store, where, "the job has not committed")
    if not verify_files:
        return parse_marker(data, where)
    for _ in range(VERIFY_ATTEMPTS):
        manifest = parse_marker(data, where)
        sizes = dict(store.list_files("", visible_only=True))
        again = _marker_bytes(store, where, "it was withdrawn while its directory was listed: a job is committing")
        if again == data:
            _check_listing(manifest, sizes, where)
            return manifest
        data = again
    raise MarkerChanging(f"{where} changed during each of {VERIFY_ATTEMPTS} listings of its directory: jobs are "
                         "committing there; not ready yet, read it again later")


def _marker_bytes(store: Store, where: str, why_absent: str) -> bytes:
    try:
        return store.read_bytes(SUCCESS)
    except FileNotFoundError:
        raise FileNotFoundError(f"no _SUCCESS at {where}: {why_absent}") from None


def parse_marker(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{where} is not valid JSON ({exc}); it is truncated or was not written by "
                            "airflow-commit-provider") from exc
    SuccessManifest.validate(doc, where)   # every field typed, of a version this release reads
    return doc


def verify_listed_files(store: Store, manifest: Mapping[str, Any], where: str) -> None:
    """I9 as a reader checks it: the visible files under the marker's directory are exactly the files it lists
    (``files`` and ``retained``), with their sizes; :class:`CorruptRecord` naming the first difference. Only
    meaningful while nothing writes there (tests, a stopped target): :func:`read_success_marker` is the reader that
    tells a marker being replaced from a wrong one."""
    _check_listing(manifest, dict(store.list_files("", visible_only=True)), where)


def _check_listing(manifest: Mapping[str, Any], sizes: Mapping[str, int], where: str) -> None:
    """:func:`listing_mismatch` as an error: :class:`CorruptRecord` naming the first difference."""
    problem = listing_mismatch(sizes, manifest, where)
    if problem:
        raise CorruptRecord(problem)


def files_under(listing: Mapping[str, int], directory: str) -> dict[str, int]:
    """The entries of a root listing (path -> size) under *directory*, relative to it (``""``: all of them)."""
    if not directory:
        return dict(listing)
    prefix = directory + "/"
    return {p[len(prefix):]: size for p, size in listing.items() if p.startswith(prefix)}


def listing_mismatch(sizes: Mapping[str, int], manifest: Mapping[str, Any], where: str) -> str | None:
    """The first way *manifest* does not describe *sizes* (the visible files under its directory, relative to
    it, and their sizes), or ``None`` when it describes them exactly (I9). A table's marker lists the files its
    version references; the other files under a table's data root are those older versions list (or none lists,
    left for the table's own vacuum), which no reader of the version reads: there only the listed files count."""
    base = manifest.get("partition") or ""  # a partition's _SUCCESS lists paths from the output root
    listed = {}
    for f in list(manifest["files"]) + list(manifest.get("retained") or []):
        listed[f["path"][len(base) + 1:] if base else f["path"]] = f
    for rel, f in listed.items():
        if sizes.get(rel) != f["size"]:
            return (f"{where} lists {f['path']} with {f['size']} bytes, but the output has "
                    f"{'no such file' if rel not in sizes else str(sizes[rel]) + ' bytes'}")
    unlisted = sorted(set(sizes) - set(listed))
    if unlisted and not manifest.get("table"):  # a table's data root keeps files its older versions list
        return (f"{where} does not describe its directory: {len(unlisted)} visible file(s) it does not list, "
                f"e.g. {unlisted[:3]}")
    return None
