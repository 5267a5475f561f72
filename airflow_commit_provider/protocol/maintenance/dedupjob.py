"""A deduplication plan carried out as a job of the protocol: recorded, marker-safe, resumable at every step.

::

    create the plan (exclusive) -> withdraw markers -> delete (each file re-checked) -> rewrite markers -> remove plan
           dedup.after_plan      dedup.after_withdraw    dedup.mid_delete / after_deletes   dedup.after_markers

Like a job commit (:mod:`.jobcommit`): the plan is fixed and created exclusively (:data:`~.layout.DEDUP_PLAN`)
before anything visible changes, so two deduplications of one root cannot run at once and a run killed at any
point is finished by the next one, which reads the same plan and runs every step again (each is idempotent).
Every ``_SUCCESS`` above a deletion is withdrawn before the first deletion (I9) and written back after the last,
without the deleted files: from the newest marker there (a job may have committed meanwhile) or the one the plan
saved. A marker is written back only if it then describes its directory exactly; one that does not (the
directory changed under it for another reason, or it is a marker this provider cannot read) stays withdrawn, and
the result says why. Nor is a withdrawn marker brought back where a job of this provider is about to change the
directory and write it itself: a job commit under way (its plan names the markers it withdrew), a v2 job in its
write stage, or, on a first run, a marker somebody withdrew between the plan and the withdrawal.

Each deletion is re-checked against a listing taken just before the deletions: the file must still have the
size the plan saw, and every file kept in its place must still be there with its size; otherwise it is skipped
and reported (deleting it could now lose its rows). Hadoop's hidden checksum of a deleted file (``.<name>.crc``)
goes with it, as Hadoop's own deletion takes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import records
from .dedupplan import DedupPlan
from ..errors import CorruptRecord, DedupInProgress, InvalidOutputSpec
from ..faults import inject
from ..layout import DEDUP_PLAN, SUCCESS, TEMPORARY
from ..records.success import files_under, listing_mismatch, withdraw_markers
from ..records.underway import markers_changing
from ..paths import join, partition_of
from ..stores import Store


def stored_plan(store: Store) -> DedupPlan | None:
    """The plan of a deduplication of this root that started and has not finished, if any."""
    return DedupPlan.read(store, DEDUP_PLAN)


def _read_marker(store: Store, directory: str) -> bytes | None:
    try:
        return store.read_bytes(join(directory, SUCCESS))
    except FileNotFoundError:
        return None


def _rewritten(base: bytes, directory: str, gone: set[str], listing: Mapping[str, int],
               plan_id: str) -> tuple[bytes | None, str]:
    """The marker *base* without the deleted files, if it then describes *directory* exactly; else ``None``
    and why it stays withdrawn."""
    where = f"{directory + '/' if directory else ''}{SUCCESS}"
    if not base:
        return base, "a 0-byte marker (Hadoop, Spark) lists nothing"
    try:
        doc = json.loads(base)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, f"{where} is not JSON: this provider cannot tell what it lists"
    try:
        doc = records.validate_success(doc, where)
    except CorruptRecord as exc:  # another writer's manifest, or a damaged one
        return None, f"{exc}: this provider cannot tell what it lists"
    clash = sorted(gone & {f["path"] for f in doc["files"]})
    if clash:
        return None, f"{where} lists {clash[:3]} among its job's own files"
    retained = [f for f in doc.get("retained") or [] if f["path"] not in gone]
    removed = len(doc.get("retained") or []) - len(retained)
    doc["retained"] = retained
    doc["diagnostics"] = {**doc["diagnostics"], "retained_files": len(retained)}
    if removed:
        doc["diagnostics"]["deduplicated"] = {"plan_id": plan_id, "retained_removed": removed}
    problem = listing_mismatch(files_under(listing, directory), doc, where)
    if problem:
        return None, problem
    return records.encode(doc), f"written back without {removed} deleted file(s)"


def _delete(store: Store, plan: DedupPlan) -> tuple[list[str], list[dict[str, str]]]:
    """The plan's deletions, each re-checked; returns the planned files now gone and the skipped ones (why)."""
    listing = dict(store.list_files("", visible_only=True))
    gone, skipped = [], []
    for d in plan.deletions:
        if d.path not in listing:
            gone.append(d.path)  # an earlier run of this plan (or someone else) deleted it
            continue
        if listing[d.path] != d.size:
            skipped.append({"path": d.path, "why": f"it has {listing[d.path]} bytes, not the {d.size} the plan saw: "
                                                   "another file took its name since"})
            continue
        changed = [k for k, size in d.keep if listing.get(k) != size]
        if changed:
            skipped.append({"path": d.path, "why": f"the file(s) kept in its place, {changed}, are gone or changed "
                                                   "since the plan: deleting it could lose its rows"})
            continue
        store.delete_file(d.path)
        head, _, name = d.path.rpartition("/")
        store.delete_file(join(head, f".{name}.crc"))  # Hadoop's checksum of it (ChecksumFileSystem), if any
        gone.append(d.path)
        inject("dedup.mid_delete")
    for directory in sorted({partition_of(p) for p in gone} - {""}, key=lambda p: -p.count("/")):
        while directory and store.remove_dir_if_empty(directory):
            directory = partition_of(directory)
    return gone, skipped


