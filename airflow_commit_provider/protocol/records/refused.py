"""Task commits a job commit refused for good: what ``_temporary/<job>/_refused_<job uuid>.json`` holds.

Recovery (Hadoop's recoverTask) adopts an earlier application attempt's commit of a task without running its code
again (I5). That is right while the commit would accept the task's files, and wrong once a job commit refused them
for a reason no retry cures (a schema the table does not have): recovered into every later application attempt,
the same files are refused the same way on every clear, and the code that would write acceptable files never
runs. So the refusing commit records here, per task, the commit it refused (the application attempt it committed
in, and its attempt), and recovery (:meth:`~..tasks.attempts.TaskAttempts.recover`) adopts no commit named here:
the task runs again in the next application attempt (a clear of the run with its setup), with the code of then.

Records of task commits are never rewritten, so the refusal is a record of its own; it names the generation, and
goes with the job directory at the generation's commit or purge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .. import records
from ..errors import CorruptRecord
from ..stores import Store
from .task import TaskCommitRecord

KIND = "refused-tasks"


@dataclass(frozen=True)
class RefusedTasks:
    """The task commits of generation *job_uuid* that a job commit refused: task -> ``(app, attempt, reason)``,
    *app* being the application attempt the task committed in (:attr:`~.task.TaskCommitRecord.committed_in_app`),
    so every adoption of that commit is refused with it."""

    job_uuid: str
    tasks: Mapping[int, tuple[int, int, str]]

    def refuses(self, rec: TaskCommitRecord) -> bool:
        """Whether *rec* (a task's record, its own commit or an adoption of one) is a commit refused here."""
        got = self.tasks.get(rec.task)
        return got is not None and rec.job_uuid == self.job_uuid and got[:2] == (rec.committed_in_app, rec.attempt)

    def reason(self, task: int) -> str:
        return self.tasks[task][2] if task in self.tasks else ""

    @classmethod
    def read(cls, store: Store, rel: str, job_uuid: str) -> RefusedTasks:
        """The refusals of generation *job_uuid* at *rel* (none when there is no record, or it is another
        generation's: a zombie's)."""
        doc = records.read(store, rel, KIND)
        if doc is None or doc.get("job_uuid") != job_uuid:
            return cls(job_uuid, {})
        where = store.url(rel)
        tasks = records.get_field(doc, "tasks", dict, where, KIND)
        out = {}
        for key, entry in tasks.items():
            if not isinstance(entry, dict) or not key.isdigit():
                raise CorruptRecord(f"{where}: field tasks.{key} is not a task's refused commit; the record is corrupt")
            app = records.get_field(entry, "app", int, where, KIND, f"tasks.{key}.")
            attempt = records.get_field(entry, "attempt", int, where, KIND, f"tasks.{key}.")
            out[int(key)] = (app, attempt, records.get_field(entry, "reason", str, where, KIND, f"tasks.{key}."))
        return cls(job_uuid, out)

    @classmethod
    def add(cls, store: Store, rel: str, refused: Iterable[TaskCommitRecord], reason: str) -> RefusedTasks:
        """Record the commits *refused* (of one generation) with *reason*, beside those refused before."""
        recs = list(refused)
        if not recs:
            raise ValueError("no refused task commit to record")
        known = cls.read(store, rel, recs[0].job_uuid)
        tasks = {**known.tasks, **{r.task: (r.committed_in_app, r.attempt, reason) for r in recs}}
        body = {"job_uuid": known.job_uuid, "at": records.now_iso(),
                "tasks": {str(t): {"app": a, "attempt": n, "reason": why} for t, (a, n, why) in sorted(tasks.items())}}
        store.write_bytes(rel, records.dumps(KIND, body))
        return cls(known.job_uuid, tasks)


def describe_tasks(recs: Sequence[TaskCommitRecord]) -> str:
    """``task 3`` or ``tasks 0, 1, 2`` (the first 20), each with where it committed when it was recovered."""
    shown = ", ".join(str(r.task) + (f" (recovered from application attempt {r.committed_in_app})"
                                     if r.adopted else "") for r in recs[:20])
    return f"task{'s' if len(recs) > 1 else ''} {shown}{' ...' if len(recs) > 20 else ''}"


def refused_note(recs: Sequence[TaskCommitRecord], then: str) -> str:
    """What a job commit that recorded the commits *recs* as refused (:meth:`~..job.Job.refuse_tasks`) says
    about the way on: which clear runs them again, *then* what to change first."""
    return (f"The files of {describe_tasks(recs)} are recorded as refused: {'they are' if len(recs) > 1 else 'it is'} "
            "re-run, not recovered, on the next clear of the DAG run with the stage's setup (a new application "
            f"attempt; 'clear only failed tasks' re-runs this commit alone, which fails the same way), {then}")


__all__ = ["RefusedTasks", "describe_tasks", "refused_note"]
