"""A target's commit history, read from its jobs' commit logs: what an event watcher emits.

A ``_SUCCESS`` says which job committed last; two commits between two reads of it (a backfill, two stages sharing
a target) leave one marker, and a watcher that compares markers loses the first. The commit logs keep every
commit: ``_commits/<job>.json`` holds its job's current generation's manifest and a summary of each earlier
generation (a re-run after a commit, a new uuid), oldest first. So events are derived from the logs (DESIGN
section 10): every commit is seen once, in order, whatever the polling interval.

- a **commit** is one generation of one job, known by its job uuid (:attr:`Commit.commit_id`);
- it counts once its commit is finished: an earlier generation always is; the current one when the job record no
  longer names it (job commit's cleanup comes after the markers) or the root's ``_SUCCESS`` does (a commit that died
  in its cleanup). A commit log is written before the markers, so the log alone is not "committed" yet;
- commits are ordered by commit end time (``finished``), ties by commit id;
- a :class:`Cursor` says what a reader has emitted: per job, the last generation. A job's generations are ordered
  (one runs only after the previous committed), so that is exact whatever the clocks of concurrent jobs say, and it
  grows by one entry per job, not per commit. A log that vanished takes its entry along, so a job whose log was
  deleted and which commits again from generation 0 is new.

A generation its job's next one replaced before it was read has only its summary left (its files were replaced by
the next generation's, as a re-run replaces its own output): :attr:`Commit.replaced_by` names the replacing one,
and there is no manifest to load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import records
from .errors import CorruptRecord
from .layout import COMMITS, SUCCESS, JobLayout
from .paths import is_hidden
from .records.job import CommitLog, JobRecord
from .records.success import partition_totals
from .stores import Store


def commit_log_jobs(names: Iterable[str]) -> list[str]:
    """The job ids whose commit logs a listing of ``_commits`` names: job ids start with a letter or digit, so the
    other names there (the error-mode claim, a local store's hidden temporary files) are no commit log."""
    return sorted(name[:-5] for name in names if name.endswith(".json") and not is_hidden(name))


@dataclass(frozen=True)
class Commit:
    """One committed generation of one job."""

    job_id: str
    #: what the commit log's history keeps of it: job uuid, generation, application attempt, finished, totals
    #: (and, from this release on, partitions)
    summary: Mapping[str, Any]
    #: the whole manifest, once :meth:`HistoryReader.loaded` read it (only a job's current generation has one)
    manifest: Mapping[str, Any] | None = None
    #: the job uuid of the generation that replaced this one (its files with it): its manifest is gone
    replaced_by: str | None = None

    @property
    def commit_id(self) -> str:
        """Unique per commit, also across a deleted and re-created log (unlike job id and generation)."""
        return self.summary["job_uuid"]

    @property
    def order(self) -> tuple[str, str]:
        return (self.summary["finished"], self.commit_id)

    def touches(self, partition: str) -> bool:
        """Whether the commit wrote files under *partition* (``""``: the root, every commit). A summary written
        before summaries named partitions cannot tell: such a commit counts (an extra event, never a lost one)."""
        if not partition:
            return True
        parts = (self.manifest or self.summary).get("partitions")
        return parts is None or any(p == partition or p.startswith(partition + "/") for p in parts)

    def view(self, partition: str = "") -> dict[str, Any]:
        """The commit as a reader of *partition* sees it: the manifest (or, without one, the summary with an empty
        file list, ``files_truncated``, and ``replaced_by``) with ``commit_id``; under a partition only its files
        and their totals, as the partition's ``_SUCCESS`` lists them (a summary's totals are the whole commit's:
        it does not split them by partition)."""
        if self.manifest is None:
            out: dict[str, Any] = {"job_id": self.job_id, **self.summary, "files": [],
                                   "files_truncated": bool((self.summary.get("totals") or {}).get("files")),
                                   "replaced_by": self.replaced_by}
        else:
            out = dict(self.manifest)
            if partition:
                files = [f for f in out["files"] if f["path"].startswith(partition + "/")]
                out.update(files=files, totals=partition_totals(files))
        if partition:
            out.update(partition=partition, partitions=[p for p in out.get("partitions") or []
                                                        if p == partition or p.startswith(partition + "/")])
        return {**out, "commit_id": self.commit_id}


@dataclass(frozen=True)
class Cursor:
    """What a reader has emitted: per job id, the commit id of the last generation emitted."""

    seen: Mapping[str, str] = field(default_factory=dict)

    def after(self, commit: Commit) -> Cursor:
        return Cursor({**self.seen, commit.job_id: commit.commit_id})

    def to_doc(self) -> dict[str, Any]:
        return {"seen": dict(self.seen)}

    @classmethod
    def from_doc(cls, doc: Any, where: str) -> Cursor:
        """The cursor :meth:`to_doc` wrote; :class:`CorruptRecord` naming *where* when *doc* is not one."""
        seen = doc.get("seen") if isinstance(doc, dict) else None
        if not isinstance(seen, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in seen.items()):
            raise CorruptRecord(f"{where} is {doc!r}, not a commit cursor ({{'seen': {{job id: commit id}}}})")
        return cls(dict(seen))


@dataclass
class History:
    """The commits of one target as last read: per job, its finished commits oldest first; and the logs that could
    not be read, with why (their jobs keep their cursor entries and are read again next time)."""

    jobs: dict[str, list[Commit]]
    unreadable: dict[str, str]

    def since(self, cursor: Cursor) -> tuple[list[Commit], Cursor]:
        """The commits *cursor* has not seen, in commit order, and *cursor* without the jobs whose log is gone."""
        new: list[Commit] = []
        for job, commits in self.jobs.items():
            ids = [c.commit_id for c in commits]
            last = cursor.seen.get(job)
            new.extend(commits[ids.index(last) + 1:] if last in ids else commits)
        kept = {j: c for j, c in cursor.seen.items() if j in self.jobs or j in self.unreadable}
        return sorted(new, key=lambda c: c.order), Cursor(kept)

    def baseline(self, partition: str = "", upto: str | None = None) -> Cursor:
        """A new watcher's cursor: every commit before the newest one that touches *partition* counts as emitted
        (that newest one fires, as a file already there fires Airflow's own file triggers); with *upto* (a commit
        id this history holds), every commit up to and including that one."""
        commits = sorted((c for cs in self.jobs.values() for c in cs), key=lambda c: c.order)
        marked = [c for c in commits if c.commit_id == upto]
        if marked:
            emitted = [c for c in commits if c.order <= marked[0].order]
        else:
            wanted = [c for c in commits if c.touches(partition)]
            emitted = [c for c in commits if c.order < wanted[-1].order] if wanted else commits
        cursor = Cursor()
        for c in emitted:
            cursor = cursor.after(c)
        return cursor


class HistoryReader:
    """Reads a target's commit logs, each again only when the listing says it changed (an object store's ETag:
    one listing per read, and one GET per changed log; a local disk's listing gives no digest, so its logs are
    read every time, which costs well under a millisecond each there). Whether a generation finished is asked
    until it has. What it keeps of a log is its summaries, never the manifest with its file list: a target with
    thousands of jobs costs a triggerer kilobytes per job, and :meth:`loaded` reads the manifest of a commit to
    emit."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: per job, the listing's digest of its log and the commits read from it then (earlier ones, current one)
        self._cache: dict[str, tuple[str, tuple[list[Commit], Commit]]] = {}
        #: per job, the generation last found finished (finished stays finished: not asked again)
        self._done: dict[str, str] = {}

    def read(self) -> History:
        listing = self.store.list_dir_digests(COMMITS)
        jobs: dict[str, list[Commit]] = {}
        unreadable: dict[str, str] = {}
        marker: list[str | None] = []   # the root marker's job uuid, read at most once, when needed
        for job in commit_log_jobs(listing):
            try:
                entry = self._entry(job, listing[f"{job}.json"])
                if entry is not None:
                    earlier, current = entry
                    jobs[job] = earlier + ([current] if self._is_done(job, current.commit_id, marker) else [])
            except CorruptRecord as exc:
                unreadable[job] = str(exc)
        return History(jobs, unreadable)

    def loaded(self, commit: Commit) -> Commit:
        """*commit* with its manifest, read now, while it is its job's current generation; replaced meanwhile (or
        its log unreadable), the summary it has, with what replaced it."""
        if commit.manifest is not None or commit.replaced_by is not None:
            return commit
        try:
            log = CommitLog.read(self.store, JobLayout(commit.job_id).commit_log)
        except CorruptRecord:
            return commit
        if log is None:
            return commit
        if log.job_uuid == commit.commit_id:
            return replace(commit, manifest=log.manifest)
        ids = [h.get("job_uuid") for h in log.history] + [log.job_uuid]
        return replace(commit, replaced_by=ids[ids.index(commit.commit_id) + 1] if commit.commit_id in ids else None)

    def _entry(self, job: str, digest: str | None) -> tuple[list[Commit], Commit] | None:
        cached = self._cache.get(job)
        if digest is not None and cached is not None and cached[0] == digest:
            return cached[1]
        log = CommitLog.read(self.store, f"{COMMITS}/{job}.json")
        if log is None:
            return None
        where = self.store.url(JobLayout(job).commit_log)
        summaries = [_summary(h, where) for h in log.history]
        ids = [s["job_uuid"] for s in summaries] + [log.job_uuid]
        entry = ([Commit(job, s, None, ids[i + 1]) for i, s in enumerate(summaries)], Commit(job, log.summary()))
        if digest is not None:
            self._cache[job] = (digest, entry)
        return entry

    def _is_done(self, job: str, job_uuid: str, marker: list[str | None]) -> bool:
        if self._done.get(job) != job_uuid and self._finished(job, job_uuid, marker):
            self._done[job] = job_uuid
        return self._done.get(job) == job_uuid

    def _finished(self, job: str, job_uuid: str, marker: list[str | None]) -> bool:
        """Whether the generation *job_uuid*, its job's current one, finished its commit: its job record is gone or
        names a later generation, or the root's ``_SUCCESS`` names it (a commit that died in its cleanup)."""
        try:
            record = JobRecord.read(self.store, JobLayout(job).job_record)
        except CorruptRecord:
            return False   # not readable now: asked again at the next read
        if record is None or record.job_uuid != job_uuid:
            return True
        if not marker:
            try:
                doc = records.read(self.store, SUCCESS, "success")
            except CorruptRecord:
                doc = None
            marker.append(doc.get("job_uuid") if isinstance(doc, dict) else None)
        return marker[0] == job_uuid


def _summary(doc: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """A history entry of a commit log, checked for what the history reader uses."""
    for key, typ in (("job_uuid", str), ("generation", int), ("finished", str)):
        records.get_field(doc, key, typ, where, CommitLog.KIND, "history[].")
    return doc


__all__ = ["Commit", "Cursor", "History", "HistoryReader", "commit_log_jobs"]
