"""Azure Blob Storage: an output root in a container, through adlfs (azure-storage-blob underneath).

What the protocol needs, and the Azure primitive that gives it:

- **create-if-absent**: Put Blob with ``If-None-Match: *`` (adlfs ``pipe_file(mode="create")``: the SDK's
  ``upload_blob(overwrite=False)``); a 409 is :class:`FileExistsError`. The SDK resends a request whose answer was
  lost, so "it exists" may be this call's own blob: the base class reads it back and compares the bytes.
- **moves**: a server-side Copy Blob, waited for until Azure reports it complete (adlfs starts the copy and returns:
  a copy still pending when its source is deleted would fail, and the file would be lost), then a delete of the
  source. Within one storage account the copy does not pass through the client.
- **listings**: List Blobs with a prefix, never from adlfs's listing cache.

Not here: a zero-copy committer (blocks staged with Put Block under their final names, committed by Put Block List
at job commit): ``algorithm="magic"`` stays refused off S3. ADLS Gen2's O(1) directory rename is not used either
(Azurite, the emulator the tests run on, has no hierarchical namespace): algorithm 1 copies file by file, as on S3.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidOutputSpec
from .objects import FsspecObjectStore, fresh_filesystem

#: URL schemes :func:`~.store_for` opens as Azure Blob Storage (adlfs's)
AZURE_SCHEMES = ("abfs", "abfss", "az")
#: how long a server-side copy may stay pending before the move fails (a copy within one account is usually done
#: when Copy Blob answers; a large one across accounts may take a while)
COPY_TIMEOUT_S = 600


def azure_filesystem(options: Mapping[str, Any] | None = None) -> Any:
    """adlfs's file system with *options* (over fsspec's configuration, e.g. ``FSSPEC_ABFS_CONNECTION_STRING``),
    fresh (no instance cache: a store must not share another's client)."""
    try:
        from adlfs import AzureBlobFileSystem
    except ImportError as exc:
        raise InvalidOutputSpec("an abfs:// or az:// target needs adlfs: install the extra "
                                "'airflow-commit-provider[azure]'") from exc
    return fresh_filesystem(AzureBlobFileSystem, options)


class AzureStore(FsspecObjectStore):
    """An output root on Azure Blob Storage (an adlfs file system: from an Airflow connection or built directly)."""

    delete_batch = 256
    #: Azure changes a blob's ETag on every write
    version_keys = ("etag", "last_modified")

    def __init__(self, fs: Any, root: str) -> None:
        super().__init__(fs, root, "abfs")

    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        """Put Blob with ``If-None-Match: *``: adlfs raises :class:`FileExistsError` on Azure's 409."""
        self.fs.pipe_file(self._p(rel), data, mode="create")

    def delete_files(self, rels: list[str]) -> None:
        """adlfs's ``rm`` of these blobs as named (``expand_path=False``): its expansion asks for each path's
        properties first (a HEAD per blob, half the requests of a delete) to find directories, and these are blobs.
        A missing blob is no error, and does not stop the deletes of the others (adlfs sends them all at once)."""
        if rels:
            self.fs.rm([self._p(r) for r in rels], expand_path=False)
            self.fs.invalidate_cache()

    def ensure_root(self) -> None:
        """A zero-byte ``<root>/`` blob marked a directory (``is_directory``, adlfs's convention), so the target
        exists with nothing under it. Not through adlfs's ``pipe_file``: it drops the trailing ``/`` and would make
        a *file* named like the root, which then hides everything under it from listings."""
        from fsspec.asyn import sync

        self.fs.invalidate_cache()
        if self.prefix and not self.fs.exists(self.root):
            sync(self.fs.loop, self._put_folder_blob)
        self.fs.invalidate_cache()

    async def _put_folder_blob(self) -> None:
        async with self.fs.service_client.get_blob_client(container=self.bucket, blob=self.prefix + "/") as blob:
            await blob.upload_blob(b"", overwrite=True, metadata={"is_directory": "true"})

    def _copy(self, src: str, dst: str) -> None:
        """Copy Blob, waited for: complete when it returns, :class:`OSError` when Azure failed or aborted it."""
        from fsspec.asyn import sync

        sync(self.fs.loop, self._copy_async, src, dst)

    async def _copy_async(self, src: str, dst: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        container1, blob1, _ = self.fs.split_path(src)
        container2, blob2, _ = self.fs.split_path(dst)
        source = self.fs.service_client.get_blob_client(container=container1, blob=blob1)
        target = self.fs.service_client.get_blob_client(container=container2, blob=blob2)
        async with source, target:
            try:
                started = await target.start_copy_from_url(source.url)
            except ResourceNotFoundError:
                raise FileNotFoundError(src) from None
            status = started.get("copy_status")
            deadline = time.monotonic() + COPY_TIMEOUT_S
            while status == "pending":
                if time.monotonic() > deadline:
                    raise OSError(f"the copy of {src} to {dst} was still pending after {COPY_TIMEOUT_S} s")
                await asyncio.sleep(0.2)   # a bounded wait for the store's own state, not for another party
                status = (await target.get_blob_properties()).copy.status
            if status != "success":
                raise OSError(f"Azure reports the copy of {src} to {dst} {status}")
        self.fs.invalidate_cache()


__all__ = ["AZURE_SCHEMES", "AzureStore", "azure_filesystem"]
