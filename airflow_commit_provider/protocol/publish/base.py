"""What every publisher shares: the base class (the file-based algorithms' defaults) and the idempotent moves a
task commit's effect and a job commit are made of."""

from __future__ import annotations

import io
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from ..errors import CorruptRecord, InvalidOutputSpec
from ..faults import inject
from ..layout import JobLayout
from ..records.success import marker_dirs_above, withdraw_markers
from ..parallel import parallel
from ..paths import is_hidden, partition_of
from ..stores import Store
from ..records.task import FileEntry, TaskCommitRecord


#: How an attempt keeps a file of a partition where the store has directories: in the attempt's directory itself,
#: named by this prefix and the file's path with ``%`` and ``/`` escaped, so an attempt makes no directory per
#: partition (the application attempt's ``_committed`` tree and the output have them, made once per job). No
#: name a user gives can start with ``_`` (:func:`~.paths.check_relative`), so the two kinds never mix up.
FLAT_PREFIX = "_p."
def flat_name(rel: str, name_max: int = 255) -> str:
    """The name a partitioned file *rel* has in an attempt's directory: *rel* itself when it has no directory, or
    when the flat name would be longer than the file system's longest name (*name_max* bytes)."""
    if "/" not in rel:
        return rel
    name = FLAT_PREFIX + rel.replace("%", "%25").replace("/", "%2F")
    return name if len(name.encode()) <= name_max else rel


def stored_paths(names: Iterable[str]) -> dict[str, str]:
    """The files of an attempt's directory listing (*names* relative to it), by the path each stands for:
    flat names decoded (every ``%`` in one starts an escape, so ``%2F`` is decoded first), nested ones as they
    are, hidden ones left out."""
    out = {}
    for name in names:
        if name.startswith(FLAT_PREFIX) and "/" not in name:
            out[name[len(FLAT_PREFIX):].replace("%2F", "/").replace("%25", "%")] = name
        elif not is_hidden(name):
            out[name] = name
    return out


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
    #: whether an attempt's files are pending uploads that only :meth:`task_uploads` lists (magic), not files in
    #: its directory
    has_uploads = False
    #: whether an attempt keeps its partitioned files flat (:func:`flat_name`): where the task commit moves them
    #: (:func:`complete_moves` reads both kinds) and the store has directories to save
    flat_attempts = False

    @property
    def publishes_at_task_commit(self) -> bool:
        """Whether each task commit makes its files visible (v2), so job commit only checks them."""
        return self.visibility == "task-commit"

    def __init__(self, store: Store, layout: JobLayout, job_id: str, threads: int) -> None:
        self.store = store
        self.layout = layout
        self.job_id = job_id
        self.threads = threads

    # ------------------------------------------------------------------ task side
    def check_task_file(self, rel: str, job_uuid: str) -> None:
        """Refuse a name an attempt of generation *job_uuid* may not write (:class:`InvalidOutputSpec`), before
        anything is opened: nothing to refuse but on a store whose staged parts belong to a name (magic on Azure)."""

    def open_task_file(self, work_dir: str, rel: str) -> Any:
        """A writable binary file for *rel* (relative to the output root) in an attempt's work directory."""
        flat = "/" in rel and self.flat_attempts and self.store.has_directories   # name_max costs a statfs: asked
        stored = flat_name(rel, self.store.name_max) if flat else rel            # only for a partitioned file
        return self.store.open_write(f"{work_dir}/{stored}")

    def attempt_files(self, work_dir: str, task: int, rows: Mapping[str, int | None]) -> list[FileEntry]:
        """The files an attempt holds, as record entries (path, size, rows, task)."""
        listed = self.store.list_files(work_dir)
        sizes = dict(listed)
        files = []
        for rel, stored in sorted(stored_paths(name for name, _ in listed).items()):
            n = rows.get(rel)
            if n is None and rel.endswith(".parquet"):
                n = self._parquet_rows(f"{work_dir}/{stored}")
            files.append(FileEntry(rel, sizes[stored], n, task))
        return files

    def _parquet_rows(self, rel: str) -> int | None:
        import pyarrow.parquet as pq

        try:
            return int(pq.read_metadata(io.BytesIO(self.store.read_bytes(rel))).num_rows)
        except Exception:  # not a Parquet file after all: rows unknown
            return None

    def begin_attempt(self, work_dir: str) -> None:
        """An attempt with this work directory is set up by this committer (the magic committer holds its uploads
        from now on)."""

    def discard(self, work_dir: str) -> bool:
        """Remove everything an attempt wrote (it was denied, failed or is stale); ``False`` when some of it may
        lie outside the directory where only :meth:`task_uploads` finds it (magic: an attempt another process
        wrote)."""
        self.store.delete_tree(work_dir)
        return True

    def task_uploads(self, file_prefix: str) -> list[tuple[str, str]]:
        """Pending uploads (path, upload id) of one task's files, whichever attempt started them (only the magic
        committer has any)."""
        return []

    def abort_uploads(self, uploads: Sequence[tuple[str, str]]) -> None:
        """Abort uploads :meth:`task_uploads` or :meth:`job_uploads` returned (there are none but the magic
        committer's)."""

    def data_dir(self, app: int, work_dir: str) -> str:
        """Where a committed attempt's files lie until job commit (the record says it): ``""`` is the output."""
        return work_dir

    def pending_uploads(self, work_dir: str) -> set[str]:
        """Upload ids an earlier release's attempt described in its directory (only the magic committer's)."""
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
        # the parents first, listed once each: as a rule every task commit finished and they hold no attempt
        # directory, so the records are not gone through again (10,000 of them: a third of the time)
        ours = [rec for rec in recs if not rec.adopted and rec.work_dir]
        left = {parent: names for parent in {rec.work_dir.rpartition("/")[0] for rec in ours}
                if (names := set(self.store.list_dir(parent)))}
        pending = []
        if left:
            for rec in ours:
                parent, _, name = rec.work_dir.rpartition("/")
                if name in left.get(parent, ()):
                    pending.append(rec)
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
            self.store.publish_files(moves, self.threads, partial(inject, "commit_job.mid_move"))
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

    def job_uploads(self, job_uuid: str) -> list[tuple[str, str]]:
        """Pending uploads (path, upload id) of job generation *job_uuid*, whichever attempt started them: state
        outside the job directory that an abort removes (only the magic committer has any)."""
        return []



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



