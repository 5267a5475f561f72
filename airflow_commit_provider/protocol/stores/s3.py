"""S3 through s3fs: conditional writes coordinate, files move one by one, the root gets a directory marker.

S3 has no rename: a move is CopyObject plus DeleteObject, and s3fs's recursive ``mv`` copies and then fails on the
directory key without deleting the sources (duplicates), so every move here is one explicit CopyObject of one file.
Exclusive creation is PutObject with ``If-None-Match: *`` (s3fs ``mode="create"``), which S3 and moto honour.
s3fs caches listings; every read here drops that cache first, because a protocol decision taken on a stale
listing (a commit record not seen) is a wrong decision.

Requests are counted per operation through botocore's event hooks, and bytes copied server-side are summed, so
commits can report what they cost.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..paths import is_hidden
from .copying import CopyPublishing
from .generic import FsspecStore

#: S3's minimum size of every part of a multipart upload but the last.
MIN_PART_SIZE = 5 * 2**20


def multipart_etag(parts: Sequence[Sequence[Any]]) -> str:
    """The ETag S3 gives the object a multipart upload of *parts* (``(number, part ETag)``) completes into: the MD5
    of the parts' MD5s, then ``-<parts>``. What tells, after the fact, that an object is this upload's."""
    digests = b"".join(bytes.fromhex(str(etag).strip('"')) for _, etag in parts)
    return f"{hashlib.md5(digests).hexdigest()}-{len(parts)}"   # noqa: S324 - S3's own digest, not a security one


class BufferReader(io.RawIOBase):
    """A seekable, read-only file over a bytes-like object, without copying it (see :meth:`S3Store.upload_part`)."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, min(len(self._view), base + offset))
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        """The next *size* bytes as one copy (``RawIOBase.read`` would fill a new buffer, then copy that):
        botocore's checksum reads the body 1 MiB at a time."""
        end = len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        chunk = self._view[self._pos:end].tobytes()
        self._pos = end
        return chunk

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self._view) - self._pos)
        buffer[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n

    def __len__(self) -> int:
        return len(self._view)

    def close(self) -> None:
        if not self.closed:
            self._view.release()
        super().close()


def _rewind_part(params: dict[str, Any], **_: Any) -> None:
    """Every call of UploadPart sends its part from the first byte. s3fs resends a failed call (a connection
    reset, a lost answer) with the same arguments, and the first call read the part's :class:`BufferReader` to its
    end: sent again as it stood, its length said N bytes and none followed, and the request hung until the read
    timeout (60 s), then failed."""
    body = params.get("Body")
    if isinstance(body, BufferReader):
        body.seek(0)


class S3Store(CopyPublishing, FsspecStore):
    """An output root on S3 (any s3fs file system: from an Airflow connection or built directly)."""

    default_commit_threads = 16
    #: DeleteObjects takes 1,000 keys
    delete_batch = 1000
    lists_by_prefix = True
    resends_requests = True
    min_part_size = MIN_PART_SIZE

    def __init__(self, fs: Any, root: str) -> None:
        super().__init__(fs, root)
        self.protocol = "s3"
        self.bucket, _, self.prefix = self.root.partition("/")
        self._requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.bytes_copied = 0
        self._hooked = False

    # ---------------------------------------------------------------- accounting
    def _client_call(self, method: str, **kwargs: Any) -> Any:
        self._hook()
        return self.fs.call_s3(method, **kwargs)

    def _hook(self) -> None:
        if self._hooked:
            return
        if getattr(self.fs, "_s3", None) is None:
            self.fs.connect()
        self.fs.s3.meta.events.register("before-call.s3", self._count)
        self.fs.s3.meta.events.register("before-parameter-build.s3.UploadPart", _rewind_part)
        self._hooked = True

    def _count(self, model: Any = None, **_: Any) -> None:
        with self._lock:
            self._requests[getattr(model, "name", "unknown")] += 1

    def request_counts(self) -> dict[str, int]:
        self._hook()
        with self._lock:
            return dict(self._requests)

    def parent(self) -> S3Store | None:
        self._hook()   # before the copy: its requests then count once, through this store's hook
        up = super().parent()
        if up is not None:
            up.bucket, _, up.prefix = up.root.partition("/")
        return up  # type: ignore[return-value]

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    # ---------------------------------------------------------------- reads (never from s3fs's listing cache)
    def exists(self, rel: str) -> bool:
        self._hook()
        self.fs.invalidate_cache()
        return bool(self.fs.exists(self._p(rel)))

    def isdir(self, rel: str) -> bool:
        self._hook()
        self.fs.invalidate_cache()
        return bool(self.fs.isdir(self._p(rel)))

    def read_bytes(self, rel: str) -> bytes:
        """One GetObject. s3fs's ``cat_file`` would first HEAD the key for its size (to read large objects in
        parallel ranges), and on a missing key HEAD it and LIST its prefix: three requests where the protocol's
        commonest read -- a record that is not there yet -- needs one."""
        self._hook()
        return bytes(self.fs.cat_file(self._p(rel), max_concurrency=1))

    def read_tail(self, rel: str, size: int) -> bytes:
        self._hook()
        return bytes(self.fs.tail(self._p(rel), size))

    def _list(self, rel: str, prefix: str = "", delimiter: str = "/") -> list[tuple[str, dict[str, Any] | None]]:
        """ListObjectsV2 under *rel* (names relative to it, starting with *prefix*): each object with its entry,
        each common prefix (with *delimiter*) with ``None``. Straight through the client, not s3fs's ``ls`` or
        ``find``: those cache, and on an empty prefix ``find`` HEADs the path and lists it again to tell a missing
        directory from a file -- three requests where the protocol's question (what is under it?) takes one."""
        base = self.key(rel).rstrip("/") + "/" if rel or self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base + prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        out: list[tuple[str, dict[str, Any] | None]] = []
        while True:
            resp = self._client_call("list_objects_v2", **kwargs)
            out += [(o["Key"][len(base):], o) for o in resp.get("Contents", []) if o["Key"] != base]
            out += [(p["Prefix"][len(base):].rstrip("/"), None) for p in resp.get("CommonPrefixes", [])]
            if not resp.get("IsTruncated"):
                return out
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        """Every file under *rel*, with its size: one request per 1,000 (directory markers left out)."""
        return [(name, int(o["Size"])) for name, o in self._list(rel, delimiter="")
                if o is not None and not name.endswith("/") and not (visible_only and is_hidden(name))]

    def file_versions(self, rels: Sequence[str]) -> dict[str, tuple[int, str]]:
        self._hook()
        self.fs.invalidate_cache()
        return super().file_versions(rels)

    def list_dir(self, rel: str) -> list[str]:
        return self.list_dir_prefix(rel, "")

    def list_dir_digests(self, rel: str) -> dict[str, str | None]:
        """One listing, as :meth:`list_dir`; an ETag is an MD5 only for an object written in one request (a
        multipart one's ends in ``-<parts>``; under SSE-KMS or SSE-C it is no MD5 at all, and then simply never
        matches one)."""
        out: dict[str, str | None] = {}
        for name, o in self._list(rel):
            digest = str(o.get("ETag", "")).strip('"') if o is not None else ""
            out[name] = digest if digest and "-" not in digest else None
        return out

    def list_dir_prefix(self, rel: str, prefix: str) -> list[str]:
        """ListObjectsV2 with the prefix: only the matching names, however many siblings they have."""
        return [name for name, _ in self._list(rel, prefix)]

    # ---------------------------------------------------------------- writes
    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        """PutObject with ``If-None-Match: *``; a 412 is :class:`FileExistsError` (which the base class resolves:
        s3fs and botocore resend a PutObject whose answer was lost, and the resent one meets its own object)."""
        self._hook()
        try:
            self.fs.pipe_file(self._p(rel), data, mode="create")
        except FileExistsError:
            raise
        except OSError as exc:
            if "PreconditionFailed" in str(exc) or "pre-conditions" in str(exc) or "412" in str(exc):
                raise FileExistsError(self.url(rel)) from exc
            raise

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._hook()
        self.fs.pipe_file(self._p(rel), data)

    def makedirs(self, rel: str) -> None:
        """S3 has no directories; only the root gets a marker (see :meth:`ensure_root`)."""

    def ensure_root(self) -> None:
        """Write a zero-byte ``<root>/`` directory marker, so the target exists even with nothing under it.

        This is what keeps a retried Spark ``INSERT OVERWRITE`` from failing with "Path does not exist".
        """
        self._hook()
        self.fs.invalidate_cache()
        if self.prefix and not self.fs.exists(self.root + "/"):
            self.fs.pipe_file(self.root + "/", b"")
        self.fs.invalidate_cache()

    def move_file(self, src: str, dst: str, size: int | None = None) -> None:
        """CopyObject + DeleteObject of one file."""
        self.copy_file(src, dst, size)
        self._client_call("delete_object", Bucket=self.bucket, Key=self.key(src))

    def copy_file(self, src: str, dst: str, size: int | None = None) -> None:
        """CopyObject of one file (objects above 5 GB go through s3fs's multipart copy)."""
        if size is not None and size > 5 * 2**30:
            self.fs.copy(self._p(src), self._p(dst))
        else:
            try:
                self._client_call("copy_object", Bucket=self.bucket, Key=self.key(dst),
                                  CopySource={"Bucket": self.bucket, "Key": self.key(src)})
            except FileNotFoundError:
                raise FileNotFoundError(self.url(src)) from None
        with self._lock:
            self.bytes_copied += size or 0

    def delete_file(self, rel: str) -> None:
        self._client_call("delete_object", Bucket=self.bucket, Key=self.key(rel))

    def delete_files(self, rels: list[str]) -> None:
        """DeleteObjects, 1,000 keys a request."""
        for i in range(0, len(rels), 1000):
            batch = [{"Key": self.key(r)} for r in rels[i:i + 1000]]
            self._client_call("delete_objects", Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def delete_tree(self, rel: str) -> None:
        self.delete_files([f"{rel}/{p}" for p, _ in self.list_files(rel)])
        self.fs.invalidate_cache()

    def remove_dir_if_empty(self, rel: str) -> bool:
        return not self.list_files(rel)

    def open_write(self, rel: str) -> Any:
        self._hook()
        return self.fs.open(self._p(rel), "wb")

    # ---------------------------------------------------------------- multipart uploads (the magic committer)
    def start_upload(self, rel: str) -> str:
        return self._client_call("create_multipart_upload", Bucket=self.bucket, Key=self.key(rel))["UploadId"]

    def upload_part(self, rel: str, upload_id: str, number: int, data: bytes | bytearray | memoryview) -> str:
        """UploadPart of *data*, which is not copied: botocore wraps ``bytes`` in a ``BytesIO`` that aiohttp
        then copies whole, and copies a ``bytearray`` several times over (checksum, payload); a file object
        over the caller's buffer is read in small chunks instead. The buffer is free again when this returns."""
        with BufferReader(data) as body:   # closing it releases its view: the caller may then resize the buffer
            return self._client_call("upload_part", Bucket=self.bucket, Key=self.key(rel), UploadId=upload_id,
                                     PartNumber=number, Body=body)["ETag"]

    def complete_upload(self, rel: str, upload_id: str, parts: Sequence[Sequence[Any]],
                        size: int | None = None) -> None:
        """CompleteMultipartUpload of *parts* (``(number, ETag)``), idempotently.

        An error answer is resolved, not guessed: S3 answers ``NoSuchUpload`` to a completion resent after its first
        answer was lost, and to a resumed job commit completing again, and the object is there then. So the key
        is looked at (HEAD): an object with the ETag these parts make (:func:`multipart_etag`) and *size* is this
        upload, completed; anything else is :class:`FileNotFoundError` naming the upload (it was aborted, or
        expired by a lifecycle rule, and its object is not there)."""
        try:
            self._client_call("complete_multipart_upload", Bucket=self.bucket, Key=self.key(rel), UploadId=upload_id,
                              MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in parts]})
        except FileNotFoundError as exc:   # NoSuchUpload; any other answer (a 503 after the retries) is raised as
            # it is: the upload may be intact, and the job commit's next try completes it
            if not self._holds_upload(rel, parts, size):
                raise FileNotFoundError(f"multipart upload {upload_id} of {self.url(rel)} cannot be completed "
                                        f"({exc}), and the key holds no object these parts make") from exc

    def _holds_upload(self, rel: str, parts: Sequence[Sequence[Any]], size: int | None) -> bool:
        try:
            head = self._client_call("head_object", Bucket=self.bucket, Key=self.key(rel))
        except FileNotFoundError:
            return False
        return (str(head.get("ETag", "")).strip('"') == multipart_etag(parts)
                and (size is None or int(head.get("ContentLength", -1)) == size))

    def abort_upload(self, rel: str, upload_id: str) -> None:
        try:
            self._client_call("abort_multipart_upload", Bucket=self.bucket, Key=self.key(rel), UploadId=upload_id)
        except FileNotFoundError:  # NoSuchUpload: already aborted or completed
            pass

    def list_uploads(self, rel_prefix: str = "") -> list[tuple[str, str]]:
        """Pending multipart uploads under the root (``(path relative to the root, upload id)``)."""
        prefix = self.key(rel_prefix) if rel_prefix else (f"{self.prefix}/" if self.prefix else "")
        out: list[tuple[str, str]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            resp = self._client_call("list_multipart_uploads", **kwargs)
            for up in resp.get("Uploads", []):
                key = up["Key"]
                base = f"{self.prefix}/" if self.prefix else ""
                if key.startswith(base) and key.startswith(prefix):  # moto ignores some filters: check ourselves
                    out.append((key[len(base):], up["UploadId"]))
            if not resp.get("IsTruncated"):
                return out
            kwargs.update(KeyMarker=resp.get("NextKeyMarker"), UploadIdMarker=resp.get("NextUploadIdMarker"))
