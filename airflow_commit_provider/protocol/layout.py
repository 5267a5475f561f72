"""Where a job's pieces live under the output root: Hadoop's FileOutputCommitter layout, scoped per job.

Every path is a name of :class:`JobLayout`; docs/design.md ("Layout") draws the tree once, and
``tests/protocol/test_structure.py`` checks that drawing against this class.

Hadoop puts ``<app>`` straight under ``_temporary``, so two jobs on one target share and delete each other's
directories (MAPREDUCE-7378); the ``<job>`` level removes that.

Hadoop's v1 task commit renames the attempt directory to ``<app>/task_<task>``; job commit then empties and
deletes one directory per task, and deleting a directory costs as much as ten file renames on ext4. Our task
commit moves the winner's files into the one ``_committed`` directory of the application attempt instead (with
moves that refuse to replace, so two tasks' files never clobber each other), paying for the attempt directory
in the task, in parallel, not in the job commit, which is then one rename per file and no per-task directory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import InvalidOutputSpec

TEMPORARY = "_temporary"
#: where a committed job's directory goes in one rename, to be deleted off the commit's critical path; not a job
#: id (those start with a letter or digit), so no job's directory can ever be there
TRASH = f"{TEMPORARY}/_trash"
#: the plan of a deduplication (:mod:`.dedupplan`), created exclusively before its first change and removed after
#: its last: one deduplication per root at a time, and the next run finishes one that died
DEDUP_PLAN = f"{TEMPORARY}/_dedup.json"
#: the compactions' claims on the files they will delete (:mod:`.claims`), shared by every job on the target; not a
#: job id either
CLAIMS = f"{TEMPORARY}/_claims"
COMMITS = "_commits"
SUCCESS = "_SUCCESS"
#: how the name of an abort record (:meth:`JobLayout.abort_record`) starts
ABORT_RECORD = "_aborted_"

_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,199}$")


def is_job_id(name: object) -> bool:
    """Whether *name* can be a job id: letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit, at
    most 200 characters, no ``..``. The target's own names under ``_temporary`` and ``_commits`` (``_trash``,
    ``_claims``, the error-mode claim) start with ``_``, so they never are."""
    return isinstance(name, str) and bool(_JOB_ID_RE.match(name)) and ".." not in name


def check_job_id(job_id: str) -> str:
    """Job ids become directory and file names (:func:`is_job_id`)."""
    if not is_job_id(job_id):
        raise InvalidOutputSpec(
            f"job id {job_id!r} cannot be used as a directory name: use 1-200 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..'")
    return job_id


def task_name(task: int) -> str:
    return f"task_{task:05d}"


def task_record_name(task: int) -> str:
    """The name of a task's commit record in its application attempt's :meth:`JobLayout.commits_dir`."""
    return task_record_names((task,))[0]


def task_record_names(tasks: Iterable[int]) -> list[str]:
    """:func:`task_record_name` of each of *tasks* (job commit names 10,000 and more at once): :func:`task_name`
    and ``.json``."""
    return [f"{task_name(task)}.json" for task in tasks]


def attempt_name(task: int, attempt: int) -> str:
    """A task attempt's name: its work directory, its claim (:func:`parse_attempt_name` reads it back)."""
    return attempt_names((task,), (attempt,))[0]


def attempt_names(tasks: Iterable[int], attempts: Iterable[int]) -> list[str]:
    """:func:`attempt_name` of each pair of *tasks* and *attempts* (job commit's 10,000 winners at once)."""
    return [f"attempt_{task:05d}_{attempt}" for task, attempt in zip(tasks, attempts)]


def parse_attempt_name(name: str) -> tuple[int, int] | None:
    """``(task, attempt)`` from :func:`attempt_name`'s form, or ``None`` for any other name."""
    parts = name.split("_")
    if len(parts) != 3 or parts[0] != "attempt" or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1]), int(parts[2])


