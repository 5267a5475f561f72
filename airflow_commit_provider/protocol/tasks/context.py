"""One task attempt's identity and the names its files take: what every part of the task side shares."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskAttemptContext:
    """One task attempt: Hadoop's TaskAttemptID with its work directory (relative to the output root)."""

    job_id: str
    job_uuid: str
    app_attempt: int
    task: int
    attempt: int
    work_dir: str
    #: what the attempt was given (an opaque digest, :meth:`.TaskCommitRecord.same_inputs`): its commit records it
    inputs: str | None = None

    @property
    def name(self) -> str:
        return self.work_dir.rsplit("/", 1)[-1]

    @property
    def file_prefix(self) -> str:
        """How the default (Spark-style) names of this task's files begin (:func:`file_prefix`)."""
        return file_prefix(self.task, self.job_uuid)


def file_prefix(task: int, job_uuid: str) -> str:
    """How the default (Spark-style) names of a task's files begin, ``part-<task:05d>-<job uuid>-``: every try of
    the task in generation *job_uuid* writes the same names, and no other task or generation writes them."""
    return f"part-{task:05d}-{job_uuid}-"
