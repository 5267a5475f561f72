"""What makes a local change survive a power cut, not only a process kill: the fsync discipline of the local store.

A process kill never loses a write (the page cache survives it); a power cut loses whatever the kernel had not
written back, in any order: on ext4 with its defaults (data=ordered, delayed allocation) a rename or link reaches
the disk before the data of the file it names, so a crash leaves the new names on empty files. The rules, after
SQLite's and PostgreSQL's:

1. a file's data is durable (``fsync``) before any name that publishes it (rename, link, record, marker);
2. a directory is fsynced after an entry is created, renamed or removed in it, before anything that depends on
   that entry is done;
3. new data is durable before old data is deleted (a consequence of 2: a stage's moves are synced before the
   next stage deletes);
4. ``_SUCCESS`` is written durably, and last.

:class:`DirSync` makes rule 2 cheap: an operation reports each directory it changed; outside a batch the directory
is fsynced at once, inside one (:meth:`DirSync.batch`, per thread) it is fsynced once when the batch ends, however
many entries changed in it. A batch must not contain an operation that depends on an earlier one of the same
batch being durable; the store's own two-step moves (link, then unlink) sync between their steps themselves.

An ``fsync`` that fails is never retried and never ignored: after a failed ``fsync`` Linux may drop the dirty
pages and report success the next time (PostgreSQL's "fsyncgate"); the error propagates, and the step that needed
it did not happen.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator


def fsync_file(path: str) -> None:
    """Make a file's data and size durable. A read-only descriptor is enough on Linux (fsync acts on the inode)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Make a directory's entries durable (what was created, renamed or removed in it). A directory that is gone
    has nothing left to make durable: its removal is its parent's entry."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirSync:
    """The directories whose changed entries must reach the disk: fsynced at once, or at the end of this thread's
    batch. Disabled (``enabled=False``), nothing is fsynced: a scratch target that may be lost with the machine."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._local = threading.local()

    def changed(self, *dirs: str) -> None:
        """Entries of *dirs* were created, renamed or removed."""
        self.changed_all(dirs)

    def changed_all(self, dirs: Iterable[str]) -> None:
        if not self.enabled:
            return
        pending: set[str] | None = getattr(self._local, "pending", None)
        if pending is not None:
            pending.update(dirs)
            return
        for d in sorted(set(dirs)):
            fsync_dir(d)

    def now(self, *dirs: str) -> None:
        """Fsync *dirs* now, batch or not: the caller's next step depends on their entries."""
        if self.enabled:
            for d in dirs:
                fsync_dir(d)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Defer the directory fsyncs of this thread's operations to the end of the block: each directory once.
        Nested batches join the outer one. When the block raises, nothing is fsynced: the caller does not go on
        to a step that depends on it."""
        if not self.enabled or getattr(self._local, "pending", None) is not None:
            yield
            return
        self._local.pending = pending = set()
        try:
            yield
        finally:
            self._local.pending = None
        for d in sorted(pending):
            fsync_dir(d)


__all__ = ["DirSync", "fsync_dir", "fsync_file"]
