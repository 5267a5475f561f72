"""Publishing and deleting on stores that have no rename and delete in batches (the object stores)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..parallel import parallel


class CopyPublishing:
    """Mixed in before :class:`~.base.Store`: a move is a server-side copy, and deletes go in batches of
    :attr:`delete_batch` keys, one request each (the store's :meth:`delete_files` sends one)."""

    #: keys one batched delete request takes
    delete_batch = 100

    def delete_many(self: Any, rels: Sequence[str], threads: int, after_each: Callable[[], None]) -> None:
        """A batch per request; *after_each* after each request."""
        for i in range(0, len(rels), self.delete_batch):
            self.delete_files(list(rels[i:i + self.delete_batch]))
            after_each()

    def publish_files(self: Any, moves: Sequence[tuple[str, str, int | None]], threads: int,
                      after_each: Callable[[], None]) -> None:
        """Copy every file (parallel; a source already gone whose copy is there was moved by an earlier try), then
        delete the sources in batches. A crash in between copies again on resume (the sources are still there):
        same result, no loss."""
        def copy(item: tuple[str, str, int | None]) -> None:
            src, dst, size = item
            try:
                self.copy_file(src, dst, size)
            except FileNotFoundError:
                if not self.exists(dst):
                    raise
                return
            after_each()

        parallel(copy, list(moves), threads)
        self.delete_files([src for src, _, _ in moves])
