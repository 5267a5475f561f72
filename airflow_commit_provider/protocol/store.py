"""Storage under one output root: the few operations the protocol needs, with their atomicity made explicit.

The commit coordinator is the storage itself: a task attempt wins by creating its commit record with an atomic
create-if-absent (:meth:`Store.create_exclusive`). Every store says how it provides that:

- local disk: write a temporary file, then ``os.link`` it to the record's name (atomic, fails if the name exists,
  and a reader never sees a half-written record);
- S3: PutObject with ``If-None-Match: *`` (see :mod:`.s3store`);
- fsspec's memory file system: a lock (it only exists inside one process anyway).

A file system without such an operation is refused with :class:`StorageCapabilityError` instead of being
coordinated by a check-then-write race.

All paths given to a store are relative to its root, ``/``-separated.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import IO, Any

from .errors import InvalidOutputSpec, StorageCapabilityError
from .paths import is_hidden


class Store(ABC):
    """Operations under one output root. Subclasses fix atomicity; see the module docstring."""

    #: ``True`` when :meth:`move_no_replace` exists: a move is one metadata operation that can refuse to replace
    #: (hard links on a local disk). v1 task commit then stages files next to the other tasks' committed files.
    link_moves: bool = False
    #: Threads for file moves at job commit when the caller does not choose. Renames into one local directory
    #: serialise on the directory lock, so local stores gain little from threads; object stores gain a lot.
    default_commit_threads: int = 8
    #: ``True`` for stores on which moving a file copies its bytes (object stores).
    move_copies_bytes: bool = False
    protocol: str = ""

    @abstractmethod
    def url(self, rel: str = "") -> str:
        """A full, human-readable location for *rel* (for messages and manifests)."""

    @abstractmethod
    def exists(self, rel: str) -> bool: ...

    @abstractmethod
    def isdir(self, rel: str) -> bool: ...

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """Content of a file; :class:`FileNotFoundError` when it does not exist."""

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Create or replace a file so that readers see the old or the new content, never a mix."""

    @abstractmethod
    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create a file atomically if it does not exist. ``True`` if this call created it, ``False`` if it existed."""

    @abstractmethod
    def makedirs(self, rel: str) -> None: ...

    @abstractmethod
    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        """Every file under *rel*, recursively: ``(path relative to rel, size)``. Empty when *rel* is missing.

        With *visible_only*, names with a component starting with ``_`` or ``.`` (what readers skip: the
        protocol's own records and work directories) are left out; the local disk does not even walk them.
        """

    def list_names(self, rel: str) -> list[str]:
        """The paths of :meth:`list_files` without their sizes (on a local disk: no stat per file)."""
        return [path for path, _ in self.list_files(rel)]

    @abstractmethod
    def list_dir(self, rel: str) -> list[str]:
        """Names of the direct children of *rel* (files and directories). Empty when *rel* is missing."""

    def list_dir_prefix(self, rel: str, prefix: str) -> list[str]:
        """The names of :meth:`list_dir` that start with *prefix* (object stores ask for just those)."""
        return [name for name in self.list_dir(rel) if name.startswith(prefix)]

    def marker_dirs(self, name: str) -> list[str]:
        """Every directory readers see (no hidden component) that holds a file called *name*: the ``_SUCCESS``
        markers an overwrite must withdraw. ``""`` is the root."""
        out = []
        for rel, _ in self.list_files(""):
            head, _, tail = rel.rpartition("/")
            if tail == name and not is_hidden(head):
                out.append(head)
        return sorted(out)

    def missing(self, rels: list[str]) -> list[str]:
        """Those of *rels* that do not exist: one listing per directory involved, not one request per file."""
        by_dir: dict[str, list[str]] = {}
        for rel in rels:
            head, _, name = rel.rpartition("/")
            by_dir.setdefault(head, []).append(name)
        out = []
        for head, names in by_dir.items():
            present = set(self.list_dir(head))
            out += [f"{head}/{n}" if head else n for n in names if n not in present]
        return out

    @abstractmethod
    def move_file(self, src: str, dst: str, size: int | None = None) -> None:
        """Move one file, replacing *dst*; :class:`FileNotFoundError` when *src* is missing. *size*, when known,
        feeds the bytes-copied accounting of stores on which a move is a copy."""

    @abstractmethod
    def delete_file(self, rel: str) -> None:
        """Delete one file; a missing file is not an error (deletions are repeated by resumed commits)."""

    #: ``True`` when :meth:`delete_files` deletes many files in one request (S3 DeleteObjects); such stores also
    #: offer ``copy_file(src, dst, size)``, so job commit copies everything first and deletes sources in batches.
    batch_deletes: bool = False

    def delete_files(self, rels: list[str]) -> None:
        """Delete several files; missing ones are not an error."""
        for rel in rels:
            self.delete_file(rel)

    @abstractmethod
    def delete_tree(self, rel: str) -> None:
        """Delete a directory and everything under it; missing is not an error."""

    @abstractmethod
    def remove_dir_if_empty(self, rel: str) -> bool:
        """Remove an empty directory; ``False`` when it holds anything (another job's work, say)."""

    @abstractmethod
    def open_write(self, rel: str) -> IO[bytes]:
        """A binary file object for writing a new data file (parent directories are created)."""

    def move_no_replace(self, src: str, dst: str) -> None:
        """Move a file unless *dst* holds another one (:class:`FileExistsError`); :class:`FileNotFoundError` when
        *src* is missing. Finishing a move a crash interrupted is not an error. Only where ``link_moves``."""
        raise NotImplementedError(f"{type(self).__name__} has no move that refuses to replace")

    def move_dir_if_absent(self, src: str, dst: str) -> bool:
        """Rename the directory *src* to *dst* in one step if nothing is at *dst*; ``False`` (nothing changed) when
        something is, or when the store has no directory rename (object stores: a "directory" is a prefix)."""
        return False

    def request_counts(self) -> dict[str, int]:
        """Requests made so far, by operation (object stores count them; others return nothing)."""
        return {}

    bytes_copied: int = 0

    def ensure_root(self) -> None:
        """Make sure the output root exists (the pre-task of an overwrite)."""
        self.makedirs("")


class LocalStore(Store):
    """The local disk through :mod:`os`: ``os.link`` for exclusive creation and moves that refuse to replace."""

    link_moves = True
    default_commit_threads = 1
    protocol = "file"

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))

    def _p(self, rel: str) -> str:
        # rel is "/"-separated and checked (paths.check_relative); plain concatenation is the hot path of a commit
        return f"{self.root}/{rel}" if rel else self.root

    def url(self, rel: str = "") -> str:
        return "file://" + self._p(rel)

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self._p(rel))

    def isdir(self, rel: str) -> bool:
        return os.path.isdir(self._p(rel))

    def read_bytes(self, rel: str) -> bytes:
        with open(self._p(rel), "rb") as fh:
            return fh.read()

    def _tmp_for(self, path: str) -> str:
        head, tail = os.path.split(path)
        return os.path.join(head, f".{tail}.{uuid.uuid4().hex}.tmp")

    def _write_tmp(self, path: str, data: bytes) -> str:
        self._makedirs_abs(os.path.dirname(path))
        tmp = self._tmp_for(path)
        with open(tmp, "wb") as fh:
            fh.write(data)
        return tmp

    def write_bytes(self, rel: str, data: bytes) -> None:
        path = self._p(rel)
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        path = self._p(rel)
        if os.path.lexists(path):
            return False
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    @staticmethod
    def _makedirs_abs(path: str) -> None:
        # Another job may remove an empty shared parent (``_temporary``) between our mkdir calls: retry.
        for _ in range(20):
            try:
                os.makedirs(path, exist_ok=True)
                return
            except FileNotFoundError:
                continue
        os.makedirs(path, exist_ok=True)

    def makedirs(self, rel: str) -> None:
        path = self._p(rel)
        if os.path.exists(path) and not os.path.isdir(path):
            raise InvalidOutputSpec(f"{self.url(rel)} is a file, not a directory")
        self._makedirs_abs(path)

    def _walk(self, rel: str, visible_only: bool = False) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """Every file under *rel* as (path relative to rel, directory entry); hidden subtrees pruned on request."""
        stack = [("", self._p(rel))]
        while stack:
            prefix, path = stack.pop()
            try:
                entries = list(os.scandir(path))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if visible_only and entry.name.startswith(("_", ".")):
                    continue
                name = f"{prefix}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    stack.append((name + "/", entry.path))
                else:
                    yield name, entry

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for name, entry in self._walk(rel, visible_only):
            try:
                out.append((name, entry.stat(follow_symlinks=False).st_size))
            except FileNotFoundError:
                continue
        return out

    def list_names(self, rel: str) -> list[str]:
        return [name for name, _ in self._walk(rel)]

    def marker_dirs(self, name: str) -> list[str]:
        out = []
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                entries = list(os.scandir(self._p(rel)))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if entry.name == name and not entry.is_dir(follow_symlinks=False):
                    out.append(rel)
                elif not entry.name.startswith(("_", ".")) and entry.is_dir(follow_symlinks=False):
                    stack.append(f"{rel}/{entry.name}" if rel else entry.name)
        return sorted(out)

    def list_dir(self, rel: str) -> list[str]:
        try:
            return os.listdir(self._p(rel))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _with_parent(self, op: Callable[[str, str], None], src_path: str, dst_path: str) -> None:
        """``op(src, dst)``, creating the parent directory of *dst* when that is what was missing (the common case
        is that it exists, so it is not checked first). :class:`FileNotFoundError` when *src* is missing."""
        try:
            op(src_path, dst_path)
        except FileNotFoundError:
            if not os.path.lexists(src_path):
                raise
            self._makedirs_abs(os.path.dirname(dst_path))
            op(src_path, dst_path)

    def move_file(self, src: str, dst: str, size: int | None = None) -> None:
        self._with_parent(os.replace, self._p(src), self._p(dst))

    def move_no_replace(self, src: str, dst: str) -> None:
        # link + unlink: the link fails if dst exists (rename would silently replace it). A crash between the two
        # leaves both names on one inode, which the next call recognises and finishes.
        src_path, dst_path = self._p(src), self._p(dst)
        try:
            self._with_parent(os.link, src_path, dst_path)
        except FileExistsError:
            try:
                same = os.path.samefile(src_path, dst_path)
            except FileNotFoundError:  # a concurrent completer finished this very move
                return
            if not same:
                raise FileExistsError(f"{self.url(dst)} exists; refusing to replace it with {self.url(src)}") \
                    from None
        with contextlib.suppress(FileNotFoundError):  # idem
            os.unlink(src_path)

    def move_dir_if_absent(self, src: str, dst: str) -> bool:
        src_path, dst_path = self._p(src), self._p(dst)
        if os.path.lexists(dst_path):
            return False
        try:
            self._with_parent(os.rename, src_path, dst_path)
        except FileNotFoundError:  # a concurrent committer moved it: the file moves see that
            return False
        except OSError as exc:
            # Created meanwhile: a non-empty directory (ENOTEMPTY/EEXIST) or a file (ENOTDIR); the caller then
            # merges file by file. (An empty directory created meanwhile is replaced, which loses nothing.)
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                return False
            raise
        return True

    def delete_file(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._p(rel))

    def delete_tree(self, rel: str) -> None:
        import shutil

        path = self._p(rel)
        if os.path.isdir(path) and not os.path.islink(path):
            # ignore_errors: a zombie may be writing into the tree while we remove it; what it writes stays hidden
            shutil.rmtree(path, ignore_errors=True)
        else:
            self.delete_file(rel)

    def remove_dir_if_empty(self, rel: str) -> bool:
        try:
            os.rmdir(self._p(rel))
            return True
        except OSError:
            return False

    def open_write(self, rel: str) -> IO[bytes]:
        path = self._p(rel)
        self._makedirs_abs(os.path.dirname(path))
        return open(path, "wb")


