"""S3 through s3fs: conditional writes coordinate, files move one by one, the root gets a directory marker.

S3 has no rename: a move is CopyObject plus DeleteObject, and s3fs's recursive ``mv`` copies and then fails on the
directory key without deleting the sources (duplicates), so every move here is one explicit file.
Exclusive creation is PutObject with ``If-None-Match: *`` (s3fs ``mode="create"``), which S3 and moto honour.
"""

from __future__ import annotations

from typing import Any

from .store import FsspecStore


class S3Store(FsspecStore):
    """An output root on S3."""

    move_copies_bytes = True
    default_commit_threads = 16

    def __init__(self, fs: Any, root: str) -> None:
        super().__init__(fs, root)
        self.protocol = "s3"

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        try:
            self.fs.pipe_file(self._p(rel), data, mode="create")
            return True
        except FileExistsError:
            return False

    def isdir(self, rel: str) -> bool:
        return bool(self.fs.isdir(self._p(rel)))

    def makedirs(self, rel: str) -> None:
        """S3 has no directories; only the root gets a marker (see :meth:`ensure_root`)."""

    def ensure_root(self) -> None:
        """Write a zero-byte ``<root>/`` directory marker so the target "exists" even with no data under it."""
        if "/" in self.root and not self.fs.exists(self.root + "/"):
            self.fs.pipe_file(self.root + "/", b"")
        self.fs.invalidate_cache(self.root)

    def move_file(self, src: str, dst: str) -> None:
        src_path = self._p(src)
        try:
            self.fs.copy(src_path, self._p(dst))
        except FileNotFoundError:
            raise FileNotFoundError(self.url(src)) from None
        self.fs.rm_file(src_path)

    def delete_tree(self, rel: str) -> None:
        files = [f"{self._p(rel)}/{p}" for p, _ in self.list_files(rel)]
        if files:
            self.fs.rm(files)
        self.fs.invalidate_cache(self._p(rel))

    def remove_dir_if_empty(self, rel: str) -> bool:
        return not self.list_files(rel)

    def open_write(self, rel: str) -> Any:
        return self.fs.open(self._p(rel), "wb")
