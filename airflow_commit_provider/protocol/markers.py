"""``_SUCCESS`` markers: what they promise (invariant I9) and every operation on them.

Whenever a ``_SUCCESS`` is present and reads as valid, the visible data files under its directory are exactly the
files it lists: ``files`` (the committing job's) plus ``retained`` (files that were already there and stayed),
with their sizes. Writers keep that true by withdrawing every marker above a file before the file appears or
goes (:func:`withdraw_markers` over :func:`marker_dirs_above`) and writing markers only after the last change;
readers check it with :func:`verify_listed_files` (``read_success_marker(..., verify_files=True)``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from . import records
from .errors import CorruptRecord
from .layout import SUCCESS
from .paths import join, partition_of
from .stores import Store, store_for


def marker_dirs_above(paths: Iterable[str]) -> set[str]:
    """Every directory whose subtree holds one of *paths*, the root (``""``) included: the directories whose
    ``_SUCCESS`` stops telling the truth when one of those files appears or goes."""
    dirs = {""}
    for path in paths:
        head = partition_of(path)
        while head and head not in dirs:
            dirs.add(head)
            head = partition_of(head)
    return dirs


def withdraw_markers(store: Store, dirs: Iterable[str]) -> None:
    """Delete the ``_SUCCESS`` of each directory (missing ones are fine): before the visible files under a marker
    change, the marker goes, so that no reader trusts a marker that describes another directory."""
    store.delete_files([join(d, SUCCESS) for d in sorted(set(dirs))])


def write_markers(store: Store, manifest: Mapping[str, Any], file_list: list[dict[str, Any]], *,
                  per_partition: bool, files_json: bytes | None = None) -> int:
    """Write the markers of a committed job, the root one last; returns how many files they retain.

    Each lists the job's files under it and, as ``retained``, the other visible files there now. With
    *per_partition* (dynamic mode) each partition the job wrote gets its own marker first: downstream DAGs wait
    for one day, not the whole table. *files_json*: *file_list* already encoded (:func:`.records.encode`), as the
    commit log encoded it.
    """
    ours = {f["path"] for f in file_list}
    visible = dict(store.visible_files_except(ours))
    if per_partition:
        by_part: dict[str, list[dict[str, Any]]] = {}
        for f in file_list:
            by_part.setdefault(partition_of(f["path"]), []).append(f)
        for part, files in by_part.items():
            if not part:
                continue
            kept = [{"path": p, "size": size} for p, size in sorted(visible.items()) if p.startswith(part + "/")]
            doc = {**manifest, "partition": part, "files": files, "partitions": [part], "retained": kept,
                   "totals": {"files": len(files), "bytes": sum(f["size"] for f in files),
                              "rows": sum(f["rows"] or 0 for f in files), "tasks": len({f["task"] for f in files}),
                              "partitions": 1}}
            store.write_bytes(f"{part}/{SUCCESS}", records.dumps("success", doc))
    retained = [{"path": p, "size": visible[p]} for p in sorted(visible)]
    manifest = {**manifest, "diagnostics": {**manifest["diagnostics"], "retained_files": len(retained)}}
    store.write_bytes(SUCCESS, records.dumps("success", manifest,
                                             files=records.encode(file_list) if files_json is None else files_json,
                                             retained=records.encode(retained)))
    return len(retained)


def read_success_marker(path: Any, *, fs: Any = None, storage_options: dict[str, Any] | None = None,
                        verify_files: bool = False) -> dict[str, Any]:
    """Load and validate the ``_SUCCESS`` manifest of an output root (or of a partition of it).

    *path* is the output root, the ``_SUCCESS`` file itself, or a :class:`Store`. With *verify_files*, every listed
    file must exist with its recorded size. Raises :class:`FileNotFoundError` when there is no ``_SUCCESS`` and
    :class:`CorruptRecord` naming the problem when it is not a valid manifest.
    """
    if isinstance(path, Store):
        store = path
    else:
        text = os.fspath(path) if hasattr(path, "__fspath__") else str(path)
        root = text[: -len(SUCCESS) - 1] if text.rstrip("/").endswith("/" + SUCCESS) else text
        store = store_for(root, fs=fs, storage_options=storage_options)
    try:
        data = store.read_bytes(SUCCESS)
    except FileNotFoundError:
        raise FileNotFoundError(f"no _SUCCESS at {store.url(SUCCESS)}: the job has not committed") from None
    where = store.url(SUCCESS)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{where} is not valid JSON ({exc}); it is truncated or was not written by "
                            "airflow-commit-provider") from exc
    manifest = records.validate_success(doc, where)
    if verify_files:
        verify_listed_files(store, manifest, where)
    return manifest


def verify_listed_files(store: Store, manifest: Mapping[str, Any], where: str) -> None:
    """I9 as a reader checks it: the visible files under the marker's directory are exactly the files it lists
    (``files`` and ``retained``), with their sizes; :class:`CorruptRecord` naming the first difference."""
    problem = listing_mismatch(dict(store.list_files("", visible_only=True)), manifest, where)
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
    it, and their sizes), or ``None`` when it describes them exactly (I9)."""
    base = manifest.get("partition") or ""  # a partition's _SUCCESS lists paths from the output root
    listed = {}
    for f in list(manifest["files"]) + list(manifest.get("retained") or []):
        listed[f["path"][len(base) + 1:] if base else f["path"]] = f
    for rel, f in listed.items():
        if sizes.get(rel) != f["size"]:
            return (f"{where} lists {f['path']} with {f['size']} bytes, but the output has "
                    f"{'no such file' if rel not in sizes else str(sizes[rel]) + ' bytes'}")
    unlisted = sorted(set(sizes) - set(listed))
    if unlisted:
        return (f"{where} does not describe its directory: {len(unlisted)} visible file(s) it does not list, "
                f"e.g. {unlisted[:3]}")
    return None