@dataclass(frozen=True)
class JobLayout:
    """Relative paths of one job's records and directories."""

    job_id: str

    @property
    def job_dir(self) -> str:
        return f"{TEMPORARY}/{self.job_id}"

    @property
    def job_record(self) -> str:
        return f"{self.job_dir}/_job.json"

    @property
    def commit_failure(self) -> str:
        """The last failed job commit's summary (:mod:`.jobcommit`): goes with the job's records at cleanup."""
        return f"{self.job_dir}/_commit_failure.json"

    def refused_tasks(self, job_uuid: str) -> str:
        """The task commits a job commit of generation *job_uuid* refused for good (:mod:`.records.refused`):
        recovery adopts none of them."""
        return f"{self.job_dir}/_refused_{job_uuid}.json"

    def job_schema(self, job_uuid: str) -> str:
        """The schema the published task commits of generation *job_uuid* have (v2: :mod:`.schemas`)."""
        return f"{self.job_dir}/_schema_{job_uuid}.json"

    def plan(self, job_uuid: str) -> str:
        """Scoped by generation, so a plan a crash left behind never steers a later generation's commit."""
        return f"{self.job_dir}/_commit_plan_{job_uuid}.json"

    @staticmethod
    def audit_prefix(job_uuid: str) -> str:
        """How the names of generation *job_uuid*'s audit records start (in :attr:`job_dir`)."""
        return f"_audit_{job_uuid}_"

    def audit_record(self, job_uuid: str, app: int, attempt: int) -> str:
        """The result of try *attempt* of the audit of generation *job_uuid* in application attempt *app*
        (:mod:`.audit`): one per try, so a paused try (a zombie) waking late never overwrites a newer one's; the
        job commit takes the newest."""
        return f"{self.job_dir}/{self.audit_prefix(job_uuid)}{app}_{attempt}.json"

    def approval_record(self, job_uuid: str, app: int, attempt: int) -> str:
        """The approval asked for, then given or refused, of the audit record of the same numbers."""
        return f"{self.job_dir}/_approval_{job_uuid}_{app}_{attempt}.json"

    def compaction_plan(self, job_uuid: str) -> str:
        """A compaction's merge groups (:mod:`.compaction`), fixed once per generation."""
        return f"{self.job_dir}/_compaction_{job_uuid}.json"

    @staticmethod
    def input_claim_chain(rel: str) -> str:
        """The chain of claims on visible file *rel* (:mod:`.claims`): shared by every compaction of the target."""
        return f"{CLAIMS}/{rel}"

    @staticmethod
    def input_claim(rel: str, number: int) -> str:
        """Entry *number* of :meth:`input_claim_chain`: who holds *rel* from then on (created exclusively)."""
        return f"{CLAIMS}/{rel}/{number:010d}"

    def trash_entry(self, unique: str) -> str:
        """Where :attr:`job_dir` goes at cleanup: a new name each time, so a deletion of an earlier entry that is
        still under way never meets a later one."""
        return f"{TRASH}/{self.job_id}.{unique}"

    def is_own_trash(self, name: str) -> bool:
        """Whether *name* (a child of :data:`TRASH`) is one of this job's entries."""
        return name.startswith(f"{self.job_id}.")

    @property
    def commit_log(self) -> str:
        return f"{COMMITS}/{self.job_id}.json"

    def purge_record(self, run: str) -> str:
        """That a purge ended a generation of this job, uncommitted, that DAG run *run* (:meth:`.RunOwner.key`)
        had set up (:mod:`.records.purged`). Its name starts with ``_``, as :attr:`error_claim`'s: never a job's
        commit log."""
        return f"{COMMITS}/_purged_{self.job_id}_{run}.json"

    @property
    def error_claim(self) -> str:
        """The target's owner in mode ``error`` (:mod:`.targetclaim`): one per target, whatever the job. Its name
        starts with ``_``, which no job id does, so it is never a job's commit log."""
        return f"{COMMITS}/_error_claim.json"

    def app_dir(self, app: int) -> str:
        return f"{self.job_dir}/{app}"

    def app_marker(self, app: int) -> str:
        return f"{self.app_dir(app)}/_app.json"

    def app_entry(self, app: int) -> str:
        """The application attempt's marker again, one level up, written after :meth:`app_marker`: the listing
        of the job directory every reader of the current application attempt makes then says which numbered
        directories are application attempts, without one HEAD request each on S3 (see
        :meth:`~.job.Job.app_attempts`)."""
        return f"{self.job_dir}/{self.app_entry_name(app)}"

    @staticmethod
    def app_entry_name(app: int) -> str:
        return f"_app_{app}.json"

    def attempt_dir(self, app: int, task: int, attempt: int) -> str:
        return f"{self.work_root(app)}/{attempt_name(task, attempt)}"

    def attempts_dir(self, app: int) -> str:
        return f"{self.app_dir(app)}/_attempts"

    def attempt_claim(self, app: int, task: int, attempt: int) -> str:
        return f"{self.attempts_dir(app)}/{attempt_name(task, attempt)}"

    def work_root(self, app: int) -> str:
        """The directory holding every task attempt's work directory of an application attempt."""
        return f"{self.app_dir(app)}/{TEMPORARY}"

    def commits_dir(self, app: int) -> str:
        return f"{self.app_dir(app)}/_commits"

    def abort_record(self, app: int, job_uuid: str) -> str:
        """The teardown's report, scoped by generation: a zombie teardown may write it late, into a directory a
        later generation reuses (:func:`~.abort.abort_job`), where that generation never reads it."""
        return f"{self.app_dir(app)}/{ABORT_RECORD}{job_uuid}.json"

    def committed_dir(self, app: int) -> str:
        return f"{self.app_dir(app)}/_committed"

    def task_record(self, app: int, task: int) -> str:
        return f"{self.commits_dir(app)}/{task_record_name(task)}"
