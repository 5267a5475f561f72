"""Find and remove duplicate task outputs in a directory written *without* a commit protocol.

Hive's small-file merge renamed its temp file in ``close()``, so a speculative attempt left two copies of one
task's output (``000005_0`` and ``000005_1``); Hive's after-the-fact cleanup kept "the larger file", a rule later
found wrong (compression and write order change sizes). Here the winner of each task is chosen:

1. by commit record, where one exists: a file listed in a ``_SUCCESS`` manifest or a commit log under the root
   is the committed one;
2. else by the highest attempt id in the name (Hive's ``<task>_<attempt>``), the later attempt;
3. never by size. A group with no record and no attempt ids (Spark names from two jobs) is reported as
   ambiguous and left alone.

Dry-run by default: :func:`find_duplicates` only reports. :func:`remove_duplicates` fixes the deletion list from
that report before deleting anything, deletes only files of decided groups, and is safe to repeat after a crash.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from . import records
from .layout import COMMITS, SUCCESS
from .paths import partition_of
from .stores import Store

_HIVE = re.compile(r"^(?P<task>\d{6})_(?P<attempt>\d+)(?:_copy_\d+)?(?P<ext>\..*)?$")
_SPARK = re.compile(r"^part-(?P<task>\d{5})-(?P<uuid>[0-9a-fA-F-]{36})(?:-c(?P<file>\d{3}))?(?P<ext>\..*)?$")


def _parse(name: str) -> dict[str, Any] | None:
    m = _HIVE.match(name)
    if m:
        return {"style": "hive", "task": int(m["task"]), "attempt": int(m["attempt"]), "attempt_key": m["attempt"]}
    m = _SPARK.match(name)
    if m:
        return {"style": "spark", "task": int(m["task"]), "attempt": None, "attempt_key": m["uuid"].lower()}
    return None


def _recorded_files(store: Store) -> set[str]:
    """Files some commit record says were committed: ``_SUCCESS`` manifests (root and partitions), commit logs."""
    found: set[str] = set()
    for rel, _size in store.list_files(""):
        name = rel.rsplit("/", 1)[-1]
        if name != SUCCESS and not (rel.startswith(f"{COMMITS}/") and name.endswith(".json")):
            continue
        try:
            doc = json.loads(store.read_bytes(rel))
        except ValueError:
            continue  # a 0-byte Hadoop _SUCCESS lists nothing
        if isinstance(doc, dict) and str(doc.get("format", "")).startswith(records.FORMAT):
            found.update(f["path"] for f in doc.get("files", []) if isinstance(f, dict) and "path" in f)
    return found


def find_duplicates(store: Store) -> dict[str, Any]:
    """Report duplicate task outputs under *store*'s root; changes nothing."""
    recorded = _recorded_files(store)
    groups: dict[tuple[str, str, int], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    sizes: dict[str, int] = {}
    for rel, size in store.list_files("", visible_only=True):
        info = _parse(rel.rsplit("/", 1)[-1])
        if info is None:
            continue
        sizes[rel] = size
        groups[(partition_of(rel), info["style"], info["task"])][info["attempt_key"]].append(rel)
    report: dict[str, Any] = {"root": store.url(), "groups": [], "delete": [], "ambiguous": []}
    for (part, style, task), attempts in sorted(groups.items()):
        if len(attempts) < 2:
            continue
        by_record = [key for key, files in attempts.items() if any(f in recorded for f in files)]
        if len(by_record) == 1:
            winner, reason = by_record[0], "listed in a commit record"
        elif style == "hive" and not by_record:
            winner, reason = max(attempts, key=int), "highest attempt id (no commit record)"
        else:
            report["ambiguous"].append({"partition": part, "task": task, "candidates": {
                k: sorted(v) for k, v in attempts.items()}, "why": "no single commit record and no attempt ids"})
            continue
        losers = sorted(f for key, files in attempts.items() if key != winner for f in files)
        report["groups"].append({"partition": part, "task": task, "style": style, "winner": sorted(attempts[winner]),
                                 "reason": reason, "losers": losers,
                                 "sizes": {f: sizes[f] for key in attempts for f in attempts[key]}})
        report["delete"].extend(losers)
    return report


def remove_duplicates(store: Store, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """Delete the losers of a report (made now when not given); returns the report with ``deleted``."""
    report = report or find_duplicates(store)
    for rel in report["delete"]:
        store.delete_file(rel)
    return {**report, "deleted": list(report["delete"])}