_memory_lock = threading.Lock()


class FsspecStore(Store):
    """Any fsspec file system. Exclusive creation is delegated to :meth:`_create_exclusive`, per protocol."""

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

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self._p(rel)))

    def isdir(self, rel: str) -> bool:
        return bool(self.fs.isdir(self._p(rel)))

    def read_bytes(self, rel: str) -> bytes:
        return bytes(self.fs.cat_file(self._p(rel)))

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(self._p(rel), data)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        if self.protocol == "memory":
            with _memory_lock:
                if self.fs.exists(self._p(rel)):
                    return False
                self.fs.pipe_file(self._p(rel), data)
                return True
        raise StorageCapabilityError(
            f"{self.url()} ({type(self.fs).__name__}) offers no atomic create-if-absent, so commit coordination "
            "cannot be guaranteed on it; supported: local disk, S3, memory")

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


def store_for(target: Any, *, fs: Any = None, storage_options: dict[str, Any] | None = None) -> Store:
    """The store for an output root given as a local path, a URL (``memory://``, ``s3://``) or an fsspec object.

    *fs* wins when given (the Airflow hooks resolve it from a connection); otherwise the URL is resolved by fsspec.
    """
    if isinstance(target, Store):
        return target
    target = os.fspath(target) if not isinstance(target, str) and hasattr(target, "__fspath__") else target
    if not isinstance(target, str) or not target.strip():
        raise InvalidOutputSpec(f"output root must be a non-empty path or URL, got {target!r}")
    if "\x00" in target:
        raise InvalidOutputSpec(f"output root {target!r} contains a NUL character")
    if fs is None:
        if "://" not in target:
            return LocalStore(target)
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(target, **(storage_options or {}))
        except (ValueError, ImportError) as exc:
            raise InvalidOutputSpec(f"cannot resolve a file system for {target!r}: {exc}") from exc
    else:
        path = fs._strip_protocol(target)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return LocalStore(path)
    if protocol in ("s3", "s3a"):
        from .s3store import S3Store

        return S3Store(fs, path)
    return FsspecStore(fs, path)
