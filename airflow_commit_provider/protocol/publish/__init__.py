"""How each algorithm makes committed files visible: one publisher per algorithm, chosen once by :func:`publisher_for`.

==================  ========================================  =============================================
publisher           task commit (after the record)            job commit
==================  ========================================  =============================================
``RenamePublisher``  v1, local disk: move the files into the   rename new partition directories whole, then
                    application attempt's ``_committed``       the remaining files one by one
``MovePublisher``   v1, object stores and other file systems:  move (S3: copy, then delete the sources in
                    nothing, the record alone commits          batches): every byte copied once
``TaskCommitPublisher``  v2: withdraw the markers above, move  check every file is there
                    the files to their final names
``MultipartPublisher``   magic (S3): nothing, the record       complete the recorded multipart uploads, abort
                    lists the pending uploads                  the job's other uploads (see :mod:`.magic`)
==================  ========================================  =============================================

Everything a committer does differently per algorithm lives here (and in :mod:`.magic`); the committer chooses
one with :func:`~.committer.publisher_for` and neither it nor the job-commit stages compare algorithms.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..errors import CorruptRecord, InvalidOutputSpec
from ..faults import inject
from ..layout import JobLayout
from ..records.success import marker_dirs_above, withdraw_markers
from ..parallel import parallel
from ..paths import is_hidden, partition_of
from ..stores import Store
from ..records.task import FileEntry, TaskCommitRecord


class Publisher:
    """The algorithm-specific half of a committer; the default methods are those of file-based algorithms."""

    committer_name = "FileOutputCommitter"
    #: what the job record stores as the algorithm (1, 2 or "magic") and how it is shown ("v1", "v2", "magic")
    algorithm: int | str = 1
    label = "v1"
    #: when the files become visible: at "job-commit", or at each "task-commit" (v2)
    visibility = "job-commit"
    #: whether the failed run's teardown can keep committed tasks hidden for recovery
    keeps_committed = True
    #: whether a task commit's effect continues after its record (:meth:`complete_task_commit` does something)
    moves_after_record = False

    def __init__(self, store: Store, layout: JobLayout, job_id: str, threads: int) -> None:
        self.store = store
        self.layout = layout
        self.job_id = job_id
        self.threads = threads

    # ------------------------------------------------------------------ task side
    def open_task_file(self, work_dir: str, rel: str) -> Any:
        """A writable binary file for *rel* (relative to the output root) in an attempt's work directory."""
        return self.store.open_write(f"{work_dir}/{rel}")

    def attempt_files(self, work_dir: str, task: int, rows: Mapping[str, int | None]) -> list[FileEntry]:
        """The files an attempt holds, as record entries (path, size, rows, task)."""
        files = []
        for rel, size in sorted(self.store.list_files(work_dir)):
            if is_hidden(rel):
                continue
            n = rows.get(rel)
            if n is None and rel.endswith(".parquet"):
                n = self._parquet_rows(f"{work_dir}/{rel}")
            files.append(FileEntry(rel, size, n, task))
        return files

    def _parquet_rows(self, rel: str) -> int | None:
        import pyarrow.parquet as pq

        try:
            return int(pq.read_metadata(io.BytesIO(self.store.read_bytes(rel))).num_rows)
        except Exception:  # not a Parquet file after all: rows unknown
            return None

    def discard(self, work_dir: str) -> None:
        """Remove everything an attempt wrote (it was denied, failed or is stale)."""
        self.store.delete_tree(work_dir)

    def data_dir(self, app: int, work_dir: str) -> str:
        """Where a committed attempt's files lie until job commit (the record says it): ``""`` is the output."""
        return work_dir

    def pending_uploads(self, work_dir: str) -> set[str]:
        """Upload ids an attempt holds open outside its directory (only the magic committer has any)."""
        return set()

    def clobbered(self, paths: Sequence[str]) -> list[str]:
        """Those of an attempt's files whose task commit would replace a visible file (only v2 publishes there)."""
        return []

    def complete_task_commit(self, rec: TaskCommitRecord) -> None:
        """Finish the effect of a task commit record (idempotent; safe for several processes at once)."""

    def complete_task_commits(self, recs: Sequence[TaskCommitRecord]) -> None:
        """:meth:`complete_task_commit` for every record whose attempt directory is still there, found with one
        listing per directory of attempts instead of one per record (on S3 a LIST request each). A task commit
        removes its attempt directory last, after its record and its moves: a directory missing from a listing
        made after the record was read is one whose commit finished."""
        if not self.moves_after_record:
            return
        by_parent: dict[str, list[TaskCommitRecord]] = {}
        for rec in recs:
            if not rec.adopted and rec.work_dir:
                by_parent.setdefault(partition_of(rec.work_dir), []).append(rec)
        pending = []
        for parent, group in by_parent.items():
            names = set(self.store.list_dir(parent))
            pending += [rec for rec in group if rec.work_dir.rsplit("/", 1)[-1] in names]
        parallel(self.complete_task_commit, pending, self.threads)

    # ------------------------------------------------------------------ job side
    def publish(self, recs: Sequence[TaskCommitRecord]) -> int:
        """Make every committed task's files visible at their final names (idempotent). Returns the number of
        directories renamed whole."""
        moves = [(f"{rec.data_dir}/{f.path}", f.path, f.size) for rec in recs for f in rec.files]
        self._publish_files(moves)
        return 0

    def _publish_files(self, moves: list[tuple[str, str, int]]) -> None:
        for d in sorted({partition_of(dst) for _, dst, _ in moves} - {""}):
            self.store.makedirs(d)
        try:
            self.store.publish_files(moves, self.threads, lambda: inject("commit_job.mid_move"))
        except FileNotFoundError as exc:
            raise CorruptRecord(f"job {self.job_id}: {exc} is gone and its destination was never written; the "
                                "data was deleted outside the protocol") from None

    def after_publish(self, job_uuid: str, recs: Sequence[TaskCommitRecord]) -> None:
        """After the data is visible (the magic committer aborts the job's other uploads here)."""

    def strays(self, visible: set[str], planned: set[str], job_uuid: str) -> set[str]:
        """Visible files of this generation that no planned record lists (only v2 can leave such files)."""
        return set()

    def withdraw_commit(self, rec: TaskCommitRecord, keep: Collection[str] = ()) -> list[str]:
        """Undo a committed task's visible effect (only v2 has one), but for the files at names in *keep* (a newer
        commit's); returns the visible files removed."""
        return []

    def abort_external(self, job_uuid: str, keep_uploads: set[str]) -> int:
        """Abort state outside the job directory (the magic committer's pending uploads); returns how many."""
        return 0


