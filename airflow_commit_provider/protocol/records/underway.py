"""This provider's jobs under way on a target, as another job sees them from their records under ``_temporary``.

A maintenance job that withdrew markers asks :func:`markers_changing` before it writes one back (a deduplication,
a compaction giving back its partition markers): a marker written where another job is publishing would describe
the directory without that job's later files, and stay so where that job writes no marker of its own.
"""

from __future__ import annotations

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
    the directories a job commit under way withdrew (its plan names them), and, while a v2 job is in its write
    stage (its task commits withdraw markers and publish at any moment), everywhere (the job's name, else
    ``None``)."""
    dirs: set[str] = set()
    v2 = None
    for name, job in job_dirs(store).items():
        if job is None or name == besides:
            continue
        commit = CommitPlan.read(store, JobLayout(name).plan(job.job_uuid))
        if commit is not None:
            dirs.update(commit.withdraw)
        elif job.algorithm == 2:
            v2 = name
    return dirs, v2


__all__ = ["job_dirs", "markers_changing"]
