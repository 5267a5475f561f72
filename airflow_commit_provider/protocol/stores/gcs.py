"""Google Cloud Storage: an output root in a bucket, through gcsfs.

What the protocol needs, and the GCS primitive that gives it:

- **create-if-absent** (every decision: task commits, claims, plans): an upload with ``ifGenerationMatch=0``
  (gcsfs ``pipe_file(mode="create")``); a 412 is :class:`FileExistsError`. gcsfs resends a request whose answer
  was lost, so "it exists" may be this call's own object: the base class reads it back and compares the bytes
  (:meth:`~.base.Store.create_exclusive`).
- **moves** (algorithm 1's job commit, algorithm 2's task commit): ``objects.rewrite`` to the final name, then a
  delete of the source. Within one location and storage class a rewrite copies metadata only, not the bytes, so
  a move costs two requests whatever the file's size; ``bytes_copied`` counts the bytes a store that copies
  would send, for the summary's comparison with S3.
- **listings**: ``objects.list`` with a prefix (and ``/`` as delimiter for one level), never from gcsfs's
  listing cache, which another process's writes would leave stale.

Not here: a zero-copy committer. GCS's XML-API multipart uploads (invisible until completed, like S3's) are what
one would use; the emulator the tests run on (fake-gcs-server) does not serve that API, so it could not be
proven here, and ``algorithm="magic"`` stays refused off S3 (:func:`.target_scheme`). Hierarchical-namespace
buckets' atomic folder rename is not used either: algorithm 1 on GCS moves file by file, as on S3.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidOutputSpec
from ..parallel import parallel
from ..paths import is_hidden
from .generic import FsspecStore

#: URL schemes :func:`~.store_for` opens as Google Cloud Storage
GCS_SCHEMES = ("gs", "gcs")


def gcs_filesystem(options: Mapping[str, Any] | None = None) -> Any:
    """gcsfs's core file system with *options* (over fsspec's configuration, e.g. ``FSSPEC_GS_TOKEN``), fresh.

    The core class, not the one ``gs://`` resolves to by default (gcsfs's "experimental" subclass for
    hierarchical-namespace and zonal buckets): that one first asks the storage control API over gRPC what kind of
    bucket it is, and where that API cannot be reached (an emulator, a private endpoint) each bucket's first call
    waits 60 s for the answer. The protocol needs objects, never folders."""
    try:
        from fsspec.config import apply_config
        from gcsfs.core import GCSFileSystem
    except ImportError as exc:
        raise InvalidOutputSpec("a gs:// target needs gcsfs: install the extra "
                                "'airflow-commit-provider[gcs]'") from exc
    kwargs = apply_config(GCSFileSystem, dict(options or {}))
    kwargs.setdefault("skip_instance_cache", True)
    return GCSFileSystem(**kwargs)


class GCSStore(FsspecStore):
    """An output root on GCS (a gcsfs file system: from an Airflow connection or built directly)."""

    default_commit_threads = 16
    lists_by_prefix = True
    resends_requests = True

    def __init__(self, fs: Any, root: str) -> None:
        super().__init__(fs, root)
        self.protocol = "gs"
        self.bucket, _, self.prefix = self.root.partition("/")
        self._lock = threading.Lock()
        self.bytes_copied = 0

    def parent(self) -> GCSStore | None:
        up = super().parent()
        if up is not None:
            up.bucket, _, up.prefix = up.root.partition("/")
        return up  # type: ignore[return-value]

    # ---------------------------------------------------------------- reads (never from gcsfs's listing cache)
    def exists(self, rel: str) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.exists(self._p(rel)))

    def isdir(self, rel: str) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.isdir(self._p(rel)))

    def _ls(self, rel: str) -> list[dict[str, Any]]:
        """One level under *rel*: objects and prefixes, as gcsfs describes them, fresh."""
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
        """One listing per directory; the version is the object's generation (a new one for every write)."""
        wanted: dict[str, set[str]] = {}
        for rel in rels:
            head, _, name = rel.rpartition("/")
            wanted.setdefault(head, set()).add(name)
        out = {}
        for head, names in wanted.items():
            for info in self._ls(head):
                name = info["name"].rstrip("/").rsplit("/", 1)[-1]
                if name in names and info.get("type") != "directory":
                    version = str(info.get("generation") or info.get("etag") or info.get("updated") or "")
                    out[f"{head}/{name}" if head else name] = (int(info.get("size") or 0), version)
        return out

    # ---------------------------------------------------------------- writes
    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        """An upload with ``ifGenerationMatch=0``: gcsfs raises :class:`FileExistsError` on GCS's 412."""
        self.fs.pipe_file(self._p(rel), data, mode="create")

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(self._p(rel), data)

    def makedirs(self, rel: str) -> None:
        """GCS has no directories (a flat namespace bucket); only the root gets a placeholder (:meth:`ensure_root`)."""

    def ensure_root(self) -> None:
        """A zero-byte ``<root>/`` placeholder, so the target exists with nothing under it (the pre-task's
        guarantee: a retried overwrite never finds its target gone)."""
        self.fs.invalidate_cache()
        if self.prefix and not self.fs.exists(self.root + "/"):
            self.fs.pipe_file(self.root + "/", b"")
        self.fs.invalidate_cache()

    def copy_file(self, src: str, dst: str, size: int | None = None) -> None:
        """``objects.rewrite`` of one object (gcsfs ``cp_file``): server side, resumed by gcsfs until done."""
        try:
            self.fs.cp_file(self._p(src), self._p(dst))
        except FileNotFoundError:
            raise FileNotFoundError(self.url(src)) from None
        with self._lock:
            self.bytes_copied += size or 0

    def move_file(self, src: str, dst: str, size: int | None = None) -> None:
        """A rewrite, then the delete of the source."""
        self.copy_file(src, dst, size)
        self.delete_file(src)

    def delete_file(self, rel: str) -> None:
        try:
            self.fs.rm_file(self._p(rel))
        except FileNotFoundError:
            pass

    def delete_files(self, rels: list[str]) -> None:
        """gcsfs's batched deletes (a missing object is no error: deleting is idempotent here)."""
        if rels:
            try:
                self.fs.rm([self._p(r) for r in rels])
            except FileNotFoundError:   # gcsfs: none of them was there (any other error is raised first)
                pass
            self.fs.invalidate_cache()

    def delete_many(self, rels: Sequence[str], threads: int, after_each: Callable[[], None]) -> None:
        """100 objects a batch; *after_each* after each batch."""
        for i in range(0, len(rels), 100):
            self.delete_files(list(rels[i:i + 100]))
            after_each()

    def publish_files(self, moves: Sequence[tuple[str, str, int | None]], threads: int,
                      after_each: Callable[[], None]) -> None:
        """Rewrite every file (parallel), then delete the sources in batches. A crash in between rewrites again
        on resume (the sources are still there): same result, no loss."""
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

    def delete_tree(self, rel: str) -> None:
        self.delete_files([f"{rel}/{p}" for p, _ in self.list_files(rel)])

    def remove_dir_if_empty(self, rel: str) -> bool:
        return not self.list_files(rel)

    def open_write(self, rel: str) -> Any:
        return self.fs.open(self._p(rel), "wb")


__all__ = ["GCS_SCHEMES", "GCSStore"]