def move_once(store: Store, job_id: str, src: str, dst: str, size: int | None = None, replace: bool = True) -> bool:
    """Move *src* to *dst* unless that already happened (earlier run, or a concurrent completer).

    ``True`` when this call moved the file. A file in neither place was deleted outside the protocol. Without
    *replace*, a *dst* holding another file (another task's file of the same name) is refused, and *src* is only
    linked to *dst*: the caller removes it once every new name is durable.
    """
    try:
        if replace:
            store.move_file(src, dst, size)
        else:
            store.link_no_replace(src, dst)
        return True
    except FileExistsError:
        raise InvalidOutputSpec(f"job {job_id}: {store.url(dst)} already holds another task's file of that name; "
                                "file names must be unique across tasks (include the task number). "
                                f"{store.url(src)} stays where it is") from None
    except FileNotFoundError:
        if store.exists(dst):
            return False
        raise CorruptRecord(f"job {job_id}: {store.url(src)} is gone and {store.url(dst)} was never written; the "
                            "data was deleted outside the protocol") from None


class MovePublisher(Publisher):
    """v1 where a move copies bytes or cannot refuse to replace (object stores, other fsspec file systems): the
    task commit record alone commits, the data stays in the attempt directory, job commit moves it once."""


class RenamePublisher(Publisher):
    """v1 on a local disk: task commit moves the winner's files into the application attempt's ``_committed``
    directory with moves that refuse to replace; job commit renames whole directories where it can."""

    moves_after_record = True

    def data_dir(self, app: int, work_dir: str) -> str:
        return self.layout.committed_dir(app)

    def complete_task_commit(self, rec: TaskCommitRecord) -> None:
        if rec.adopted:
            return
        _complete_moves(self.store, self.job_id, rec, rec.data_dir, replace=False)

    def publish(self, recs: Sequence[TaskCommitRecord]) -> int:
        moves = [(f"{rec.data_dir}/{f.path}", f.path, f.size) for rec in recs for f in rec.files]
        renamed = self._publish_directories(recs)
        if renamed:
            moves = [m for m in moves if not m[0].startswith(renamed)]
        self._publish_files(moves)
        return len(renamed)

    def _publish_directories(self, recs: Sequence[TaskCommitRecord]) -> tuple[str, ...]:
        """Rename whole directories of committed files whose destination does not exist yet.

        A new partition then appears in one rename, however many files and tasks it holds (Hadoop's mergePaths
        renames a task's directory when its destination is missing; here one ``_committed`` directory holds every
        task's files, so it is one rename per new partition for the whole job). Only a directory holding nothing
        but this plan's files is renamed, so a stray file (from a task commit the plan does not include) never
        becomes visible; anything else falls back to the file-by-file moves. Returns the source prefixes renamed.
        """
        if not any("/" in f.path for rec in recs for f in rec.files):
            return ()  # no directories: an unpartitioned output pays nothing for this
        planned: dict[str, set[str]] = {}
        for rec in recs:
            planned.setdefault(rec.data_dir, set()).update(f.path for f in rec.files)
        renamed: list[str] = []
        for data_dir, files in planned.items():
            children: dict[str, set[str]] = {}
            for directory in {partition_of(path) for path in files} - {""}:
                parts = directory.split("/")
                for i, part in enumerate(parts):
                    children.setdefault("/".join(parts[:i]), set()).add(part)
            stack = sorted(children.get("", ()), reverse=True)
            while stack:
                rel = stack.pop()
                if not self.store.exists(rel):
                    under = {f"{rel}/{p}" for p in self.store.list_names(f"{data_dir}/{rel}")}
                    if under and under <= files and self.store.move_dir_if_absent(f"{data_dir}/{rel}", rel):
                        renamed.append(f"{data_dir}/{rel}/")
                        inject("commit_job.mid_move")
                        continue
                stack.extend(f"{rel}/{d}" for d in sorted(children.get(rel, ()), reverse=True))
        return tuple(renamed)


