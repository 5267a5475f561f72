"""The existing files a job replaces (a compaction's inputs): recorded as the job read them, checked at its commit.

A compaction merges files other jobs wrote and deletes them at its job commit. If one of them is gone or is
another file by the time of the commit (a dynamic or overwrite job replaced its partition, a rewrite under the
same name), deleting "the inputs" and publishing the merge would bring back rows that job replaced, or delete
rows the merge never read. So the job record holds every input with its size and version
(:meth:`.Store.file_versions`), and job commit (:class:`~.jobcommit.FixPlan`) refuses before anything visible
changes when one of them differs. Between compactions, the claims of :mod:`.claims` make the deletion exclusive;
this check is what catches every other job.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputsChanged
from .job import InputFile, JobRecord
from ..stores import Store


def record_inputs(store: Store, paths: Sequence[str], job_id: str) -> tuple[InputFile, ...]:
    """*paths* with their size and version now; :class:`InputsChanged` naming those that do not exist."""
    found = store.file_versions(paths)
    missing = [p for p in paths if p not in found]
    if missing:
        raise InputsChanged(f"job {job_id}: {len(missing)} of the {len(paths)} file(s) it is to replace are not in "
                            f"{store.url()}: {_shown(missing)}; nothing was set up", missing)
    return tuple(InputFile(p, *found[p]) for p in paths)


def changed_inputs(store: Store, inputs: Sequence[InputFile]) -> dict[str, str]:
    """Each input that is gone or differs from its record, with what happened to it."""
    now = store.file_versions([f.path for f in inputs])
    out = {}
    for f in inputs:
        if f.path not in now:
            out[f.path] = "gone"
        elif now[f.path][0] != f.size:
            out[f.path] = f"{now[f.path][0]} bytes, planned with {f.size}"
        elif f.version and now[f.path][1] != f.version:
            out[f.path] = "replaced by another file of the same name"
    return out


def check_unchanged(store: Store, job: JobRecord) -> None:
    """:class:`InputsChanged` naming the inputs of *job* that another job deleted or rewrote since it was set up."""
    changed = changed_inputs(store, job.replace_inputs)
    if changed:
        shown = _shown([f"{p} ({why})" for p, why in sorted(changed.items())])
        raise InputsChanged(
            f"job {job.job_id} cannot commit: {len(changed)} of the {len(job.replace_inputs)} file(s) it replaces "
            f"changed since it was planned: {shown}. Another job deleted or rewrote them, so its merged files "
            "no longer hold their rows; nothing was changed", sorted(changed))


def _shown(items: Sequence[str]) -> str:
    return ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
