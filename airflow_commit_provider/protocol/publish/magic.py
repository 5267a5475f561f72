"""The "magic" committer: zero-copy commits through delayed multipart-upload completion (S3), or staged blocks
committed late (Azure Blob Storage: :mod:`..stores.azure`; the same five store calls, in S3's names).

Every output file is a multipart upload straight to its **final** key, left uncompleted: S3 shows nothing (HEAD
404, not listed) until it is completed. The committer that set up a task attempt holds the attempt's uploads in
memory (key, upload id, ordered part ETags, size); its task commit records them (with the rows) as the task commit
record, created with ``If-None-Match: *`` like every other record, so the decision is the same as for
FileOutputCommitter. Job commit completes the recorded uploads in parallel (one request per file), then aborts
every other pending upload of the job. Nothing is copied, and nothing but the uploads is written per file.

Earlier releases also described each upload in a ``.pending`` file in the attempt's directory; those are still
read, so an attempt such a release wrote is discarded (and, had it claimed its commit, kept) as before.

Differences from Hadoop's S3A magic committer, and why:

- recovery across application attempts: a task committed in an earlier attempt is adopted by pointer, its
  uploads reused without re-uploading (S3A cannot recover);
- a job-scoped abort: uploads are identified as this job's by its records and by the job uuid in every key
  (Spark-style names), never by "everything pending under the destination", which kills concurrent jobs.

Pending uploads cost storage until completed or aborted; a bucket lifecycle rule that aborts incomplete uploads
after some days is a good safety net, as long as it is longer than any job.

On Azure a file's blocks are staged under its final name with ids of their own upload; the job commit's Put Block
List makes the blob. Staged blocks cannot be aborted one upload at a time (only a blob's name can be deleted, and
every try of a task shares it), so the store's abort does nothing and lists nothing: Azure discards the blocks of
the tries that lost when the job commit commits the winner's under the same name, and any other a week after
their blob's last Put Block, which also bounds how long a job may take (:mod:`..audit.expiry`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CommitProtocolError, CorruptRecord, InvalidOutputSpec, StorageCapabilityError
from ..faults import inject
from ..layout import JobLayout
from ..parallel import parallel
from .base import Publisher
from ..stores.base import Store
from ..records.task import FileEntry, TaskCommitRecord

PENDING_SUFFIX = ".pending"


class MultipartFile(io.RawIOBase):
    """A write-only file that becomes one multipart upload, left pending at ``close()``.

    Memory is one part: bytes are copied once, into a buffer of *part_size* allocated up front, and that buffer
    is uploaded as it is and then reused (no slice, no ``bytes`` copy, no shifting of a remainder). The upload's
    description goes into *held* (the attempt's uploads, by path) as soon as the upload exists, and is completed
    at ``close()`` (parts, size): the task commit builds its record from it, and a discard of the attempt in this
    process aborts the upload even if the file was never closed. Nothing else is written per file.
    """

    def __init__(self, store: Any, rel: str, part_size: int, held: dict[str, dict[str, Any]]) -> None:
        super().__init__()
        self.store, self.rel, self.part_size = store, rel, part_size
        self.upload_id = store.start_upload(rel)
        self._doc: dict[str, Any] = {"path": rel, "upload_id": self.upload_id, "state": "open"}
        held[rel] = self._doc
        self.parts: list[list[Any]] = []
        self.size = 0
        self._buf = bytearray(part_size)
        self._fill = 0

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
        if number > self.store.max_parts:   # refused while writing, not at the job commit after other files
            raise InvalidOutputSpec(f"{self.rel}: more than {self.store.max_parts} parts of {self.part_size} bytes "
                                    f"({self.store.max_parts * self.part_size} bytes), the most one staged file "
                                    "takes on this store: give a larger part_size")
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
        self._doc.update(parts=self.parts, size=self.size, state="closed")
        super().close()


class MultipartPublisher(Publisher):
    """The magic committer's half: files are pending multipart uploads to their final keys; the task commit
    record lists them; job commit completes them. Same records, recovery and arbitration as the file
    algorithms; nothing is copied."""

    committer_name = "MagicCommitter"
    algorithm = "magic"
    label = "magic"
    has_uploads = True

    def __init__(self, store: Store, layout: JobLayout, job_id: str, threads: int,
                 part_size: int | None = None) -> None:
        if store.min_part_size is None:
            raise StorageCapabilityError(
                f"the magic committer needs a store that stages files under their final names (S3 multipart "
                f"uploads, Azure staged blocks); {store.url()} is a {store.protocol!r} file system: use algorithm 1 "
                "or 2 there")
        part_size = 8 * 2**20 if part_size is None else part_size
        if part_size < store.min_part_size:
            raise InvalidOutputSpec(f"part_size must be at least {store.min_part_size} bytes (the store's minimum "
                                    f"part size), got {part_size}")
        super().__init__(store, layout, job_id, threads)
        #: the store, through its staged-upload calls
        self.uploads: Any = store
        self.part_size = part_size
        #: the uploads of the attempts this committer set up: work directory -> path -> description (upload id,
        #: and once the file is closed its parts and size); what the task commit records and a discard aborts
        self._written: dict[str, dict[str, dict[str, Any]]] = {}

    # ---------------------------------------------------------------- task side
    def begin_attempt(self, work_dir: str) -> None:
        self._written.setdefault(work_dir, {})

    def check_task_file(self, rel: str, job_uuid: str) -> None:
        """Where staged parts belong to the file's name, not to an upload (Azure: a Put Block List under a name
        discards every other block staged there), a name another generation could stage under is refused: a late
        job commit of this generation (a zombie), completing its upload again, would discard the next one's
        blocks. The default names carry the generation's uuid; a name the writer chose must too."""
        if self.store.stages_by_name and job_uuid not in rel.rsplit("/", 1)[-1]:
            raise InvalidOutputSpec(
                f"file name {rel!r}: the magic committer on {self.store.protocol!r} stages a file's blocks under its "
                "final name, so each generation of a job needs names of its own; leave the name to the writer (the "
                f"default names carry the generation, {job_uuid}), put the generation in it "
                "(TaskAttemptContext.job_uuid), or use algorithm=1")

    def open_task_file(self, work_dir: str, rel: str) -> Any:
        held = self._written.setdefault(work_dir, {})
        replaced = held.get(rel)
        if replaced is not None:   # the same name opened again: only the last upload is the attempt's file
            self.uploads.abort_upload(rel, replaced["upload_id"])
        return MultipartFile(self.uploads, rel, self.part_size, held)

    def _pending_of(self, work_dir: str) -> list[dict[str, Any]]:
        """The ``.pending`` descriptions an earlier release wrote in the attempt's directory (one listing). One
        removed since the listing was removed by a party that recorded the attempt failed (its own denied commit
        and a newer try's setup may discard it at the same time)."""
        out = []
        for rel, _ in self.store.list_files(work_dir):
            if rel.endswith(PENDING_SUFFIX):
                where = f"{work_dir}/{rel}"
                try:
                    out.append(json.loads(self.store.read_bytes(where)))
                except FileNotFoundError:
                    continue
                except ValueError as exc:
                    raise CorruptRecord(f"pending upload record {self.store.url(where)} is unreadable: {exc}") from exc
        return out

    def attempt_files(self, work_dir: str, task: int, rows: Mapping[str, int | None]) -> list[FileEntry]:
        """The attempt's pending uploads as record entries: key, upload id, ordered part ETags, size, rows.

        They come from what this committer holds, not from a listing. That is enough because the record is
        only ever created after this attempt's exclusive claim to commit, and every party that removes an
        attempt's files (its own abort, a newer try's fencing, the teardown, a denial) records it failed first,
        by the same exclusive claim: if the claim is ours, nobody has aborted these uploads, and nobody will
        (the job commit and the abort keep every upload a record or a claim to commit lists). The writer's
        report is still checked against them (a file reported but never opened here, or of another size).

        An attempt this committer did not set up (its uploads' part ETags are in another process's memory) can
        only be committed from an earlier release's ``.pending`` descriptions; without them this is a
        :class:`CommitProtocolError`, raised before anything is recorded."""
        held = self._written.get(work_dir)
        if held is None:
            held = {p["path"]: p for p in self._pending_of(work_dir)}
            if not held:
                raise CommitProtocolError(
                    f"task attempt {work_dir.rsplit('/', 1)[-1]} was not set up by this committer: the magic "
                    "committer holds an attempt's uploads (their part ETags) in the memory of the process that "
                    "wrote them, so commit_task must run in the committer whose setup_task or "
                    "recover_or_setup_task created the attempt (as run_task_attempt does)")
        files = []
        for p in sorted(held.values(), key=lambda p: p["path"]):
            if p["state"] != "closed":
                raise CorruptRecord(f"task attempt {work_dir.rsplit('/', 1)[-1]}: {p['path']} was never closed; "
                                    "commit after closing every file")
            files.append(FileEntry(p["path"], p["size"], rows.get(p["path"]), task, upload_id=p["upload_id"],
                                   parts=tuple((n, etag) for n, etag in p["parts"])))
        return files

    def pending_uploads(self, work_dir: str) -> set[str]:
        """The upload ids an earlier release's ``.pending`` descriptions name (an attempt that claimed its
        commit with the word ``committing``, before claims held the record)."""
        return {p["upload_id"] for p in self._pending_of(work_dir)}

    def discard(self, work_dir: str) -> bool:
        """Abort the attempt's uploads where this committer holds them (every one, closed or not), and report
        ``True``; else remove an earlier release's ``.pending`` descriptions, aborting the uploads they name, and
        report ``False``: the caller then sweeps the task's uploads (:meth:`task_uploads`)."""
        held = self._written.get(work_dir)
        if held is not None:   # this release writes nothing under the attempt's directory
            for p in list(held.values()):
                self.uploads.abort_upload(p["path"], p["upload_id"])
            # still held, and empty: a later commit of the attempt in this committer (a zombie's, denied by the
            # claim that the discard followed) finds nothing rather than an attempt it does not know
            held.clear()
            return True
        for p in self._pending_of(work_dir):
            self.uploads.abort_upload(p["path"], p["upload_id"])
        self.store.delete_tree(work_dir)
        return False

    def task_uploads(self, file_prefix: str) -> list[tuple[str, str]]:
        """The pending uploads (path, upload id) whose file name starts with *file_prefix* (a task's, in one
        generation: :attr:`~..tasks.attempts.TaskAttemptContext.file_prefix`), whichever attempt started them."""
        return [(rel, uid) for rel, uid in self.uploads.list_uploads() if rel.rsplit("/", 1)[-1].startswith(file_prefix)]

    def abort_uploads(self, uploads: Sequence[tuple[str, str]]) -> None:
        for rel, uid in uploads:
            self.uploads.abort_upload(rel, uid)

    # ---------------------------------------------------------------- job side
    def publish(self, recs: Sequence[TaskCommitRecord]) -> int:
        uploads = [f for rec in recs for f in rec.files]

        def complete(f: FileEntry) -> None:
            try:   # completed already (a resumed commit, a resent request) counts as done: the store checks
                self.uploads.complete_upload(f.path, f.upload_id, f.parts, f.size)
            except FileNotFoundError as exc:
                raise CorruptRecord(f"job {self.job_id}: upload {f.upload_id} of {f.path} is gone and the "
                                    "object it makes does not exist (aborted outside the protocol, or expired by "
                                    f"a lifecycle rule): {exc}") from None
            inject("commit_job.mid_move")

        parallel(complete, uploads, self.threads)
        return 0

    def job_uploads(self, job_uuid: str) -> list[tuple[str, str]]:
        """Pending uploads of this job generation: under the root, with the job uuid in their key."""
        return [(rel, uid) for rel, uid in self.uploads.list_uploads() if job_uuid in rel.rsplit("/", 1)[-1]]

    def after_publish(self, job_uuid: str, recs: Sequence[TaskCommitRecord]) -> None:
        """Abort every other pending upload of this job (denied attempts, zombies, attempts that died)."""
        committed = {f.upload_id for rec in recs for f in rec.files}
        for rel, uid in self.job_uploads(job_uuid):
            if uid not in committed:
                self.uploads.abort_upload(rel, uid)
