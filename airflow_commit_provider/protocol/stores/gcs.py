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
proven here, and ``algorithm="magic"`` stays refused on GCS (it needs :attr:`~.base.Store.min_part_size`). Hierarchical-namespace
buckets' atomic folder rename is not used either: algorithm 1 on GCS moves file by file, as on S3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidOutputSpec
from .objects import FsspecObjectStore, fresh_filesystem

#: URL schemes :func:`~.store_for` opens as Google Cloud Storage
GCS_SCHEMES = ("gs", "gcs")


def gcs_filesystem(options: Mapping[str, Any] | None = None) -> Any:
    """gcsfs's core file system with *options* (over fsspec's configuration, e.g. ``FSSPEC_GS_TOKEN``), fresh.

    The core class, not the one ``gs://`` resolves to by default (gcsfs's "experimental" subclass for
    hierarchical-namespace and zonal buckets): that one first asks the storage control API over gRPC what kind of
    bucket it is, and where that API cannot be reached (an emulator, a private endpoint) each bucket's first call
    waits 60 s for the answer. The protocol needs objects, never folders."""
    try:
        from gcsfs.core import GCSFileSystem
    except ImportError as exc:
        raise InvalidOutputSpec("a gs:// target needs gcsfs: install the extra "
                                "'airflow-commit-provider[gcs]'") from exc
    return fresh_filesystem(GCSFileSystem, options)


class GCSStore(FsspecObjectStore):
    """An output root on GCS (a gcsfs file system: from an Airflow connection or built directly)."""

    #: a generation is new with every write of the object
    version_keys = ("generation", "etag", "updated")

    def __init__(self, fs: Any, root: str) -> None:
        super().__init__(fs, root, "gs")

    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        """An upload with ``ifGenerationMatch=0``: gcsfs raises :class:`FileExistsError` on GCS's 412."""
        self.fs.pipe_file(self._p(rel), data, mode="create")

    def _copy(self, src: str, dst: str) -> None:
        """``objects.rewrite`` (gcsfs ``cp_file``): server side, resumed by gcsfs until done."""
        self.fs.cp_file(src, dst)


__all__ = ["GCS_SCHEMES", "GCSStore", "gcs_filesystem"]
