"""The local disk: ``os.link`` for exclusive creation, hard-link moves that refuse to replace, directory renames.

Every change is durable when the call returns (see :mod:`.durability`: files fsynced before a name publishes them,
directories fsynced after their entries change), unless the store was made with ``durable=False``. The tree the
protocol works in is checked before anything visible changes (:meth:`LocalStore.check_tree`): no symlink and no
other volume below the root, so that nothing is ever created, moved or deleted outside it and a rename never
fails with ``EXDEV`` half way through a commit.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import shutil
import stat
from collections.abc import Callable, Container, Iterable, Sequence
from typing import IO

from ..errors import InvalidOutputSpec
from ..parallel import parallel
from .base import Store
from .durability import DirSync, fsync_file
from .localtree import check_tree, sized, visible_entries, walk

#: one read takes a whole record (records are a few hundred bytes; a manifest may be megabytes)
_FIRST_READ = 1 << 16


def _read_to_end(fd: int) -> bytes:
    """The rest of an open file. Plain system calls: job commit reads one small record per task (10,000 and more),
    and Python's buffered file object costs twice the reads themselves. Read until end of file: a network file
    system may return less than asked before it."""
    parts = []
    while chunk := os.read(fd, _FIRST_READ if not parts else 1 << 20):
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)
#: what makes :meth:`LocalStore._tmp_for`'s names unique across processes and hosts, and within this process
_TMP_TAG = os.urandom(6).hex()
_TMP_SEQ = itertools.count()


class LocalStore(Store):
    """The local disk through :mod:`os`: ``os.link`` for exclusive creation and moves that refuse to replace."""

    link_moves = True
    cuts_first_reads = True
    renames_directories = True
    has_directories = True
    default_commit_threads = 1
    protocol = "file"

    def __init__(self, root: str, *, durable: bool = True) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        #: ``False`` for scratch targets: nothing is fsynced, a power cut may then lose committed output
        self.durable = durable
        self._sync = DirSync(durable)

    @functools.cached_property
    def name_max(self) -> int:  # type: ignore[override]
        """The file system's longest name (255 on ext4, xfs, btrfs, tmpfs; 143 on eCryptfs), from the nearest
        existing directory at or above the root."""
        head = self.root
        while not os.path.isdir(head) and os.path.dirname(head) != head:
            head = os.path.dirname(head)
        try:
            return int(os.pathconf(head, "PC_NAME_MAX"))
        except (OSError, ValueError):
            return 255

    def _p(self, rel: str) -> str:
        # rel is "/"-separated and checked (paths.check_relative); plain concatenation is the hot path of a commit
        return f"{self.root}/{rel}" if rel else self.root

    def url(self, rel: str = "") -> str:
        return "file://" + self._p(rel)

    def parent(self) -> LocalStore | None:
        head = os.path.dirname(self.root)
        return None if head == self.root else LocalStore(head, durable=self.durable)

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self._p(rel))

    def isdir(self, rel: str) -> bool:
        return os.path.isdir(self._p(rel))

    def read_bytes(self, rel: str) -> bytes:
        fd = os.open(self._p(rel), os.O_RDONLY)
        try:
            return _read_to_end(fd)
        finally:
            os.close(fd)

    def read_in_dir(self, rel: str, names: Sequence[str]) -> list[bytes | None]:
        return self._read_in_dir(rel, names, whole=True)

    def read_in_dir_once(self, rel: str, names: Sequence[str]) -> list[bytes | None]:
        return self._read_in_dir(rel, names, whole=False)

    def _read_in_dir(self, rel: str, names: Sequence[str], whole: bool) -> list[bytes | None]:
        # each name opened relative to the directory, opened once: the kernel then does not walk the whole path
        # again for every record (a fifth of the time of reading 10,000 task records); without *whole*, a read
        # that filled less than it asked is taken as the end of the file (one system call less per record)
        try:
            dir_fd = os.open(self._p(rel), os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return [None] * len(names)
        try:
            out: list[bytes | None] = []
            for name in names:
                try:
                    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
                except FileNotFoundError:
                    out.append(None)
                    continue
                try:
                    if whole:
                        out.append(_read_to_end(fd))
                    else:
                        first = os.read(fd, _FIRST_READ)
                        out.append(first if len(first) < _FIRST_READ else first + _read_to_end(fd))
                finally:
                    os.close(fd)
            return out
        finally:
            os.close(dir_fd)

    def read_tail(self, rel: str, size: int) -> bytes:
        fd = os.open(self._p(rel), os.O_RDONLY)
        try:
            end = os.fstat(fd).st_size
            start = max(0, end - size)
            parts = []
            while start < end and (chunk := os.pread(fd, end - start, start)):
                parts.append(chunk)
                start += len(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    def _tmp_for(self, path: str) -> str:
        """A hidden name beside *path* that no other writer uses: this process's random tag and pid (a forked
        child has another) and a counter, cheaper than a uuid per record."""
        head, _, tail = path.rpartition("/")
        return f"{head}/.{tail}.{_TMP_TAG}{os.getpid():x}.{next(_TMP_SEQ):x}.tmp"

    def _write_tmp(self, path: str, data: bytes) -> str:
        """*data* in a new hidden file beside *path*, durable before any name publishes it; a failed write (a full
        disk) leaves nothing behind. Plain system calls: a task attempt writes one such record, and Python's
        file object costs more than the three calls it makes."""
        tmp = self._tmp_for(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileNotFoundError:   # the directory is missing: made only then (a stat saved on every write)
            self._makedirs_abs(os.path.dirname(path))
            fd = os.open(tmp, flags, 0o666)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self.durable:
                    os.fsync(fd)
            finally:
                os.close(fd)   # an error it reports (a network file system's deferred write) fails the write too
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def write_bytes(self, rel: str, data: bytes) -> None:
        path = self._p(rel)
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)
        self._sync.changed(os.path.dirname(path))

    def touch(self, rel: str) -> None:
        path = self._p(rel)
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o666)
        except FileNotFoundError:
            self._makedirs_abs(os.path.dirname(path))
            fd = os.open(path, flags, 0o666)
        os.close(fd)
        self._sync.changed(os.path.dirname(path))

    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        """A hard link to the new name: atomic, and refused when the name exists (a local system call has no
        lost answer: :class:`FileExistsError` here is always another writer's file)."""
        path = self._p(rel)
        if like is not None:
            try:
                os.link(self._p(like), path)   # its data is durable already: it was written as below
                self._sync.changed(os.path.dirname(path))
                return
            except FileNotFoundError:
                pass   # the directory is missing (or *like* is): write the data
        # no look first: the link below is the arbiter, and a name that exists is the rare case
        try:
            tmp = self._write_tmp(path, data)
        except OSError as exc:
            if os.path.lexists(path):   # the answer needs no byte: a full disk or a read-only one still gives it
                raise FileExistsError(path) from exc
            raise
        try:
            os.link(tmp, path)
        finally:
            os.unlink(tmp)
            self._sync.changed(os.path.dirname(path))

    def _makedirs_abs(self, path: str) -> None:
        """``mkdir -p``, each new directory's entry durable in its parent. Another job may remove an empty shared
        parent (``_temporary``) between our mkdir calls: retry."""
        for _ in range(20):
            try:
                self._mkdirs_once(path)
                return
            except FileNotFoundError:
                continue
        self._mkdirs_once(path)

    def _mkdirs_once(self, path: str) -> None:
        if os.path.isdir(path):
            return
        missing = []
        head = path
        while not os.path.isdir(head):
            missing.append(head)
            head = os.path.dirname(head)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
            self._sync.changed(os.path.dirname(d))

    def makedirs(self, rel: str) -> None:
        path = self._p(rel)
        try:   # the common case first, one system call: a new directory in an existing one
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise InvalidOutputSpec(f"{self.url(rel)} is a file, not a directory") from None
            return
        except FileNotFoundError:
            self._makedirs_abs(path)
            return
        self._sync.changed(os.path.dirname(path))

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        return sized(walk(self._p(rel), visible_only))

    def list_names(self, rel: str) -> list[str]:
        return [name for name, _ in walk(self._p(rel))]

    def visible_names(self) -> list[str]:
        return [name for name, _ in walk(self.root, True)]

    def visible_files_except(self, skip: Container[str]) -> list[tuple[str, int]]:
        return sized(walk(self.root, True), skip)

    def marker_dirs(self, name: str) -> list[str]:
        return sorted(rel for rel, entry in visible_entries(self.root)
                      if entry.name == name and not entry.is_dir(follow_symlinks=False))

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
        src_path, dst_path = self._p(src), self._p(dst)
        self._with_parent(os.replace, src_path, dst_path)
        self._sync.changed(os.path.dirname(src_path), os.path.dirname(dst_path))

    def publish_files(self, moves: Sequence[tuple[str, str, int | None]], threads: int,
                      after_each: Callable[[], None]) -> None:
        # one fsync per directory involved, after all the renames (each rename is atomic on its own); a move an
        # interrupted run did already still counts: its directories may not have been synced by that run
        touched: set[str] = set()
        durable = self._sync.enabled   # without fsyncs, nothing needs the directories: no per-file work for them
        root = self.root

        def move(item: tuple[str, str, int | None]) -> None:
            # the hot loop of a commit (one call per file): the paths as :meth:`_p` makes them, the rename straight
            src_path, dst_path = f"{root}/{item[0]}", f"{root}/{item[1]}"
            if durable:   # both are "<root>/<rel>": the parent is what precedes the last "/"
                touched.update((src_path.rpartition("/")[0], dst_path.rpartition("/")[0]))
            try:
                os.replace(src_path, dst_path)
            except FileNotFoundError:
                try:
                    self._with_parent(os.replace, src_path, dst_path)
                except FileNotFoundError:
                    if not os.path.lexists(dst_path):
                        raise FileNotFoundError(self.url(item[0])) from None
                    return
            after_each()

        parallel(move, list(moves), threads)
        self._sync.changed_all(touched)

    def link_no_replace(self, src: str, dst: str) -> bool:
        # the link fails if dst exists (rename would silently replace it); a crash after it leaves both names on
        # one inode, which the next call recognises
        src_path, dst_path = self._p(src), self._p(dst)
        try:
            self._with_parent(os.link, src_path, dst_path)
        except FileExistsError:
            try:
                same = os.path.samefile(src_path, dst_path)
            except FileNotFoundError:  # a concurrent completer finished this very move
                return False
            if not same:
                raise FileExistsError(f"{self.url(dst)} exists; refusing to replace it with {self.url(src)}") \
                    from None
        self._sync.changed(os.path.dirname(dst_path))
        return True

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
        self._sync.changed(os.path.dirname(src_path), os.path.dirname(dst_path))
        return True

    def delete_file(self, rel: str) -> None:
        path = self._p(rel)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._sync.changed(os.path.dirname(path))

    def delete_files(self, rels: list[str]) -> None:
        with self._sync.batch():
            for rel in rels:
                self.delete_file(rel)

    def delete_many(self, rels: Sequence[str], threads: int, after_each: Callable[[], None]) -> None:
        touched: set[str] = set()

        def delete(rel: str) -> None:
            path = self._p(rel)
            touched.add(os.path.dirname(path))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            after_each()

        parallel(delete, list(rels), threads)
        self._sync.changed_all(touched)

    def delete_tree(self, rel: str) -> None:
        path = self._p(rel)
        if os.path.isdir(path) and not os.path.islink(path):
            # ignore_errors: a zombie may be writing into the tree while we remove it; what it writes stays hidden
            shutil.rmtree(path, ignore_errors=True)
            self._sync.changed(os.path.dirname(path))
        else:
            self.delete_file(rel)

    def delete_known_tree(self, rel: str, files: Iterable[str]) -> None:
        top = self._p(rel)
        dirs = {top}
        try:
            for name in files:
                os.unlink(os.path.join(top, name))
                head = os.path.dirname(name)
                while head:
                    dirs.add(os.path.join(top, head))
                    head = os.path.dirname(head)
            for d in sorted(dirs, key=len, reverse=True):   # the deepest first
                os.rmdir(d)
        except OSError:   # something else is there (a zombie's new file), or already gone: the walk removes it
            self.delete_tree(rel)
        # no fsync of the parent: see :meth:`Store.delete_known_tree` (one of a durable task commit's eight)

    def remove_dir_if_empty(self, rel: str) -> bool:
        path = self._p(rel)
        try:
            os.rmdir(path)
        except OSError:
            return False
        self._sync.changed(os.path.dirname(path))
        return True

    def open_write(self, rel: str) -> IO[bytes]:
        path = self._p(rel)
        try:
            return open(path, "wb")
        except FileNotFoundError:   # the directory is missing: made only then
            self._makedirs_abs(os.path.dirname(path))
            return open(path, "wb")

    # ------------------------------------------------------------------ durability and the tree's shape
    def batch(self) -> contextlib.AbstractContextManager[None]:
        return self._sync.batch()

    def sync_tree(self, rel: str) -> None:
        """Fsync every file and directory under *rel* (a task attempt's files at its task commit, before the record
        that publishes them): the data is then on the disk before any name refers to it."""
        if not self.durable:
            return
        top = self._p(rel)
        dirs = [top]
        files = [entry.path for _, entry in walk(self._p(rel))]
        for path in files:
            head = os.path.dirname(path)
            while head != top and head not in dirs:
                dirs.append(head)
                head = os.path.dirname(head)
        parallel(fsync_file, files, 4)
        self._sync.now(*dirs)

    def check_tree(self, dirs: Iterable[str] = (), *, visible: bool = False) -> None:
        """Refuse, naming the path, a tree the protocol could leave through (:func:`.localtree.check_tree`)."""
        check_tree(self.root, self.url, dirs, visible=visible)
