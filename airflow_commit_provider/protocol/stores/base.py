"""The operations a store offers under one output root, with their atomicity made explicit (see the package doc)."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterable, Sequence
from datetime import timedelta
from typing import IO

from ..parallel import parallel
from ..paths import by_directory, is_hidden


class Store(ABC):
    """Operations under one output root. Subclasses fix atomicity; see the package docstring.

    The port has two tiers. The **primitives** are abstract: a store implements them (and :meth:`_create_new`,
    its atomic create-if-absent), and with them alone it runs every job, commit, abort and overwrite. The other
    methods are **built on the primitives** here, and a store overrides one only to do it faster or with a stronger
    primitive of its own: the local disk lists without a stat per file, links instead of writing, renames a
    directory at once and defers its fsyncs to the end of a batch; the object stores copy server-side and delete in
    batches (:mod:`.copying`); S3 reads a listing's ETags. What no store does its own way is not here but in
    :mod:`.helpers`, as functions of a store. docs/design.md has the table: which store tunes what, and why.
    """

    #: ``True`` when :meth:`link_no_replace` exists: a move is one metadata operation that can refuse to replace
    #: (hard links on a local disk). v1 task commit then stages files next to the other tasks' committed files.
    link_moves: bool = False
    #: Threads for file moves at job commit when the caller does not choose. Renames into one local directory
    #: serialise on the directory lock, so local stores gain little from threads; object stores gain a lot.
    default_commit_threads: int = 8
    #: ``True`` when :meth:`move_dir_if_absent` renames a directory in one step: a committed job's records then go
    #: to ``_temporary/_trash`` at once and are deleted later (see ``FileOutputCommitter.remove_trash``)
    renames_directories: bool = False
    #: ``True`` when :meth:`list_dir_prefix` costs what the matching names cost (object stores ask for them),
    #: ``False`` when it reads the whole directory (the local disk)
    lists_by_prefix: bool = False
    #: ``True`` when a directory exists on its own, empty or not (the local disk); ``False`` where a "directory" is
    #: a prefix of the names under it (object stores)
    has_directories: bool = False
    #: ``True`` where the client sends a request again when its answer is lost (an object store over HTTP: botocore
    #: and s3fs retry a dropped connection), so that a request may take effect twice: see :meth:`create_exclusive`
    resends_requests: bool = False
    #: the longest name (bytes) of one path component the store takes
    name_max: int = 255
    #: where the store can stage a file's bytes under its final name, invisible until a later request publishes
    #: them (S3 multipart uploads, Azure staged blocks), the smallest part but the last one takes; ``None``
    #: elsewhere. Such a store has ``start_upload``, ``upload_part``, ``complete_upload``, ``abort_upload`` and
    #: ``list_uploads`` (S3's names), which the magic committer is built on (:mod:`..publish.magic`)
    min_part_size: int | None = None
    #: the most parts one staged file takes (S3: 10,000 per multipart upload; Azure: 50,000 blocks per blob)
    max_parts: int = 10_000
    #: how long the store keeps staged parts before it discards them by itself, where that is fixed (Azure: a
    #: week after a blob's last Put Block); ``None``: kept until published or aborted (S3, unless a bucket's
    #: lifecycle rule says otherwise: :mod:`..audit.expiry` reads it)
    staged_lifetime: timedelta | None = None
    #: ``True`` where staged parts belong to the file's name, not to an upload of their own (Azure: completing one
    #: upload discards every other part staged under the name, and none can be aborted alone)
    stages_by_name: bool = False
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

    def read_in_dir(self, rel: str, names: Sequence[str]) -> list[bytes | None]:
        """The content of each file *names* of the directory *rel*, ``None`` for one that does not exist: how job
        commit reads its task records, thousands in one directory. Here one :meth:`read_bytes` each; the local
        store opens the directory once, and each name in it."""
        out: list[bytes | None] = []
        for name in names:
            try:
                out.append(self.read_bytes(f"{rel}/{name}"))
            except FileNotFoundError:
                out.append(None)
        return out

    #: whether :meth:`read_in_dir_once` may return a file cut short
    cuts_first_reads: bool = False

    def read_in_dir_once(self, rel: str, names: Sequence[str]) -> list[bytes | None]:
        """:meth:`read_in_dir`, where a store that :attr:`cuts_first_reads` reads each file with one read, and
        returns what it gave when that was less than it asked for: the end of the file on a local disk, but maybe
        not on a network file system, so the caller checks what it got (a JSON record cut short does not decode)
        and reads again with :meth:`read_in_dir`. Here :meth:`read_in_dir`."""
        return self.read_in_dir(rel, names)

    def read_tail(self, rel: str, size: int) -> bytes:
        """The last *size* bytes of a file (all of it when smaller): a Parquet footer without the data."""
        return self.read_bytes(rel)[-size:]

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Create or replace a file so that readers see the old or the new content, never a mix."""

    def touch(self, rel: str) -> None:
        """Create an empty file if there is none (nothing to tear, so no temporary file is needed)."""
        self.write_bytes(rel, b"")

    def create_exclusive(self, rel: str, data: bytes, *, like: str | None = None) -> bool:
        """Create a file atomically if it does not exist. ``True`` if this call created it, ``False`` if it existed.

        *like*: a file that holds exactly *data* (the caller created it so and nobody rewrites it in place); a
        store that can give a file a second name (the local disk's hard link) does so instead of writing again.

        Where the client sends a request again when its answer is lost (:attr:`resends_requests`), "it exists" is
        ambiguous: the first request may have created the file, and the retry meets it. The answer is then
        resolved, not guessed: the file is read, and holding exactly *data* it is this call's own (``True``). So
        the bytes a caller creates exclusively are unique to it (a uuid, or its attempt and a time of day), or
        else its identity decides nothing (every writer sends the same bytes and then does the same)."""
        try:
            self._create_new(rel, data, like)
            return True
        except FileExistsError:
            return self.resends_requests and self._holds(rel, data)

    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        """Create *rel* holding *data* (or as a second name of *like*) in one atomic step; :class:`FileExistsError`
        when a file is there (see :meth:`create_exclusive`). Not abstract: a store written before it overrides
        :meth:`create_exclusive` itself, and still works."""
        raise NotImplementedError(f"{type(self).__name__} implements neither _create_new nor create_exclusive: "
                                  "a store must offer an atomic create-if-absent to coordinate commits")

    def _holds(self, rel: str, data: bytes) -> bool:
        """Whether *rel* holds exactly *data*: an exclusive create that met it was its own (a file gone since
        was not: somebody removed it, so it is not there for this call to have)."""
        try:
            return self.read_bytes(rel) == data
        except FileNotFoundError:
            return False

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

    def visible_names(self) -> list[str]:
        """The paths readers see under the root (:meth:`list_files` with *visible_only*), without sizes: the
        local disk does not stat them."""
        return [path for path, _ in self.list_files("", visible_only=True)]

    def visible_files_except(self, skip: Container[str]) -> list[tuple[str, int]]:
        """The visible files under the root and their sizes, but for those in *skip* (the local disk does not stat
        them: ``_SUCCESS`` lists the job's own files from its records and only asks about the others)."""
        return [(path, size) for path, size in self.list_files("", visible_only=True) if path not in skip]

    @abstractmethod
    def list_dir(self, rel: str) -> list[str]:
        """Names of the direct children of *rel* (files and directories). Empty when *rel* is missing."""

    def list_dir_digests(self, rel: str) -> dict[str, str | None]:
        """:meth:`list_dir`'s names, each with the MD5 (hex) of the file's bytes where the listing itself gives it
        (S3: the ETag of an object written in one request), else ``None``: what tells a reader, for free, that a
        record it read is still the same (:meth:`~..job.Job.job_record_as_listed`)."""
        return dict.fromkeys(self.list_dir(rel))

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

    def file_versions(self, rels: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``(size, version)`` of each of *rels* that exists (missing ones are left out), one listing per directory.

        The version is a token that changes when a file of that name is replaced, even by one of the same size
        (local disk: inode and modification time; object stores: the ETag): what a job that will delete these
        files records, to tell at its commit that they are still the files it read. This default has sizes
        only (an empty version)."""
        out = {}
        for head, names in by_directory(rels).items():
            for name, size in self.list_files(head):
                if name in names:
                    out[f"{head}/{name}" if head else name] = (size, "")
        return out

    @abstractmethod
    def move_file(self, src: str, dst: str, size: int | None = None) -> None:
        """Move one file, replacing *dst*; :class:`FileNotFoundError` when *src* is missing. *size*, when known,
        feeds the bytes-copied accounting of stores on which a move is a copy."""

    @abstractmethod
    def delete_file(self, rel: str) -> None:
        """Delete one file; a missing file is not an error (deletions are repeated by resumed commits)."""

    def delete_files(self, rels: list[str]) -> None:
        """Delete several files; missing ones are not an error."""
        for rel in rels:
            self.delete_file(rel)

    def delete_many(self, rels: Sequence[str], threads: int, after_each: Callable[[], None]) -> None:
        """Delete many files (missing ones are fine), calling *after_each* after each request: one per file here,
        one per batch on stores that delete in batches."""
        def delete(rel: str) -> None:
            self.delete_file(rel)
            after_each()

        parallel(delete, list(rels), threads)

    def publish_files(self, moves: Sequence[tuple[str, str, int | None]], threads: int,
                      after_each: Callable[[], None]) -> None:
        """Make each ``(src, dst, size)`` visible at *dst* (replacing it), idempotently: a *src* already gone while
        *dst* exists counts as done (an earlier, interrupted run); :class:`FileNotFoundError` naming *src* when
        both are gone. *after_each* runs after each file published."""
        def move(item: tuple[str, str, int | None]) -> None:
            src, dst, size = item
            try:
                self.move_file(src, dst, size)
            except FileNotFoundError:
                if not self.exists(dst):
                    raise FileNotFoundError(self.url(src)) from None
                return
            after_each()

        parallel(move, list(moves), threads)

    @abstractmethod
    def delete_tree(self, rel: str) -> None:
        """Delete a directory and everything under it; missing is not an error."""

    def delete_known_tree(self, rel: str, files: Iterable[str]) -> None:
        """:meth:`delete_tree` of a directory whose files (relative to it) the caller has just listed: where a
        directory tree costs a system call per entry, each named file and directory is removed by name instead of
        walked again. Anything else found there is still removed.

        Unlike every other change, the removal need not be durable when the call returns (the local disk does not
        fsync the parent for it): it is only ever a finished task commit's attempt directory (:func:`~..publish.
        base.complete_moves`), whose files' new names are durable already and whose return after a power cut
        only means "maybe unfinished" to its readers, who then finish it again (the moves are idempotent)."""
        self.delete_tree(rel)

    @abstractmethod
    def remove_dir_if_empty(self, rel: str) -> bool:
        """Remove an empty directory; ``False`` when it holds anything (another job's work, say)."""

    @abstractmethod
    def open_write(self, rel: str) -> IO[bytes]:
        """A binary file object for writing a new data file (parent directories are created)."""

    def link_no_replace(self, src: str, dst: str) -> bool:
        """Give the file *src* the second name *dst* unless *dst* holds another file (:class:`FileExistsError`);
        ``False`` when *src* is gone and *dst* is its name already (a concurrent completer moved it). The caller
        removes *src* later, once every new name is durable: a task commit links all its files, then removes its
        attempt directory. Only where ``link_moves``."""
        raise NotImplementedError(f"{type(self).__name__} has no link that refuses to replace")

    def move_dir_if_absent(self, src: str, dst: str) -> bool:
        """Rename the directory *src* to *dst* in one step if nothing is at *dst*; ``False`` (nothing changed) when
        something is, or when the store has no directory rename (object stores: a "directory" is a prefix)."""
        return False

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A block whose changes need to be durable only when it ends (the local disk then fsyncs each directory
        it changed once, not once per change). Nothing in the block may depend on an earlier change of the same
        block being durable. Object stores: every request is durable when it returns; nothing to defer."""
        return contextlib.nullcontext()

    def sync_tree(self, rel: str) -> None:
        """Make every file under *rel* durable (a task attempt's files, before its commit record names them).
        Object stores: a completed upload is durable already."""

    def check_tree(self, dirs: Iterable[str] = (), *, visible: bool = False) -> None:
        """:class:`~..errors.InvalidOutputSpec` when the tree has what the protocol could leave the root through
        (the local disk: a symbolic link, another volume) at or above *dirs*, or anywhere readers see with
        *visible*. Object stores have neither: nothing to check."""

    def request_counts(self) -> dict[str, int]:
        """Requests made so far, by operation (object stores count them; others return nothing)."""
        return {}

    bytes_copied: int = 0

    def parent(self) -> Store | None:
        """The store of the directory that holds this root, on the same file system (and, on object stores, with
        the same request accounting); ``None`` at the top (the file system's root, a bucket). What tells whether
        the root lies inside something that owns its files (a table: :mod:`..tables.ownership`)."""
        return None

    def ensure_root(self) -> None:
        """Make sure the output root exists (the pre-task of an overwrite)."""
        self.makedirs("")
