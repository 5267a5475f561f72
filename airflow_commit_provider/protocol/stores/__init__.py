"""Stores: storage under one output root: the few operations the protocol needs, with their atomicity made explicit.

The commit coordinator is the storage itself: a task attempt wins by creating its commit record with an atomic
create-if-absent (:meth:`Store.create_exclusive`). Every store says how it provides that:

- local disk: write a temporary file, then ``os.link`` it to the record's name (atomic, fails if the name exists,
  and a reader never sees a half-written record);
- S3: PutObject with ``If-None-Match: *`` (see :mod:`.s3`);
- Google Cloud Storage: an upload with ``ifGenerationMatch=0`` (see :mod:`.gcs`);
- Azure Blob Storage: Put Blob with ``If-None-Match: *`` (see :mod:`.azure`);
- fsspec's memory file system: a lock (it only exists inside one process anyway).

A file system without such an operation is refused with :class:`StorageCapabilityError` instead of being
coordinated by a check-then-write race.

All paths given to a store are relative to its root, ``/``-separated.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidOutputSpec
from .azure import AZURE_SCHEMES, AzureStore, azure_filesystem
from .base import Store
from .gcs import GCS_SCHEMES, GCSStore, gcs_filesystem
from .generic import FsspecStore
from .local import LocalStore
from .s3 import S3Store

__all__ = ["AZURE_SCHEMES", "GCS_SCHEMES", "S3_SCHEMES", "STAGING_SCHEMES", "AzureStore", "FsspecStore", "GCSStore",
           "LocalStore", "S3Store", "Store", "process_local", "store_for", "target_scheme"]

#: URL schemes of file systems that exist only inside the process that made them (fsspec's ``memory://``).
PROCESS_LOCAL_SCHEMES = ("memory",)


#: URL schemes :func:`store_for` opens as S3 (multipart uploads: the magic committer's store).
S3_SCHEMES = ("s3", "s3a")
#: URL schemes whose stores stage a file under its final name, invisible until published (S3 multipart uploads,
#: Azure staged blocks: :attr:`Store.min_part_size`): where the magic committer works
STAGING_SCHEMES = S3_SCHEMES + AZURE_SCHEMES


def target_scheme(target: Any) -> str | None:
    """The file system scheme of *target* (a path, a URL, or an object with a ``protocol`` such as Airflow's
    ``ObjectStoragePath``), lower case: ``"file"`` for a plain path; ``None`` when it cannot be told yet (not a
    string, or a template still to be rendered)."""
    protocol = getattr(target, "protocol", None)
    if isinstance(protocol, (tuple, list)):
        protocol = protocol[0] if protocol else None
    if protocol is None and isinstance(target, str):
        if "{{" in target or "{%" in target:
            return None
        protocol = target.split("://", 1)[0] if "://" in target else "file"
    return protocol.lower() if isinstance(protocol, str) else None


def process_local(target: Any) -> bool:
    """Whether *target* lives on a file system that exists only inside one process. The protocol itself works
    there (tests, one process); whatever spreads a job over processes (Airflow) or hands the files to another
    library (a table format) must refuse it, since nothing written there is seen from anywhere else."""
    return target_scheme(target) in PROCESS_LOCAL_SCHEMES


def store_for(target: Any, *, fs: Any = None, storage_options: dict[str, Any] | None = None,
              durable: bool = True) -> Store:
    """The store for an output root given as a local path, a URL (``memory://``, ``s3://``) or an fsspec object.

    *fs* wins when given (the Airflow hooks resolve it from a connection); otherwise the URL is resolved by fsspec.
    *durable* (local disks only; object stores are durable per request): ``False`` fsyncs nothing, for scratch
    targets a power cut may lose.
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
            return LocalStore(target, durable=durable)
        if target_scheme(target) in GCS_SCHEMES:
            fs = gcs_filesystem(storage_options)
            return GCSStore(fs, fs._strip_protocol(target))
        if target_scheme(target) in AZURE_SCHEMES:
            fs = azure_filesystem(storage_options)
            return AzureStore(fs, fs._strip_protocol(target))
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(target, **(storage_options or {}))
        except (ValueError, ImportError) as exc:
            raise InvalidOutputSpec(f"cannot resolve a file system for {target!r}: {exc}") from exc
    else:
        path = fs._strip_protocol(target)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return LocalStore(path, durable=durable)
    if protocol in S3_SCHEMES:
        return S3Store(fs, path)
    if protocol in GCS_SCHEMES:
        return GCSStore(fs, path)
    if protocol in AZURE_SCHEMES:
        return AzureStore(fs, path)
    return FsspecStore(fs, path)
