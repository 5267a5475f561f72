"""Azure Blob Storage: an output root in a container, through adlfs (azure-storage-blob underneath).

What the protocol needs, and the Azure primitive that gives it:

- **create-if-absent**: Put Blob with ``If-None-Match: *`` (adlfs ``pipe_file(mode="create")``: the SDK's
  ``upload_blob(overwrite=False)``); a 409 is :class:`FileExistsError`. The SDK resends a request whose answer was
  lost, so "it exists" may be this call's own blob: the base class reads it back and compares the bytes.
- **moves**: a server-side Copy Blob, waited for until Azure reports it complete (adlfs starts the copy and returns:
  a copy still pending when its source is deleted would fail, and the file would be lost), then a delete of the
  source. Within one storage account the copy does not pass through the client.
- **listings**: List Blobs with a prefix, never from adlfs's listing cache.

- **staged blocks** (the magic committer, zero copy): a file's bytes are blocks staged with Put Block under its
  final name, invisible (no listing, no read shows a blob with no committed block) until Put Block List commits
  them at job commit. A block's id is its upload's (a random token each time a file is opened) and its number, so
  two tries of a task that stage under the same name never replace each other's blocks. Put Block and Put Block
  List are idempotent: a request resent after its answer was lost, or a resumed job commit, does the same again.

ADLS Gen2's O(1) directory rename is not used (Azurite, the emulator the tests run on, has no hierarchical
namespace): algorithm 1 copies file by file, as on S3.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
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
    #: Put Block takes any size from one byte (up to 4,000 MiB)
    min_part_size = 1
    #: Azure discards a blob's uncommitted blocks a week after its last Put Block
    staged_lifetime = timedelta(days=7)
    stages_by_name = True
    max_parts = 50_000
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

    # ---------------------------------------------------------------- staged blocks (the magic committer)
    def _blob(self, rel: str) -> Any:
        container, blob, _ = self.fs.split_path(self._p(rel))
        return self.fs.service_client.get_blob_client(container=container, blob=blob)

    def _run(self, call: Any) -> Any:
        """Run the coroutine function *call* on adlfs's event loop, as adlfs runs its own."""
        from fsspec.asyn import sync

        return sync(self.fs.loop, call)

    def start_upload(self, rel: str) -> str:
        """A fresh token that names this upload's blocks: nothing is sent (a blob's staged blocks need no session)."""
        return uuid.uuid4().hex

    def upload_part(self, rel: str, upload_id: str, number: int, data: bytes | bytearray | memoryview) -> str:
        """Put Block of *data* under the final name; returns the block's id, what the commit lists. An empty part
        (an empty file) stages nothing: its id is ``""``."""
        if not len(data):
            return ""
        block = base64.b64encode(f"{upload_id}{number:05d}".encode()).decode()

        async def put() -> None:
            async with self._blob(rel) as blob:
                await blob.stage_block(block, bytes(data))

        self._run(put)
        return block

    def complete_upload(self, rel: str, upload_id: str, parts: Sequence[Sequence[Any]],
                        size: int | None = None) -> None:
        """Put Block List of the parts' blocks, in order: the blob appears, whole. Again (a resent request, a
        resumed job commit) it commits the same blocks, committed now, to the same content. When Azure answers that
        the list is invalid (a block it does not have), the blob is looked at: committed from exactly these blocks
        (and of *size*), it is this upload, done; otherwise :class:`FileNotFoundError` naming it (its blocks were
        discarded: the blob was written or deleted outside the protocol, or a week passed since its last Put
        Block). Any other error is raised as it is."""
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
        from azure.storage.blob import BlobBlock

        blocks = [e for _, e in parts if e]

        async def commit() -> None:
            async with self._blob(rel) as blob:
                await blob.commit_block_list([BlobBlock(block_id=b) for b in blocks])

        async def committed() -> tuple[list[str], int]:
            async with self._blob(rel) as blob:
                listed = await blob.get_block_list("committed")
                props = await blob.get_blob_properties()
            return [b.id for b in listed[0]], props.size

        try:
            self._run(commit)
        except HttpResponseError as exc:
            if getattr(exc, "error_code", None) != "InvalidBlockList":   # a 503 after the retries, say: all the
                raise   # blocks may be there, and the job commit's next try commits them
            try:
                ids, length = self._run(committed)
            except ResourceNotFoundError:
                ids, length = [], -1
            if ids != blocks or (size is not None and length != size):
                raise FileNotFoundError(f"the staged blocks of {self.url(rel)} (upload {upload_id}) cannot be "
                                        f"committed ({exc.reason or exc}), and the blob is not made of them") from exc
        self.fs.invalidate_cache()

    def abort_upload(self, rel: str, upload_id: str) -> None:
        """Nothing: staged blocks have no request of their own to discard them, only the blob's name, which every
        try of a task shares, so a delete by name could take a live try's blocks. Azure discards them: those under
        a name the job commits, when its Put Block List commits the winner's; any other, a week after the blob's
        last Put Block (:mod:`..publish.magic`)."""

    def list_uploads(self, rel_prefix: str = "") -> list[tuple[str, str]]:
        """Nothing to abort (:meth:`abort_upload`): staged blocks are listed by blob, not by upload."""
        return []


__all__ = ["AZURE_SCHEMES", "AzureStore", "azure_filesystem"]
