"""The job as the storage tells it: the read model the commit-status view, the sensor and the CLI use.

Reads only, safe at any moment, from any process: nothing of a job lives in memory or in Airflow's XCom.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import records
from .job import Job
from .layout import SUCCESS, attempt_names
from .ledger import COMMITTING, FAILED
from .records.job import JobRecord


class JobStatus:
    """Reads one job's records: state, tasks, attempts."""

    def __init__(self, job: Job) -> None:
        self.job = job

    def status(self) -> dict[str, Any]:
        """``absent``, ``running``, ``failed`` (aborted, committed tasks kept), ``committing`` or ``committed``,
        with per-task attempts."""
        scope = self.job
        job = scope.job_record()
        if job is None:
            log = scope.commit_log()
            if log is None:
                return {"job_id": scope.job_id, "state": "absent", "output": scope.store.url()}
            doc = {k: v for k, v in log.to_doc().items() if k not in ("format", "version")}
            success = records.read(scope.store, SUCCESS, "success")
            if success is not None and success.get("job_uuid") == log.job_uuid:
                doc.update(durations=success["durations"], diagnostics=success["diagnostics"])
            return {"state": "committed", **doc}
        names = scope.store.list_dir(scope.layout.job_dir)
        apps = scope.app_attempts(job, names)
        app = apps[0] if apps else job.first_app_attempt
        plan = scope.commit_plan(job)
        tasks: dict[int, dict[str, Any]] = {}
        # a commit a job commit refused for good is not recovered by a clear: the task runs again (records.refused)
        refused = scope.refused_tasks(job, names)
        for a in sorted(apps):
            for rec in scope.app_records(a, job.job_uuid):
                if a == app or rec.task not in tasks:
                    tasks[rec.task] = {"task": rec.task, "attempt": rec.attempt, "app_attempt": a,
                                       "recovered_from_app": rec.recovered_from_app,
                                       "committed_attempt": f"{rec.committed_in_app}.{rec.attempt}",
                                       "files": len(rec.files),
                                       "rows": sum(f.rows or 0 for f in rec.files),
                                       "bytes": sum(f.size for f in rec.files), "current": a == app,
                                       **({"refused": refused.reason(rec.task)} if refused.refuses(rec) else {})}
        for entry in tasks.values():
            entry.update(no_history())
        for t, hist in self.attempt_history(job).items():
            tasks.setdefault(t, {"task": t, "attempt": None, "app_attempt": None, "files": 0, "rows": 0,
                                 "bytes": 0, "current": False}).update(hist)
        aborted = records.read(scope.store, scope.layout.abort_record(app, job.job_uuid), "abort")
        # the DAG run whose setup claimed the current application attempt (``owners.py``): who to wait for, or
        # whose job an abort would end
        owner = scope.app_owner(app, job) if apps else None
        state = "committing" if plan is not None else ("failed" if aborted else "running")
        return {"job_id": scope.job_id, "state": state, "job_uuid": job.job_uuid,
                "generation": job.generation, "app_attempt": app, "committer": scope.publisher.committer_name,
                "algorithm": scope.publisher.algorithm, "mode": scope.mode.name, "output": scope.store.url(),
                "labels": dict(job.labels), "owner": owner.to_dict() if owner else None, "aborted": aborted,
                "tasks": [tasks[t] for t in sorted(tasks)]}

    def attempt_history(self, job: JobRecord, winners: Mapping[tuple[int, int], int] | None = None
                        ) -> dict[int, dict[str, list[str]]]:
        """Per task that has one, the attempts that failed, were denied, or are unfinished (``<app>.<try>``).

        ``failed``: recorded failed (aborted, fenced by a newer try, removed by the teardown); ``denied``: claimed
        its commit and lost to another attempt; ``unfinished``: set up, with no fate yet (running, or killed and
        not yet seen by a newer try). *winners* maps ``(application attempt, task)`` to the committed attempt when
        the caller has the records already (job commit); otherwise every record is read.
        """
        out: dict[int, dict[str, list[str]]] = {}
        apps = self.job.app_attempts(job)
        if winners is None:
            winners = {(a, rec.task): rec.attempt for a in apps for rec in self.job.app_records(a, job.job_uuid)
                       if not rec.adopted}
        for a in apps:
            mine = [(t, at) for (wa, t), at in winners.items() if wa == a]
            won = set(attempt_names([t for t, _ in mine], [at for _, at in mine]))
            for trace in self.job.ledger.traces(a, leave_out=won):
                hist = out.setdefault(trace.task, no_history())
                name = f"{a}.{trace.attempt}"
                if trace.fate == FAILED:
                    hist["failed_attempts"].append(name)
                elif trace.fate == COMMITTING:
                    hist["denied_attempts"].append(name)
                else:
                    hist["unfinished_attempts"].append(name)
        return out


def no_history() -> dict[str, list[str]]:
    """A task's :meth:`JobStatus.attempt_history` entry when no attempt of it failed, was denied or is unfinished."""
    return {"failed_attempts": [], "denied_attempts": [], "unfinished_attempts": []}
