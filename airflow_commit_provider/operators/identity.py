"""What names a stage's job, and the job id derived from it: the one home of both, used by every way of building a
stage (the operators, ``commit_stage``, ``@task.commit_stage``, the shards of a write) and by the compaction.

A job is named by its DAG id, its job key (the run id by default) and its job name (the stage's task group id by
default). Distinct namings must never share a job id: two jobs that did would share one job record, and the second
run's commit would be taken for the next generation of the first's job, replacing the first's rows in ``append``
mode without an error. So the id is an injective function of the three parts (:func:`make_job_id`), and the job
record keeps the parts themselves (:func:`job_names`, passed as ``CommitConfig(names=...)``), so that a collision
the id cannot rule out (two digests that agree) is refused at set-up instead of obeyed.
"""

from __future__ import annotations

import hashlib
import json
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: what joins the parts in the readable form of a job id
_SEP = "__"
#: how much of the readable form a job id keeps before its digest (job ids are at most 200 characters)
_READABLE = 180


def job_names(dag_id: str, job_key: str, job_name: str) -> dict[str, str]:
    """The parts that name a job, as its job record keeps them (``CommitConfig(names=...)``): a later set-up of the
    same job id named by other parts is refused, naming both."""
    return {"dag_id": dag_id, "job_key": job_key, "job_name": job_name}


def make_job_id(dag_id: str, job_key: str, job_name: str) -> str:
    """A directory-safe job id, stable for one stage of one DAG run (*job_key* = the run id) or of whatever
    *job_key* names (a data interval: every run of it is the same job), and distinct for distinct parts.

    The readable form is ``<dag_id>__<job_key>__<job_name>``. It is the id itself when it is directory-safe and
    reads back as these three parts only: the DAG id and the job name hold no ``__``, the DAG id does not end and
    the job name does not start with ``_`` (the key may hold anything), and it holds no ``..`` (refused in a
    directory name). Otherwise the id is the readable form made safe (unsafe characters become ``_``), cut to
    180 characters, plus a digest of what tells the parts apart: of the readable form when it reads back as
    these parts only (so run ids with ``:`` and ``+`` keep the ids earlier releases gave them, and jobs in flight
    at an upgrade keep theirs), else of the JSON list of the parts (``a__b``/``c`` and ``a``/``b__c`` read the
    same, but their lists differ).
    """
    readable = f"{dag_id}{_SEP}{job_key}{_SEP}{job_name}"
    reads_back = _SEP not in dag_id and _SEP not in job_name and not dag_id.endswith("_") \
        and not job_name.startswith("_")
    if reads_back:
        if _UNSAFE.search(readable) is None and readable.strip("._-") == readable and ".." not in readable \
                and len(readable) <= _READABLE:
            return readable
        told_apart = readable
    else:
        told_apart = json.dumps([dag_id, job_key, job_name])
    digest = hashlib.sha1(told_apart.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()[:10]
    safe = _UNSAFE.sub("_", readable).strip("._-") or "job"
    return f"{safe[:_READABLE]}-{digest}".replace("..", "_")


__all__ = ["job_names", "make_job_id"]
