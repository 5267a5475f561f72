"""The target's last commit, as its commit logs tell, and its root ``_SUCCESS`` written back from it.

A v2 job's task commits withdraw the markers above the files they publish, and its abort takes those files away
again: the directory is then what the last commit left, but nothing wrote that commit's marker back, and readers
gated on ``_SUCCESS`` waited for the next commit of any job (found from outside: ``verify`` said that no job had
committed there, ``inspect`` that one had). A job commit that holds its markers back while such a job writes
(:class:`~..jobcommit.stages.WriteMarkers`) leaves the same gap when that job aborts. The abort writes the marker
back (:func:`write_back_root_marker`): the newest commit log's manifest, with ``retained`` listed now, unless
another job of this provider may still change the directory (:func:`~.underway.markers_changing`; its own commit
or abort writes it then). Partition markers are not written back: the next commit of the partition writes its own.
"""

from __future__ import annotations

import logging

from .. import records
from ..errors import CorruptRecord
from ..layout import COMMITS, SUCCESS, JobLayout, is_job_id
from ..stores import Store
from .job import CommitLog
from .success import SuccessManifest, write_markers
from .underway import markers_changing

log = logging.getLogger(__name__)


def last_commit(store: Store) -> tuple[str, CommitLog] | None:
    """The commit log (its path, and the log) of the job that committed last on the target, by the time its
    commit finished; ``None`` when no job of this provider ever committed there. :class:`CorruptRecord` when one
    cannot be read (which is last is then unknown)."""
    found = []
    for name in store.list_dir(COMMITS):
        if name.endswith(".json") and is_job_id(name[:-5]):
            entry = CommitLog.read(store, f"{COMMITS}/{name}")
            if entry is not None:
                found.append((f"{COMMITS}/{name}", entry))
    return max(found, key=lambda item: item[1].manifest["finished"], default=None)


def write_back_root_marker(store: Store, besides: str, why: str) -> bool:
    """Write the root ``_SUCCESS`` of the target's last commit when there is none, and no job but *besides* (the
    caller's, which has just taken its files away) may change the directory; *why* goes into its diagnostics
    (``marker_written_back``). Whether it was written.

    Left to another job when one will write it: a job commit under way that has not written its commit log yet
    (its markers stage comes after; one that has may have held its markers back, and writes none again). Left
    withdrawn when nobody can tell which commit is last (a commit log that cannot be read: said in the log, the
    abort goes on), and for a table's commit (its marker lists what the table's version references, which only
    a commit of the table can say)."""
    if store.exists(SUCCESS):
        return False
    changing = markers_changing(store, besides=besides)
    if changing.uncommitted is not None:
        return False
    try:
        for job_id, job_uuid in changing.committing.items():
            logged = CommitLog.read(store, JobLayout(job_id).commit_log)
            if logged is None or logged.job_uuid != job_uuid:
                return False   # its markers stage is still to come
        last = last_commit(store)
    except CorruptRecord as exc:
        log.warning("%s: the root _SUCCESS stays withdrawn: %s", store.url(), exc)
        return False
    if last is None or last[1].manifest.get("table"):
        return False
    rel, commit_log = last
    doc = {**commit_log.manifest, "format": f"{records.FORMAT}/success", "version": records.VERSION}
    manifest = SuccessManifest.validate(doc, store.url(rel))
    write_markers(store, manifest.with_costs(manifest.durations, marker_written_back=why))
    return True


__all__ = ["last_commit", "write_back_root_marker"]
