"""What a reader waiting for a commit is given: the one decision behind the ``_SUCCESS`` sensor's poke (poke and
reschedule mode) and its deferrable trigger.

A ``_SUCCESS`` names the job that committed last. When job B's commit replaces job A's marker before a reader
waiting for A looks (two jobs appending into one target, a backfill), the marker of the moment says nothing about
A, yet A did commit. So "has job A committed?" is answered from A's commit history (:mod:`.history`; DESIGN
section 10), and the marker only says whose files the directory holds now:

- **with a job id**: the job's newest finished commit that wrote under the target. Its manifest is the marker's
  while the marker is that commit's, else the commit log's (``retained_files`` then is ``None``: only a marker
  lists the other files it kept). With *verify_files*: while the marker is the commit's, the marker is verified as
  ever (exactly its files, I9); once a later commit replaced it, the commit's own files must still be there with
  their sizes (other jobs' files beside them are fine: that is what the job's consumer reads). A later commit that
  removed some of them (an overwrite, a compaction) is final: :class:`CommitFilesGone`, naming the way out, not a
  wait that never ends. A table's commit is judged by what the current marker lists (the files the table's
  current version references): an overwrite leaves the replaced files under the data root for older versions,
  but no reader of the table reads them. A re-run of the same job that is replacing its own files is waited
  for; once the re-run committed without writing under the target, the earlier commit is answered with the
  summary its log keeps (no files, ``replaced_by`` naming the re-run), and with *verify_files* as files gone.
- **without a job id**: the target's marker, as before, except that a maintenance commit's marker (a compaction:
  it changed no row) counts only once a commit of data finished under the target; a compaction alone is no
  commit to wait for. After one, the compaction's marker is returned: it lists the files to read now.

Every manifest returned carries ``commit_id`` (the generation's job uuid, as the asset watcher's events do) and
``retained_files`` (how many other files the marker kept; ``None`` when the manifest is the commit log's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import CommitFilesGone, MarkerChanging
from .history import Commit, HistoryReader
from .layout import JobLayout, check_job_id
from .records.job import JobRecord
from .records.success import read_success_marker, retained_count
from .stores import Store

#: Finds the output root that holds the target's commit logs, and the target's partition under it (``""``: the
#: target is the root); ``None`` while there are none. Called only when the decision needs the history.
RootFinder = Callable[[], "tuple[Store, str] | None"]


@dataclass(frozen=True)
class Awaited:
    """The answer to one look: the manifest waited for, or ``None`` and why not yet (for the task log)."""

    manifest: dict[str, Any] | None
    why: str = ""


def awaited_manifest(target: Store, find_root: RootFinder, *, job_id: str | None = None,
                     verify_files: bool = False) -> Awaited:
    """The commit a reader of *target* (an output root or a partition directory of it) waits for, as the module
    docstring decides; :class:`CorruptRecord` for a corrupt marker or commit log (or, with *verify_files*, a stable
    marker of the commit that does not match its files), :class:`CommitFilesGone` when the job's files were
    replaced since its commit; :class:`InvalidOutputSpec` for a *job_id* no job can have (before any read: it names
    a file of the commit log)."""
    if job_id is None:
        return _current(target, find_root, verify_files)
    check_job_id(job_id)
    found = find_root()
    if found is None:
        return Awaited(None, f"nothing has committed under {target.url()} yet")
    return _of_job(target, *found, job_id, verify_files)


def _current(target: Store, find_root: RootFinder, verify_files: bool) -> Awaited:
    marker, why = _marker(target, verify_files)
    if marker is None:
        return Awaited(None, why)
    kind = marker.get("maintenance")
    if kind is not None and not _rows_committed(find_root()):
        return Awaited(None, f"{target.url('_SUCCESS')} is the marker of a {kind} (job {marker['job_id']}), which "
                             "changed no row; no commit of data has finished there yet")
    return Awaited(_from_marker(marker))


def _rows_committed(found: tuple[Store, str] | None) -> bool:
    """Whether a commit that changed rows finished under the partition of *found*."""
    if found is None:
        return False
    root, partition = found
    return any(c.concerns(partition) for commits in HistoryReader(root).read().jobs.values() for c in commits)


def _of_job(target: Store, root: Store, partition: str, job_id: str, verify_files: bool) -> Awaited:
    reader = HistoryReader(root)
    finished = reader.job_commits(job_id)
    commits = [c for c in finished if c.touches(partition)]
    if not commits:
        return Awaited(None, f"job {job_id} has not committed under {target.url()} yet")
    commit = commits[-1]
    marker, _ = _marker(target, verify_files=False)
    if marker is not None and marker["job_uuid"] == commit.commit_id:
        if not verify_files:
            return Awaited(_from_marker(marker))
        verified, _ = _marker(target, verify_files=True)
        if verified is not None and verified["job_uuid"] == commit.commit_id:
            return Awaited(_from_marker(verified))
        marker = verified   # replaced while it was verified: judged as the commit's files below
    loaded = reader.loaded(commit)
    problem = None
    if loaded.manifest is None:   # only its summary is left: its job's next generation replaced its files
        if loaded.replaced_by not in {c.commit_id for c in finished}:
            return Awaited(None, f"job {job_id}'s commit {commit.commit_id} has no manifest to read now (replaced "
                                 f"by {loaded.replaced_by}, whose commit is under way, or its log is unreadable)")
        problem = (f"no file here any more: its next generation {loaded.replaced_by} replaced its files and wrote "
                   "none under the target")
    elif verify_files:
        if loaded.manifest.get("table") and marker is None:
            return Awaited(None, f"{target.url('_SUCCESS')} is withdrawn: a commit into the table is under way")
        gone = _files_gone(target, loaded.view(partition), partition, marker)
        if gone is not None:
            if _rerunning(root, job_id, commit):
                return Awaited(None, f"job {job_id} runs again and is replacing its own files: {gone}")
            problem = f"its manifest lists {gone}: a later commit replaced them (an overwrite, a compaction)"
    if verify_files and problem is not None:
        now = f"; {target.url('_SUCCESS')} now names job {marker['job_id']}" if marker is not None else ""
        raise CommitFilesGone(
            f"job {job_id} committed under {target.url()} (commit id {commit.commit_id}, finished "
            f"{commit.summary['finished']}), but {problem}{now}. They will not come back: wait for the target's "
            f"current commit without job_id, or without verify_files for job {job_id}'s manifest as it committed")
    return Awaited({**loaded.view(partition), "retained_files": None})


def _marker(store: Store, verify_files: bool) -> tuple[dict[str, Any] | None, str]:
    """The marker's manifest, or ``None`` and why: absent (not committed, or withdrawn by a job committing now) or
    changing under every listing, both "not yet"."""
    try:
        return read_success_marker(store, verify_files=verify_files), ""
    except (FileNotFoundError, MarkerChanging) as exc:
        return None, str(exc)


def _from_marker(marker: dict[str, Any]) -> dict[str, Any]:
    return {**marker, "commit_id": marker["job_uuid"], "retained_files": retained_count(marker)}


def _files_gone(target: Store, view: Mapping[str, Any], partition: str,
                current: Mapping[str, Any] | None) -> str | None:
    """How many of the commit's files under *target* are not there with their sizes, with the first of them; or
    ``None`` when all are (the files of other jobs beside them do not count). For a table's commit "there" is
    what the *current* marker lists, a table's too: the files the table's current version references. Its data
    root keeps the files older versions list, which no reader of the table reads any more."""
    if view.get("table") and current is not None and current.get("table"):
        cut = len(current.get("partition") or "")
        sizes = {f["path"][cut + 1 if cut else 0:]: f["size"] for f in [*current["files"],
                                                                         *current.get("retained", [])]}
    else:
        sizes = dict(target.list_files("", visible_only=True))
    cut = len(partition) + 1 if partition else 0
    gone = [(f, sizes.get(f["path"][cut:])) for f in view["files"] if sizes.get(f["path"][cut:]) != f["size"]]
    if not gone:
        return None
    first, now = gone[0]
    has = "no such file" if now is None else f"{now} bytes"
    return (f"{len(gone)} of its {len(view['files'])} file(s) no longer there with their sizes, e.g. "
            f"{first['path']} ({first['size']} bytes; the output has {has})")


def _rerunning(root: Store, job_id: str, commit: Commit) -> bool:
    """Whether a later generation of the job is set up (its job record names another uuid): a re-run, whose commit
    replaces the job's own earlier files."""
    record = JobRecord.read(root, JobLayout(job_id).job_record)
    return record is not None and record.job_uuid != commit.commit_id


__all__ = ["Awaited", "RootFinder", "awaited_manifest"]
