"""This provider's jobs under way on a target, as another job sees them from their records under ``_temporary``.

Whoever writes a marker asks :func:`markers_changing` first: a job commit (none above another job's uncommitted
files: it would vouch for them), a v2 job's abort writing the last commit's root marker back
(:mod:`.lastcommit`), a maintenance job giving back what it withdrew (a deduplication, a compaction's partition
markers): a marker written where another job is publishing would describe the directory without that job's later
files, and stay so where that job writes no marker of its own.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import CorruptRecord
from ..layout import TEMPORARY, JobLayout
from ..stores import Store
from .job import CommitPlan, JobRecord
from .success import marker_dirs_above
from .task import TaskCommitRecord


def job_dirs(store: Store) -> dict[str, JobRecord | None]:
    """Every job directory under ``_temporary`` (not ``_trash`` nor the deduplication plan) and its job record:
    a record means a job of this provider that has not committed."""
    return {name: JobRecord.read(store, JobLayout(name).job_record)
            for name in store.list_dir(TEMPORARY) if not name.startswith("_")}


class Changing(NamedTuple):
    """Where this provider's other jobs that have not committed change markers (:func:`markers_changing`)."""

    #: the directories a job commit under way withdrew (its plan names them): it writes their markers last
    dirs: set[str]
    #: why some job may change markers anywhere (no partition marker may be given back), else ``None``
    everywhere: str | None
    #: why files another job has not committed are visible now, else ``None``: no marker above them may be
    #: written (it would vouch for them)
    uncommitted: str | None
    #: the directories above those files, the root included (empty when there are none)
    uncommitted_dirs: set[str]
    #: job -> generation (job uuid) of each job commit under way (a plan is fixed)
    committing: dict[str, str]


def markers_changing(store: Store, *, besides: str | None = None) -> Changing:
    """Where this provider's jobs that have not committed (but job *besides*, the caller's own) change markers.
    A v2 job whose files are visible uncommitted (:func:`uncommitted_files`) changes them anywhere at any moment
    (its task commits withdraw markers and publish); so does, as far as anyone can tell, a job whose record or
    commit plan cannot be read. The caller has already changed the target when it asks: another job's damaged
    record must not stop it half way, only keep it from writing markers back."""
    dirs: set[str] = set()
    everywhere = uncommitted = None
    shown: set[str] = set()
    committing: dict[str, str] = {}
    visible: list[set[str]] = []   # listed once, when a v2 job first needs it
    for name in store.list_dir(TEMPORARY):
        if name.startswith("_") or name == besides:
            continue
        layout = JobLayout(name)
        try:
            job = JobRecord.read(store, layout.job_record)
            commit = None if job is None else CommitPlan.read(store, layout.plan(job.job_uuid))
            if job is not None and commit is None and job.algorithm == 2:
                if not visible:
                    visible.append(set(store.visible_names()))
                files = uncommitted_files(store, layout, job, visible[0])
                if files and uncommitted is None:
                    uncommitted = (f"job {name} (v2) has not committed, and files of its task commits are visible: "
                                   "its job commit writes the markers (its abort writes the last commit's root "
                                   "marker back)")
                shown |= files
        except CorruptRecord as exc:
            everywhere = everywhere or f"the records of job {name} cannot be read ({exc}): where it changes " \
                                       "markers is unknown"
            continue
        if commit is not None and job is not None:
            dirs.update(commit.withdraw)
            committing[name] = job.job_uuid
    return Changing(dirs, everywhere or uncommitted, uncommitted, marker_dirs_above(shown) if shown else set(),
                    committing)


def uncommitted_files(store: Store, layout: JobLayout, job: JobRecord, visible: set[str]) -> set[str]:
    """The files of v2 job *job* (uncommitted) among the *visible* ones: those its task commit records list, and
    those named with its generation (a teardown that died between a record and its files leaves some without a
    record). A v2 job with none (set up, or its teardown withdrew them) changes no directory until its next task
    commit, which withdraws the markers above its files before they appear."""
    files = {p for p in visible if job.job_uuid in p.rsplit("/", 1)[-1]}
    for app in store.list_dir(layout.job_dir):
        if app.isdigit():
            for name in store.list_dir(layout.commits_dir(int(app))):
                if name.startswith("task_") and name.endswith(".json"):
                    rec = TaskCommitRecord.read(store, f"{layout.commits_dir(int(app))}/{name}")
                    if rec is not None and rec.job_uuid == job.job_uuid:
                        files |= {f.path for f in rec.files if f.path in visible}
    return files


__all__ = ["Changing", "job_dirs", "markers_changing", "uncommitted_files"]
