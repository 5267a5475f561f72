"""The "magic" committer: zero-copy commits on S3 through delayed multipart-upload completion.

Every output file is a multipart upload straight to its **final** key, left uncompleted: S3 shows nothing (HEAD
404, not listed) until it is completed. Each open upload is described by a small ``.pending`` JSON in the task
attempt's directory. Task commit records the attempt's pending uploads (key, upload id, ordered part ETags, size,
rows) as the task commit record, created with ``If-None-Match: *`` like every other record, so the decision is the
same as for FileOutputCommitter. Job commit completes the recorded uploads in parallel (one request per file),
then aborts every other pending upload of the job. Nothing is copied.

Differences from Hadoop's S3A magic committer, and why:

- recovery across application attempts: a task committed in an earlier attempt is adopted by pointer, its
  uploads reused without re-uploading (S3A cannot recover);
- a job-scoped abort: uploads are identified as this job's by its records and by the job uuid in every key
  (Spark-style names), never by "everything pending under the destination", which kills concurrent jobs.

Pending uploads cost storage until completed or aborted; a bucket lifecycle rule that aborts incomplete uploads
after some days is a good safety net, as long as it is longer than any job.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import CorruptRecord, InvalidOutputSpec, StorageCapabilityError
from ..faults import inject
from ..layout import JobLayout
from ..parallel import parallel
from .base import Publisher
from ..stores.s3 import MIN_PART_SIZE, S3Store
from ..records.task import FileEntry, TaskCommitRecord

PENDING_SUFFIX = ".pending"


class MultipartFile(io.RawIOBase):
    """A write-only file that becomes one multipart upload, left pending at ``close()``.

    Memory is one part: bytes are copied once, into a buffer of *part_size* allocated up front, and that buffer
    is uploaded as it is and then reused (no slice, no ``bytes`` copy, no shifting of a remainder). The
    description of the upload (``.pending``) is written once, at ``close()``, and handed to *on_close*, so the
    task commit in this process need not read it back. An attempt that dies with a file open leaves an upload
    no ``.pending`` names: job commit aborts every pending upload of the job that no record lists, and so does
    the job's abort (both find them by the job uuid in their keys).
    """

    def __init__(self, store: S3Store, rel: str, pending_rel: str, part_size: int,
                 on_close: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        super().__init__()
        self.store, self.rel, self.pending_rel, self.part_size = store, rel, pending_rel, part_size
        self.upload_id = store.start_upload(rel)
        self.parts: list[list[Any]] = []
        self.size = 0
        self._buf = bytearray(part_size)
        self._fill = 0
        self._on_close = on_close

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n, pos = len(view), 0
        while pos < n:
            take = min(self.part_size - self._fill, n - pos)
            self._buf[self._fill:self._fill + take] = view[pos:pos + take]
            self._fill += take
            pos += take
            if self._fill == self.part_size:
                self._upload(self._buf)
                self._fill = 0
        self.size += n
        return n

    def _upload(self, chunk: bytearray | memoryview) -> None:
        number = len(self.parts) + 1
        self.parts.append([number, self.store.upload_part(self.rel, self.upload_id, number, chunk)])

    def tell(self) -> int:
        return self.size

    def close(self) -> None:
        if self.closed:
            return
        if self._fill or not self.parts:
            with memoryview(self._buf) as view:   # the last part: a view of the filled bytes, not a copy
                self._upload(view[:self._fill])
        self._buf = bytearray()
        doc = {"path": self.rel, "upload_id": self.upload_id, "parts": self.parts, "size": self.size,
               "state": "closed"}
        data = json.dumps(doc).encode()
        self.store.write_bytes(self.pending_rel, data)
        if self._on_close is not None:
            self._on_close(self.pending_rel, {**doc, "_bytes": len(data)})
        super().close()


class MultipartPublisher(Publisher):
    """The magic committer's half: files are pending multipart uploads to their final keys; the task commit
    record lists them; job commit completes them. Same records, recovery and arbitration as the file
    algorithms; nothing is copied."""

    committer_name = "MagicCommitter"
    algorithm = "magic"
    label = "magic"

    def __init__(self, store: Any, layout: JobLayout, job_id: str, threads: int,
                 part_size: int | None = None) -> None:
        if not isinstance(store, S3Store):
            raise StorageCapabilityError(
                f"the magic committer needs S3 multipart uploads; {store.url()} is a {store.protocol!r} file "
                "system: use algorithm 1 or 2 there")
        part_size = 8 * 2**20 if part_size is None else part_size
        if part_size < MIN_PART_SIZE:
            raise InvalidOutputSpec(f"part_size must be at least {MIN_PART_SIZE} bytes (S3's minimum part size), got "
                                    f"{part_size}")
        super().__init__(store, layout, job_id, threads)
        self.s3: S3Store = store
        self.part_size = part_size
        #: the ``.pending`` descriptions this process wrote (path -> (description, bytes written)): the task commit
        #: lists the attempt's directory, and reads back only those it does not hold, or holds at another size
        self._written: dict[str, tuple[dict[str, Any], int]] = {}

    # ---------------------------------------------------------------- task side
    def open_task_file(self, work_dir: str, rel: str) -> Any:
        return MultipartFile(self.s3, rel, f"{work_dir}/{rel}{PENDING_SUFFIX}", self.part_size, self._wrote)

    def _wrote(self, pending_rel: str, doc: dict[str, Any]) -> None:
        size = doc.pop("_bytes")
        self._written[pending_rel] = (doc, size)

    def _pending_of(self, work_dir: str, *, missing_ok: bool = False) -> list[dict[str, Any]]:
        """The attempt's pending-upload descriptions. *missing_ok* for a discard: another party discarding the
        same attempt at the same time (its own denied commit and a newer try's setup) may remove some first."""
        out = []
        for rel, size in self.store.list_files(work_dir):
            if rel.endswith(PENDING_SUFFIX):
                where = f"{work_dir}/{rel}"
                known = self._written.get(where)
                if known is not None and known[1] == size:
                    out.append(known[0])
                    continue
                try:
                    out.append(json.loads(self.store.read_bytes(where)))
                except FileNotFoundError as exc:
                    if missing_ok:
                        continue
                    raise CorruptRecord(f"pending upload record {self.store.url(where)} is unreadable: {exc}") \
                        from exc
                except ValueError as exc:
                    raise CorruptRecord(f"pending upload record {self.store.url(where)} is unreadable: {exc}") from exc
        return out

    def attempt_files(self, work_dir: str, task: int, rows: Mapping[str, int | None]) -> list[FileEntry]:
        """The attempt's pending uploads as record entries: key, upload id, ordered part ETags, size, rows."""
        files = []
        # missing_ok: a description removed since the listing is one a party that recorded the attempt failed
        # removed; the commit then finds the writer's file missing, and the claim says why
        for p in sorted(self._pending_of(work_dir, missing_ok=True), key=lambda p: p["path"]):
            if p["state"] != "closed":
                raise CorruptRecord(f"task attempt {work_dir.rsplit('/', 1)[-1]}: {p['path']} was never closed; "
                                    "commit after closing every file")
            files.append(FileEntry(p["path"], p["size"], rows.get(p["path"]), task, upload_id=p["upload_id"],
                                   parts=tuple((n, etag) for n, etag in p["parts"])))
        return files

    def pending_uploads(self, work_dir: str) -> set[str]:
        return {p["upload_id"] for p in self._pending_of(work_dir, missing_ok=True)}

    def discard(self, work_dir: str) -> None:
        """Abort the attempt's uploads, then remove its ``.pending`` records."""
        for p in self._pending_of(work_dir, missing_ok=True):
            self.s3.abort_upload(p["path"], p["upload_id"])
        self.store.delete_tree(work_dir)
        prefix = work_dir + "/"
        for where in [w for w in self._written if w.startswith(prefix)]:
            del self._written[where]

    # ---------------------------------------------------------------- job side
    def publish(self, recs: Sequence[TaskCommitRecord]) -> int:
        uploads = [f for rec in recs for f in rec.files]

        def complete(f: FileEntry) -> None:
            try:
                self.s3.complete_upload(f.path, f.upload_id, f.parts)
            except (FileNotFoundError, OSError):
                # NoSuchUpload: completed by an earlier run of this commit (then the object is there)
                if not self._has(f):
                    raise CorruptRecord(f"job {self.job_id}: upload {f.upload_id} of {f.path} is gone and the "
                                        "object does not exist (aborted outside the protocol, or expired by a "
                                        "lifecycle rule)") from None
            inject("commit_job.mid_move")

        parallel(complete, uploads, self.threads)
        return 0

    def _has(self, f: FileEntry) -> bool:
        try:
            return int(self.s3.fs.info(self.s3._p(f.path))["size"]) == f.size
        except FileNotFoundError:
            return False

    def _job_uploads(self, job_uuid: str) -> list[tuple[str, str]]:
        """Pending uploads of this job generation: under the root, with the job uuid in their key."""
        return [(rel, uid) for rel, uid in self.s3.list_uploads() if job_uuid in rel.rsplit("/", 1)[-1]]

    def after_publish(self, job_uuid: str, recs: Sequence[TaskCommitRecord]) -> None:
        """Abort every other pending upload of this job (denied attempts, zombies, attempts that died)."""
        committed = {f.upload_id for rec in recs for f in rec.files}
        for rel, uid in self._job_uploads(job_uuid):
            if uid not in committed:
                self.s3.abort_upload(rel, uid)

    def abort_external(self, job_uuid: str, keep_uploads: set[str]) -> int:
        """Abort this job's pending uploads except those of kept (committed) tasks."""
        aborted = 0
        for rel, uid in self._job_uploads(job_uuid):
            if uid not in keep_uploads:
                self.s3.abort_upload(rel, uid)
                aborted += 1
        return aborted