def run_plan(store: Store, plan: DedupPlan) -> dict[str, Any]:
    """Carry out *plan* (or finish it, when its record is already there); returns its report with ``applied``."""
    if plan.root != store.url():
        raise InvalidOutputSpec(f"deduplication plan {plan.plan_id} was made for {plan.root}, not {store.url()}")
    applied: dict[str, Any] = {"resumed": False, "deleted": [], "skipped": [], "markers": []}
    if not plan.deletions:
        return {**plan.to_doc(), "applied": applied}
    # a link or another volume below the root: refused before the first change, as a job commit refuses it
    store.check_tree(visible=True)
    applied["resumed"] = _claim(store, plan)
    inject("dedup.after_plan")
    # What is written back is the newest marker of each directory: one a job committed since the plan was made,
    # or one an earlier run of this plan already wrote back. A marker that is gone now was withdrawn by a job
    # that is changing the directory (its commit writes it): on a first run it is not brought back; a resumed run
    # cannot tell that from its own earlier withdrawal and takes the one the plan saved.
    bases = {}
    for d in plan.withdraw:
        current = _read_marker(store, d)
        base = current if current is not None or not applied["resumed"] else plan.markers.get(d)
        if base is not None:
            bases[d] = base
    withdraw_markers(store, plan.withdraw)
    inject("dedup.after_withdraw")
    gone, applied["skipped"] = _delete(store, plan)
    applied["deleted"] = gone
    inject("dedup.after_deletes")
    applied["markers"] = _write_back(store, plan, bases, set(gone))
    inject("dedup.after_markers")
    store.delete_file(DEDUP_PLAN)
    store.remove_dir_if_empty(TEMPORARY)
    return {**plan.to_doc(), "pending": False, "applied": applied}


def _claim(store: Store, plan: DedupPlan) -> bool:
    """Create the plan's record; ``True`` when it was there already (a resumed run of the same plan)."""
    for _ in range(3):
        if store.create_exclusive(DEDUP_PLAN, plan.to_json()):
            return False
        stored = stored_plan(store)
        if stored is not None:
            if stored.plan_id != plan.plan_id:
                raise DedupInProgress(f"deduplication plan {stored.plan_id} of {store.url()} (created "
                                      f"{stored.created}) started before plan {plan.plan_id}; it runs first")
            return True
    raise DedupInProgress(f"the deduplication plan record of {store.url()} keeps appearing and going: another "
                          "deduplication runs; run again")


def _write_back(store: Store, plan: DedupPlan, bases: Mapping[str, bytes], gone: set[str]) -> list[dict[str, Any]]:
    """Write the markers back without the deleted files (each only if it then describes its directory), the root
    last; returns what happened to each."""
    done = []
    changing = markers_changing(store)
    committing, everywhere = changing.dirs, changing.everywhere
    listing = dict(store.list_files("", visible_only=True))
    for d in sorted(plan.withdraw, key=lambda p: (-p.count("/") if p else 1, p)):  # the root last
        current = _read_marker(store, d)  # written by a job that committed after the withdrawal
        base = current if current is not None else bases.get(d)
        if base is None:
            continue
        if current is None:
            busy = None
            if d in committing:
                busy = "a job commit of this provider is under way: it withdrew this marker and writes it last"
            elif everywhere is not None:
                busy = everywhere
            elif d and not store.isdir(d):
                busy = "its directory is gone: the deletions emptied it"
            if busy:
                done.append({"directory": d, "written": False, "why": busy})
                continue
        data, why = _rewritten(base, d, gone, listing, plan.plan_id)
        if data is None:
            if current is not None:
                store.delete_file(join(d, SUCCESS))
            done.append({"directory": d, "written": False, "why": why})
            continue
        if data != current:
            store.write_bytes(join(d, SUCCESS), data)
        done.append({"directory": d, "written": True, "why": why})
    return done
