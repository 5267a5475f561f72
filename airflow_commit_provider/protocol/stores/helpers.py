"""What the protocol builds on a store's primitives and no store needs to do its own way.

:class:`~.base.Store` is the port: the primitives each store implements (abstract), and the operations a store may
do faster than their default built on those primitives (the local disk's listings without a stat, S3's batched
deletes). What no store specialises lives here, as functions of a store, so the port stays the list of what a
store author writes or may tune.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..paths import by_directory, partition_of

if TYPE_CHECKING:
    from .base import Store


def missing(store: Store, rels: Iterable[str]) -> list[str]:
    """Those of *rels* that do not exist on *store*: one listing per directory involved, not one request per file.
    In the order given."""
    rels = list(rels)
    present = {head: set(store.list_dir(head)) for head in by_directory(rels)}
    out = []
    for rel in rels:
        head, _, name = rel.rpartition("/")
        if name not in present[head]:
            out.append(rel)
    return out


def delete_and_prune(store: Store, rels: Sequence[str], threads: int, after_each: Callable[[], None]) -> None:
    """Delete files (:meth:`~.base.Store.delete_many`), then the directories that became empty, deepest first: what
    a job commit's deletions and an abort's sweep leave is no empty partition directory."""
    store.delete_many(rels, threads, after_each)
    with store.batch():
        for d in sorted({partition_of(p) for p in rels} - {""}, key=lambda p: -p.count("/")):
            while d and store.remove_dir_if_empty(d):
                d = partition_of(d)
