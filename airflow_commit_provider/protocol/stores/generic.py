"""Any fsspec file system; exclusive creation only where the file system can give it (memory: a lock)."""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Sequence
from typing import IO, Any

from ..errors import InvalidOutputSpec, StorageCapabilityError
from ..paths import by_directory, is_hidden
from .base import Store

_memory_lock = threading.Lock()


class FsspecStore(Store):
    """Any fsspec file system. Exclusive creation is :meth:`_create_new`, per protocol."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = protocol
        self.root = fs._strip_protocol(root).rstrip("/")

    def _p(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def url(self, rel: str = "") -> str:
        return f"{self.protocol}://{self._p(rel).lstrip('/')}" if self.protocol != "memory" else \
            f"memory://{self._p(rel)}"

    def parent(self) -> FsspecStore | None:
        head = self.root.rpartition("/")[0]
        if not head.strip("/"):
            return None
        up = copy.copy(self)
        up.root = head
        return up

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self._p(rel)))

    def isdir(self, rel: str) -> bool:
        return bool(self.fs.isdir(self._p(rel)))

    def read_bytes(self, rel: str) -> bytes:
        return bytes(self.fs.cat_file(self._p(rel)))

    def read_tail(self, rel: str, size: int) -> bytes:
        return bytes(self.fs.tail(self._p(rel), size))

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(self._p(rel), data)

    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        if self.protocol == "memory":
            with _memory_lock:
                if self.fs.exists(self._p(rel)):
                    raise FileExistsError(self.url(rel))
                self.fs.pipe_file(self._p(rel), data)
                return
        raise StorageCapabilityError(
            f"{self.url()} ({type(self.fs).__name__}) offers no atomic create-if-absent, so commit coordination "
            "cannot be guaranteed on it; supported: local disk, S3, Google Cloud Storage, Azure Blob Storage, memory")

    def makedirs(self, rel: str) -> None:
        path = self._p(rel)
        if self.fs.isfile(path):
            raise InvalidOutputSpec(f"{self.url(rel)} is a file, not a directory")
        self.fs.makedirs(path, exist_ok=True)

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        base = self._p(rel)
        try:
            found = self.fs.find(base, detail=True, withdirs=False)
        except FileNotFoundError:
            return []
        prefix = base.rstrip("/") + "/"
        out = []
        for path, info in found.items():
            if path.startswith(prefix) and not (visible_only and is_hidden(path[len(prefix):])):
                out.append((path[len(prefix):], int(info.get("size") or 0)))
        return out

    def list_dir(self, rel: str) -> list[str]:
        try:
            return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self._p(rel), detail=False)]
        except FileNotFoundError:
            return []

    def file_versions(self, rels: Sequence[str]) -> dict[str, tuple[int, str]]:
        """One detailed listing per directory; the version is the ETag where the file system has one (S3),
        else its modification or creation time."""
        out = {}
        for head, names in by_directory(rels).items():
            try:
                entries = self.fs.ls(self._p(head), detail=True)
            except FileNotFoundError:
                continue
            for info in entries:
                name = info["name"].rstrip("/").rsplit("/", 1)[-1]
                if name in names and info.get("type") != "directory":
                    version = next((str(info[k]) for k in ("ETag", "etag", "mtime", "LastModified", "created")
                                    if info.get(k) is not None), "")
                    out[f"{head}/{name}" if head else name] = (int(info.get("size") or 0), version)
        return out

    def move_file(self, src: str, dst: str, size: int | None = None) -> None:
        src_path = self._p(src)
        if not self.fs.exists(src_path):
            raise FileNotFoundError(self.url(src))
        self.fs.mv(src_path, self._p(dst))

    def delete_file(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._p(rel))

    def delete_tree(self, rel: str) -> None:
        path = self._p(rel)
        with contextlib.suppress(FileNotFoundError):
            if self.fs.isdir(path):
                self.fs.rm(path, recursive=True)
            elif self.fs.exists(path):
                self.fs.rm_file(path)

    def remove_dir_if_empty(self, rel: str) -> bool:
        path = self._p(rel)
        try:
            if self.fs.ls(path, detail=False):
                return False
            self.fs.rmdir(path)
            return True
        except (FileNotFoundError, OSError):
            return False

    def open_write(self, rel: str) -> IO[bytes]:
        path = self._p(rel)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        return self.fs.open(path, "wb")