def complete_moves(store: Store, job_id: str, rec: TaskCommitRecord, dst_dir: str, replace: bool) -> None:
    """Move what is still in a record's attempt directory to *dst_dir* (``""``: the output), then remove the
    directory. One listing, not one request per file: on S3 a finished task commit then costs a single LIST to
    check again. Files that become visible (``dst_dir == ""``) first withdraw the markers above them (I9)."""
    src = rec.work_dir
    remaining = store.list_names(src)
    stored = stored_paths(remaining)   # flat or nested, whichever the attempt wrote (:func:`flat_name`)
    moves = [f for f in rec.files if f.path in stored]
    if moves and not dst_dir:
        withdraw_markers(store, marker_dirs_above(f.path for f in moves))  # durable before the first move
    if replace:
        # the store's own idempotent publication (S3: the copies, then the sources deleted 1,000 a request, not
        # one DeleteObject per file; a crash in between copies again from the sources that are still there)
        try:
            store.publish_files([(f"{src}/{stored[f.path]}", f"{dst_dir}/{f.path}" if dst_dir else f.path, f.size)
                                 for f in moves], 1, lambda: inject("commit_task.mid_move"))
        except FileNotFoundError as exc:
            raise CorruptRecord(f"job {job_id}: {exc} is gone and its destination was never written; the data was "
                                "deleted outside the protocol") from None
    else:
        with store.batch():  # the new names durable together, before the attempt directory goes
            for f in moves:
                if move_once(store, job_id, f"{src}/{stored[f.path]}", f"{dst_dir}/{f.path}" if dst_dir else f.path,
                             f.size, replace=False):
                    inject("commit_task.mid_move")
    if remaining:
        store.delete_known_tree(src, remaining)


