"""The local disk: ``os.link`` for exclusive creation, hard-link moves that refuse to replace, directory renames."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Callable, Container, Iterator, Sequence
from typing import IO

from ..errors import InvalidOutputSpec
from .base import Store


#: one read takes a whole record (records are a few hundred bytes; a manifest may be megabytes)
_FIRST_READ = 1 << 16


class LocalStore(Store):
    """The local disk through :mod:`os`: ``os.link`` for exclusive creation and moves that refuse to replace."""

    link_moves = True
    renames_directories = True
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
        # Plain system calls: job commit reads one small record per task (10,000 and more), and Python's buffered
        # file object costs twice the reads themselves. Read until end of file: a network file system may return
        # less than asked before it.
        fd = os.open(self._p(rel), os.O_RDONLY)
        try:
            parts = []
            while chunk := os.read(fd, _FIRST_READ if not parts else 1 << 20):
                parts.append(chunk)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            os.close(fd)

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
        return self._sized(self._walk(rel, visible_only))

    @staticmethod
    def _sized(walk: Iterator[tuple[str, os.DirEntry[str]]], skip: Container[str] = ()) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for name, entry in walk:
            if name in skip:
                continue
            try:
                out.append((name, entry.stat(follow_symlinks=False).st_size))
            except FileNotFoundError:
                continue
        return out

    def list_names(self, rel: str) -> list[str]:
        return [name for name, _ in self._walk(rel)]

    def visible_names(self) -> list[str]:
        return [name for name, _ in self._walk("", True)]

    def visible_files_except(self, skip: Container[str]) -> list[tuple[str, int]]:
        return self._sized(self._walk("", True), skip)

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

    def file_versions(self, rels: Sequence[str]) -> dict[str, tuple[int, str]]:
        """A stat per file: the version is the inode and the modification time in nanoseconds (a file replaced
        under its name, by a rename or a rewrite, changes one of them; a hard-link move changes neither)."""
        out = {}
        for rel in rels:
            try:
                st = os.stat(self._p(rel), follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if not stat.S_ISDIR(st.st_mode):
                out[rel] = (st.st_size, f"{st.st_ino}:{st.st_mtime_ns}")
        return out

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
