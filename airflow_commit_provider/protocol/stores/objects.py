"""What the object stores reached through an fsspec file system share (Google Cloud Storage, Azure Blob Storage):
no directories, listings by prefix that are never taken from the file system's cache (another process's writes
would leave it stale), publishing as a server-side copy of every file then a batched delete of the sources. Each
store names its create-if-absent and its copy (:class:`FsspecObjectStore`'s two abstract methods)."""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidOutputSpec
from ..paths import by_directory, is_hidden
from .copying import CopyPublishing
from .generic import FsspecStore


def fresh_filesystem(cls: type, options: Mapping[str, Any] | None) -> Any:
    """A new instance of the fsspec file system *cls* with *options* laid over fsspec's configuration (e.g.
    ``FSSPEC_GS_TOKEN``), never one from fsspec's instance cache: a store must not share another's client."""
    from fsspec.config import apply_config

    kwargs = apply_config(cls, dict(options or {}))
    kwargs.setdefault("skip_instance_cache", True)
    return cls(**kwargs)


class FsspecObjectStore(CopyPublishing, FsspecStore):
    """An output root in a bucket or container of an fsspec object store."""

    default_commit_threads = 16
    lists_by_prefix = True
    resends_requests = True
    #: the keys of a listing entry that name the object's version, in order of preference
    version_keys: tuple[str, ...] = ("etag",)

    def __init__(self, fs: Any, root: str, protocol: str) -> None:
        super().__init__(fs, root)
        self.protocol = protocol
        self.bucket, _, self.prefix = self.root.partition("/")
        self._lock = threading.Lock()
        self.bytes_copied = 0

    @abstractmethod
    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        """The store's create-if-absent: :class:`FileExistsError` when the object exists."""

    @abstractmethod
    def _copy(self, src: str, dst: str) -> None:
        """A server-side copy of one object (full paths), complete when it returns; :class:`FileNotFoundError`
        when the source is gone."""

    def parent(self) -> FsspecObjectStore | None:
        up = super().parent()
        if up is not None:
            up.bucket, _, up.prefix = up.root.partition("/")   # type: ignore[attr-defined]
        return up  # type: ignore[return-value]

    # ---------------------------------------------------------------- reads (never from the listing cache)
    def exists(self, rel: str) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.exists(self._p(rel)))

    def isdir(self, rel: str) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.isdir(self._p(rel)))

    def _ls(self, rel: str) -> list[dict[str, Any]]:
        """One level under *rel*: objects and prefixes, as the file system describes them, fresh."""
        self.fs.invalidate_cache()
        try:
            return list(self.fs.ls(self._p(rel), detail=True))
        except FileNotFoundError:
            return []

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        """Every object under *rel* with its size (folder placeholders ``name/`` left out)."""
        self.fs.invalidate_cache()
        base = self._p(rel).rstrip("/")
        try:
            found = self.fs.find(base, detail=True, withdirs=False)
        except FileNotFoundError:
            return []
        if not isinstance(found, dict):
            # adlfs: the name is also a blob (a 0-byte one other tools leave for a folder), and it returns that
            # blob's name alone, not what lies below: say so, as the set-up does, rather than list nothing
            raise InvalidOutputSpec(f"{self.url(rel)} is a file, not a directory (a blob of that very name hides "
                                    "what lies below it from listings): remove or rename that blob")
        prefix = base + "/"
        out = []
        for path, info in found.items():
            name = path[len(prefix):] if path.startswith(prefix) else None
            if not name or name.endswith("/") or info.get("type") == "directory":
                continue
            if not (visible_only and is_hidden(name)):
                out.append((name, int(info.get("size") or 0)))
        return out

    def list_dir(self, rel: str) -> list[str]:
        base = self._p(rel).rstrip("/") + "/"
        names = []
        for info in self._ls(rel):
            path = info["name"].rstrip("/")
            if path + "/" == base:   # the folder placeholder itself
                continue
            names.append(path.rsplit("/", 1)[-1])
        return names

    def list_dir_prefix(self, rel: str, prefix: str) -> list[str]:
        return [n for n in self.list_dir(rel) if n.startswith(prefix)]

    def file_versions(self, rels: Sequence[str]) -> dict[str, tuple[int, str]]:
        """One listing per directory; the version is what the store changes on every write of the object."""
        out = {}
        for head, names in by_directory(rels).items():
            for info in self._ls(head):
                name = info["name"].rstrip("/").rsplit("/", 1)[-1]
                if name in names and info.get("type") != "directory":
                    version = next((str(info[k]) for k in self.version_keys if info.get(k) is not None), "")
                    out[f"{head}/{name}" if head else name] = (int(info.get("size") or 0), version)
        return out

    # ---------------------------------------------------------------- writes
    def write_bytes(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(self._p(rel), data)

    def makedirs(self, rel: str) -> None:
        """No directories in a bucket; only the root gets a placeholder (:meth:`ensure_root`)."""

    def ensure_root(self) -> None:
        """A zero-byte ``<root>/`` placeholder, so the target exists with nothing under it (the pre-task's
        guarantee: a retried overwrite never finds its target gone)."""
        self.fs.invalidate_cache()
        if self.prefix and not self.fs.exists(self.root + "/"):
            self.fs.pipe_file(self.root + "/", b"")
        self.fs.invalidate_cache()

    def copy_file(self, src: str, dst: str, size: int | None = None) -> None:
        try:
            self._copy(self._p(src), self._p(dst))
        except FileNotFoundError:
            raise FileNotFoundError(self.url(src)) from None
        with self._lock:
            self.bytes_copied += size or 0

    def move_file(self, src: str, dst: str, size: int | None = None) -> None:
        """A server-side copy, then the delete of the source."""
        self.copy_file(src, dst, size)
        self.delete_file(src)

    def delete_file(self, rel: str) -> None:
        try:
            self.fs.rm_file(self._p(rel))
        except FileNotFoundError:
            pass

    def delete_files(self, rels: list[str]) -> None:
        """The file system's batched deletes; a missing object is no error (deleting is idempotent here)."""
        if rels:
            try:
                self.fs.rm([self._p(r) for r in rels])
            except FileNotFoundError:   # none of them was there (any other error is raised first)
                pass
            self.fs.invalidate_cache()

    def delete_tree(self, rel: str) -> None:
        self.delete_files([f"{rel}/{p}" for p, _ in self.list_files(rel)])

    def remove_dir_if_empty(self, rel: str) -> bool:
        return not self.list_files(rel)

    def open_write(self, rel: str) -> Any:
        return self.fs.open(self._p(rel), "wb")


__all__ = ["FsspecObjectStore", "fresh_filesystem"]
