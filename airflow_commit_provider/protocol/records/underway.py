"""This provider's jobs under way on a target, as another job sees them from their records under ``_temporary``.

A maintenance job that withdrew markers asks :func:`markers_changing` before it writes one back (a deduplication,
a compaction giving back its partition markers): a marker written where another job is publishing would describe
the directory without that job's later files, and stay so where that job writes no marker of its own.
"""

from __future__ import annotations

from ..errors import CorruptRecord
from ..layout import TEMPORARY, JobLayout
from ..stores import Store
from .job import CommitPlan, JobRecord


def job_dirs(store: Store) -> dict[str, JobRecord | None]:
    """Every job directory under ``_temporary`` (not ``_trash`` nor the deduplication plan) and its job record:
    a record means a job of this provider that has not committed."""
    return {name: JobRecord.read(store, JobLayout(name).job_record)
            for name in store.list_dir(TEMPORARY) if not name.startswith("_")}


def markers_changing(store: Store, *, besides: str | None = None) -> tuple[set[str], str | None]:
    """Where this provider's jobs that have not committed (but job *besides*, the caller's own) change markers:
    the directories a job commit under way withdrew (its plan names them), and whether some job may change them
    everywhere: why, else ``None``. So may a v2 job in its write stage (its task commits withdraw markers and
    publish at any moment), and a job whose record or commit plan cannot be read (where it changes markers is
    unknown). The caller has already changed the target when it asks: another job's damaged record must not stop
    it half way, only keep it from writing markers back."""
    dirs: set[str] = set()
    everywhere = None
    for name in store.list_dir(TEMPORARY):
        if name.startswith("_") or name == besides:
            continue
        layout = JobLayout(name)
        try:
            job = JobRecord.read(store, layout.job_record)
            commit = None if job is None else CommitPlan.read(store, layout.plan(job.job_uuid))
        except CorruptRecord as exc:
            everywhere = f"the records of job {name} cannot be read ({exc}): where it changes markers is unknown"
            continue
        if commit is not None:
            dirs.update(commit.withdraw)
        elif job is not None and job.algorithm == 2 and everywhere is None:
            everywhere = (f"job {name} (v2) has not committed: its task commits change directories at any moment, "
                          "its job commit writes the markers")
    return dirs, everywhere


__all__ = ["job_dirs", "markers_changing"]
