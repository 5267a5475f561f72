"""Which generation of its job a run's stage shows in the Commit status view.

Two DAG runs whose stage renders one ``job_key`` share one job: each run after a committed one is a new
generation of that job, whose commit replaces the last one's files. The storage answers for the job's current
generation only, so the first run's tab, opened after the second run set up its generation, would show the second
run's tasks, files and totals as the first run's. The generation a run set up is in its setup task's context
(``job_uuid``); when the job has moved on since, the view shows that generation as the job's commit log keeps it
(its totals, when it finished) and names the run that replaced it, and no task or file of the newer one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..protocol.records.job import CommitLog

#: what the view keeps of the job's current state for a replaced generation: the job, and where and how it commits
#: (not its labels: they name the run of the current generation)
_KEPT = ("job_id", "committer", "algorithm", "mode", "output")


def run_generation(job: Mapping[str, Any], setup_job_uuid: str | None, setup_generation: int | None,
                   commit_log: Callable[[], CommitLog | None]) -> dict[str, Any]:
    """*job* (``committer.status()``) as the run whose setup opened generation *setup_job_uuid* sees it: *job*
    itself while that generation is the job's current one (or the setup context does not say: an earlier
    release); else that generation as *commit_log* (read only then) keeps it, ``committed`` with its totals and
    ``replaced_by`` naming the run and generation that replaced it (``replacing_state``: that generation's state;
    until it commits the target still holds this one's files), or ``purged`` when no record of it is left.

    The run's setup context names the job, so the setup ran: a job of which the storage keeps no record was
    purged since (the teardown's ``purge_on_failure``, ``airflow-commit abort --purge`` or ``gc --apply``), never
    one whose setup is still to come."""
    if job.get("state") == "absent":
        return {**job, "state": "purged", "job_uuid": setup_job_uuid, "generation": setup_generation}
    current = job.get("job_uuid")
    if not setup_job_uuid or current is None or current == setup_job_uuid:
        return dict(job)
    run_id = (job.get("labels") or {}).get("run_id")
    newer = f"generation {job.get('generation')}"
    doc = {**{k: job.get(k) for k in _KEPT}, "job_uuid": setup_job_uuid, "generation": setup_generation,
           "replaced_by": f"run {run_id} ({newer})" if run_id else newer, "replacing_state": job.get("state")}
    log = commit_log()
    kept = [log.summary(), *log.history] if log is not None else []
    own = next((s for s in kept if s.get("job_uuid") == setup_job_uuid), None)
    if own is None:
        return {**doc, "state": "purged"}
    return {**doc, "state": "committed", "app_attempt": own.get("app_attempt"), "finished": own.get("finished"),
            "totals": own.get("totals")}
