"""One task attempt from start to commit, as a Hadoop task runs it: recover, set up, write, commit or abort.

This is the loop every worker (an Airflow write task, a test worker process, the demo) runs, kept in one place so
that they all follow the protocol the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .committer import FileOutputCommitter
from .errors import CommitDenied, JobAlreadyCommitted
from .tasks.writer import TaskAttemptWriter
from .timing import timed


@dataclass
class TaskOutcome:
    """What happened to one task attempt.

    ``status`` is ``committed`` (this attempt won), ``already_committed`` (an earlier attempt of this application
    attempt had committed: nothing was run), ``recovered`` (committed in an earlier application attempt and
    adopted: nothing was run) or ``denied`` (this attempt lost to another attempt, whose record is returned).
    """

    status: str
    task: int
    attempt: int
    record: dict[str, Any]
    ran_callable: bool

    @property
    def files(self) -> int:
        return len(self.record["files"])

    @property
    def rows(self) -> int:
        return sum(f.get("rows") or 0 for f in self.record["files"])

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "task": self.task, "attempt": self.attempt,
                "committed_attempt": self.record["attempt"], "app_attempt": self.record["app_attempt"],
                "recovered_from_app": self.record.get("recovered_from_app"), "ran_callable": self.ran_callable,
                "files": self.files, "rows": self.rows, "bytes": sum(f["size"] for f in self.record["files"])}


def run_task_attempt(committer: FileOutputCommitter, task: int, attempt: int,
                     produce: Callable[[TaskAttemptWriter], Any], *, compression: str = "snappy",
                     max_rows_per_file: int | None = None, inputs: str | None = None) -> TaskOutcome:
    """Run attempt *attempt* of task *task*: *produce* is called only when the task is not committed yet -- for
    *inputs* (an opaque digest of what the task is given, recorded by its commit; ``None``: any), see
    :meth:`~.committer.FileOutputCommitter.recover_task`.

    *produce* receives a :class:`TaskAttemptWriter` (``write`` pyarrow data or ``open_file``). On any exception the
    attempt is aborted (marked failed, files removed) and the exception propagates. A denied attempt whose task was
    committed by another attempt returns that attempt's record; one denied because it was itself recorded as failed
    raises :class:`CommitDenied`.
    """
    try:
        existing, ta = committer.recover_or_setup_task(task, attempt, inputs=inputs)
    except JobAlreadyCommitted:
        # A late (zombie) or repeated try after the job committed: the task is done; report what was committed.
        return TaskOutcome("already_committed", task, attempt, committer.committed_task_record(task),
                           ran_callable=False)
    if existing is not None:
        status = "already_committed" if existing.get("recovered_from_app") is None else "recovered"
        return TaskOutcome(status, task, attempt, existing, ran_callable=False)
    assert ta is not None
    writer = TaskAttemptWriter(committer, ta, partition_by=committer.partition_by,
                               compression=compression, max_rows_per_file=max_rows_per_file)
    try:
        with timed(committer.store, f"job {committer.job_id} task {task} attempt {attempt}", "write") as t, writer:
            produce(writer)
            t.counts = {"files": len(writer.rows), "rows": sum(n or 0 for n in writer.rows.values())}
        record = committer.commit_task(ta, writer.rows, sizes=writer.sizes, schema=writer.schema,
                                       stats=writer.stats)
    except JobAlreadyCommitted:
        # set up before the job committed, asking after it (a zombie woken late): what it wrote goes, and it is
        # told what was committed, as a try that starts after the commit is
        committer.attempts.leave_committed_job(ta)
        return TaskOutcome("already_committed", task, attempt, committer.committed_task_record(task),
                           ran_callable=True)
    except CommitDenied as denied:
        if denied.winner is None:
            raise
        return TaskOutcome("denied", task, attempt, denied.winner, ran_callable=True)
    except BaseException:
        committer.abort_task(ta)
        raise
    return TaskOutcome("committed", task, attempt, record, ran_callable=True)