class TaskCommitPublisher(Publisher):
    """v2: each task commit moves its files straight to their final names; job commit only checks they are there.
    Faster, not atomic: a failed job's committed tasks were visible (its abort removes them)."""

    algorithm = 2
    label = "v2"
    visibility = "task-commit"
    keeps_committed = False
    moves_after_record = True

    def data_dir(self, app: int, work_dir: str) -> str:
        return ""

    def complete_task_commit(self, rec: TaskCommitRecord) -> None:
        if rec.adopted:
            return
        _complete_moves(self.store, self.job_id, rec, "", replace=True)

    def clobbered(self, paths: Sequence[str]) -> list[str]:
        # a visible file of that name belongs to another job (a user-chosen name), or to the winner of this task
        # when a zombie asks: moving over it would lose its rows (the v1 plan refuses the same at job commit)
        return sorted(set(paths) - set(self.store.missing(list(paths))))

    def publish(self, recs: Sequence[TaskCommitRecord]) -> int:
        missing = self.store.missing([f.path for rec in recs for f in rec.files])
        if missing:
            raise CorruptRecord(f"job {self.job_id}: committed v2 file(s) missing from the output: {missing[:5]}")
        return 0

    def strays(self, visible: set[str], planned: set[str], job_uuid: str) -> set[str]:
        # a zombie's late task commit after the teardown, or a v2 abort that died between a record and its files
        return {p for p in visible - planned if job_uuid in p.rsplit("/", 1)[-1]}

    def withdraw_commit(self, rec: TaskCommitRecord, keep: Collection[str] = ()) -> list[str]:
        """The record is gone already (see the abort): remove the visible files, the markers above them first."""
        paths = [f.path for f in rec.files if f.path not in keep]
        present = sorted(set(paths) - set(self.store.missing(paths)))
        withdraw_markers(self.store, marker_dirs_above(present))
        delete_and_prune(self.store, present, self.threads)
        self.store.delete_tree(rec.work_dir)
        return present


def _complete_moves(store: Store, job_id: str, rec: TaskCommitRecord, dst_dir: str, replace: bool) -> None:
    """Move what is still in a record's attempt directory to *dst_dir* (``""``: the output), then remove the
    directory. One listing, not one request per file: on S3 a finished task commit then costs a single LIST to
    check again. Files that become visible (``dst_dir == ""``) first withdraw the markers above them (I9)."""
    src = rec.work_dir
    remaining = {rel for rel, _ in store.list_files(src)}
    moves = [f for f in rec.files if f.path in remaining]
    if moves and not dst_dir:
        withdraw_markers(store, marker_dirs_above(f.path for f in moves))  # durable before the first move
    with store.batch():  # the new names durable together, before the attempt directory goes
        for f in moves:
            if move_once(store, job_id, f"{src}/{f.path}", f"{dst_dir}/{f.path}" if dst_dir else f.path,
                         f.size, replace=replace):
                inject("commit_task.mid_move")
    if remaining:
        store.delete_tree(src)


def delete_and_prune(store: Store, rels: Sequence[str], threads: int) -> None:
    """Delete files (idempotent; S3: in batches), then the directories that became empty, deepest first."""
    store.delete_many(rels, threads, lambda: inject("commit_job.mid_delete"))
    with store.batch():
        for d in sorted({partition_of(p) for p in rels} - {""}, key=lambda p: -p.count("/")):
            while d and store.remove_dir_if_empty(d):
                d = partition_of(d)
