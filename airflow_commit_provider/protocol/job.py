"""The scope of one job on one store: what every part of the protocol works in.

A :class:`Job` owns the store, the layout, the configuration, the attempt ledger, the publisher, the mode and the
error-mode claim, and reads the job's records. Job setup (:mod:`.jobsetup`), the task side (:mod:`.tasks`), job
commit and its stages (:mod:`.jobcommit`), the abort (:mod:`.abort`) and the read model (:mod:`.status`) each take a
``Job``; none of them knows the committer, which is only the Hadoop-shaped facade over them
(:mod:`.committer`). Like Hadoop's manifest committer, whose stages get a ``StageConfig`` and the store operations.

A ``Job`` holds no state of the job itself: every decision is a record on the store, so any process can build one
for a job and act on it.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Container, Iterable, Mapping, Sequence

from . import records
from .config import CommitConfig, RunOwner
from .errors import (
    GenerationPurged,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    JobConfigMismatch,
    JobIdentityCollision,
    JobNotSetUp,
    OverlappingRun,
)
from .layout import ABORT_RECORD, TEMPORARY, TRASH, JobLayout, check_job_id, task_record_names
from .ledger import AttemptLedger
from .modes import Mode
from .owners import not_owned
from .parallel import parallel
from .publish import Publisher, publisher_for
from .records.job import CommitLog, CommitPlan, JobRecord
from .records.purged import PurgedGeneration
from .records.refused import RefusedTasks
from .records.task import TaskCommitRecord
from .stores import Store
from .stores.helpers import delete_and_prune
from .tables.common import TableTarget
from .targetclaim import TargetClaim


class Job:
    """One job (*job_id*, stable across retries and clears of one write stage of one DAG run) on *store*."""

    def __init__(self, store: Store, job_id: str, config: CommitConfig, table: TableTarget | None = None) -> None:
        if table is not None and config.algorithm != 1:
            raise InvalidOutputSpec(f"a {table.format} table is committed at job commit: use algorithm 1, not "
                                    f"{config.algorithm!r}")
        self.store = store
        #: the table job commit publishes into (:mod:`.tables`; *store* is its data root), or ``None`` for files
        self.table = table
        self.job_id = check_job_id(job_id)
        self.config = config
        self.mode: Mode = config.strategy
        self.layout = JobLayout(self.job_id)
        self.ledger = AttemptLedger(store, self.layout)
        self.commit_threads = config.commit_threads or store.default_commit_threads
        #: everything the job does differently per algorithm and store (:mod:`.publish`)
        self.publisher: Publisher = publisher_for(config, store, self.layout, self.job_id, self.commit_threads)
        #: mode ``error``: which job owns the target (:mod:`.targetclaim`); ``None`` in the other modes
        self.target_claim = TargetClaim(store, self.layout) if self.mode.claims_target else None
        #: the job record last read (its bytes and the record), and the last one found to match this job: not
        #: state of the job (every decision still reads the store), only what a read is compared with
        self._last_job: tuple[bytes, JobRecord] | None = None
        self._checked: JobRecord | None = None
        #: the owners the application attempts' markers name, as read (a marker is created once, never changed)
        self._owners: dict[tuple[str, int], RunOwner | None] = {}

    # ------------------------------------------------------------------ identity
    def identity(self) -> dict[str, object]:
        """What the job record keeps of the configuration, and every later committer of the job must match."""
        out: dict[str, object] = {"committer": self.publisher.committer_name, "algorithm": self.publisher.algorithm,
                                  "mode": self.mode.name, "partition_by": list(self.config.partition_by)}
        if self.table is not None:   # absent for a directory of files: its records stay as they were
            out["table"] = self.table.identity()
        return out

    def check_names(self, named: Mapping[str, str] | None, where: str) -> None:
        """:class:`JobIdentityCollision` when *named* (what named the job's record or commit log at *where*) is
        not what names this committer's job (``CommitConfig(names=...)``): two namings met at one job id, and
        obeying would make one's commit replace the other's files. A side that names nothing (a record of an
        earlier release; a caller that gives no names) is accepted."""
        ours = self.config.names
        if not ours or named is None or dict(named) == ours:
            return
        raise JobIdentityCollision(
            f"job id {self.job_id} at {self.store.url()} belongs to another job: {where} was named by "
            f"{dict(named)}, this job is named by {ours}, and two namings must never share a job. Give this stage "
            "another job_name or job_key; or, only if that job is abandoned and not committed, purge it first: "
            f"`{shlex.join(['airflow-commit', 'abort', self.store.url(), '--job', self.job_id, '--purge'])}`")

    def check_record_names(self, record: JobRecord) -> None:
        """:meth:`check_names` of the job's current record."""
        self.check_names(record.names, f"its job record {self.store.url(self.layout.job_record)}")

    def check_config(self, record: JobRecord) -> None:
        """:class:`JobIdentityCollision` when *record* was named by another job (:meth:`check_names`), then
        :class:`JobConfigMismatch` when it was set up with another configuration; the table first, by name (a
        job set up as files and committed into a table, or into another table, or the other way)."""
        self.check_record_names(record)
        ours = self.identity()
        if record.table != ours.get("table"):
            raise JobConfigMismatch(
                f"job {self.job_id} was set up to publish into {_describe(record.table)}, but this committer "
                f"publishes into {_describe(ours.get('table'))}; a job keeps its target across attempts: give the "
                "same table_format and table, or another job id")
        if self.repartitioned(record):
            raise JobConfigMismatch(
                f"job {self.job_id} was set up with partition_by={list(record.partition_by)}, this committer has "
                f"partition_by={list(self.config.partition_by)}: the tasks it committed are laid out by the old "
                "columns, so none of them can be recovered into the new ones. Restore partition_by="
                f"{list(record.partition_by)}; or start the job over: after the failed run's teardown, clear the "
                "whole DAG run (the stage's setup included, not only the failed tasks): its setup starts the job "
                "again with the new partitioning and every task runs again. If that teardown did not run (killed, "
                f"or the run is still running), first purge the job: airflow-commit abort {self.store.url()} --job "
                f"{self.job_id} --purge (with --conn-id <the stage's connection> for a remote target), then clear "
                "the run")
        if record.config() != ours:
            raise JobConfigMismatch(
                f"job {self.job_id} was set up with {record.config()}, but this committer has {ours}; "
                "a job keeps its committer, algorithm, mode and partitioning across attempts")

    def repartitioned(self, record: JobRecord) -> bool:
        """Whether *record* differs from this job's configuration in ``partition_by`` alone: the one change
        between a failed run and its clear that the next setup can make by starting the generation over
        (:func:`~.jobsetup.setup_job`), since no committed task's files fit the new layout."""
        ours = self.identity()
        return record.table == ours.get("table") and record.config() != ours \
            and {**record.config(), "partition_by": ours["partition_by"]} == ours

    # ------------------------------------------------------------------ record reads
    def job_record(self) -> JobRecord | None:
        """The current generation's job record, or ``None`` (never set up, or committed and cleaned up).

        Read from the store every time (the generation may change between two steps of one attempt); parsed and
        checked only when its bytes differ from the last read's, since a task attempt reads it at set-up and again
        at commit (on S3 the commit's re-read is a listing instead: :meth:`job_record_as_listed`)."""
        try:
            data = self.store.read_bytes(self.layout.job_record)
        except FileNotFoundError:
            return None
        last = self._last_job   # read once: threads share the Job, and another may store an older record meanwhile
        if last is None or last[0] != data:
            last = (data, JobRecord.parsed(data, self.store.url(self.layout.job_record)))
            self._last_job = last
        return last[1]

    def job_record_as_listed(self, listing: Mapping[str, str | None]) -> JobRecord:
        """:meth:`require_job`, without reading the record again when *listing* (the job directory's
        :meth:`~.stores.Store.list_dir_digests`, made just now) shows the very bytes this scope read last: on S3
        the ETag of an object written whole is the MD5 of its bytes, so an equal digest is the same record, and
        the task commit's re-read of the generation costs no request beside the listing it makes anyway (for the
        plan and the application attempt). A digest the store does not give, or another one, reads it."""
        last = self._last_job
        digest = listing.get(self.layout.job_record.rsplit("/", 1)[-1])
        if last is not None and digest is not None \
                and digest == hashlib.md5(last[0], usedforsecurity=False).hexdigest():
            return self._matching(last[1])
        return self.require_job()

    def commit_log(self) -> CommitLog | None:
        """The job's commit log (``_commits/<job>.json``): the last committed generation's manifest."""
        return CommitLog.read(self.store, self.layout.commit_log)

    def commit_plan(self, record: JobRecord) -> CommitPlan | None:
        """The plan of the generation's commit, once one was fixed (then the job is committing)."""
        return CommitPlan.read(self.store, self.layout.plan(record.job_uuid))

    def refused_tasks(self, record: JobRecord, names: Iterable[str] | None = None) -> RefusedTasks:
        """The task commits a job commit of the generation refused for good: recovery adopts none of them.
        *names*: the job directory's, when the caller has just listed it (no read when the record is not there:
        on S3 a missing record still costs a request)."""
        rel = self.layout.refused_tasks(record.job_uuid)
        if names is not None and rel.rsplit("/", 1)[-1] not in set(names):
            return RefusedTasks(record.job_uuid, {})
        return RefusedTasks.read(self.store, rel, record.job_uuid)

    def refuse_tasks(self, record: JobRecord, recs: Iterable[TaskCommitRecord], reason: str) -> RefusedTasks:
        """Record that a job commit refused the commits *recs* of the generation for good (*reason*): the next
        application attempt runs those tasks again instead of recovering them (:mod:`.records.refused`)."""
        return RefusedTasks.add(self.store, self.layout.refused_tasks(record.job_uuid), recs, reason)

    def task_record(self, app: int, task: int, job_uuid: str) -> TaskCommitRecord | None:
        """The task's commit record in application attempt *app*, if it belongs to generation *job_uuid*: a zombie
        of a purged generation may have written one into a directory a later generation reuses. One of the
        generation that is another task's is refused (:meth:`~.records.task.TaskCommitRecord.of_task`), here as
        where job commit reads them all at once: recovered, it would be adopted as this task."""
        rel = self.layout.task_record(app, task)
        rec = TaskCommitRecord.read(self.store, rel)
        return rec.of_task(task, self.store.url(rel)) if rec is not None and rec.job_uuid == job_uuid else None

    def task_records(self, app: int, tasks: Sequence[int], job_uuid: str,
                     listed: Container[str] | None = None) -> dict[int, TaskCommitRecord]:
        """:meth:`task_record` of each of *tasks* (those that have one of generation *job_uuid*), as job commit reads
        them: in :attr:`commit_threads` runs of every n-th task, one pool task per run (a local record reads in
        microseconds: a pool task per record cost more than the read), each run one
        :meth:`~.stores.Store.read_in_dir` of the records' directory, decoded at once when all are read
        (:meth:`~.records.task.TaskCommitRecord.decode_many`). Each record is read with one read where the store
        :attr:`~.stores.Store.cuts_first_reads` (:meth:`~.stores.Store.read_in_dir_once`); when they do not all
        decode at once, they are read again whole and decoded one by one, which names a record that is wrong (a
        read cut short is not a damaged record).
        *listed*: the names a listing of the directory found (job commit makes one anyway): the other tasks'
        records are not opened."""
        directory = self.layout.commits_dir(app)
        names = task_record_names(tasks)
        if listed is not None:
            there = [i for i, name in enumerate(names) if name in listed]
            if len(there) < len(names):
                tasks, names = [tasks[i] for i in there], [names[i] for i in there]
        def read(whole: bool) -> tuple[list[int], list[bytes]]:
            """The indices of the records there, and their bytes."""
            data = self._read_records(directory, names, whole)
            found = [i for i, raw in enumerate(data) if raw is not None]
            return found, [data[i] for i in found]  # type: ignore[misc]

        found, got = read(whole=False)
        recs = TaskCommitRecord.decode_many(got, [tasks[i] for i in found])
        if recs is None:
            if self.store.cuts_first_reads:
                found, got = read(whole=True)
            recs = TaskCommitRecord.from_json_many(got, [tasks[i] for i in found],
                                                   lambda k: self.store.url(f"{directory}/{names[found[k]]}"))
        return {tasks[i]: rec if rec.task == tasks[i] else
                rec.of_task(tasks[i], self.store.url(f"{directory}/{names[i]}"))
                for i, rec in zip(found, recs) if rec.job_uuid == job_uuid}

    def _read_records(self, directory: str, names: Sequence[str], whole: bool) -> list[bytes | None]:
        """The files *names* of *directory*, in :attr:`commit_threads` runs (:meth:`task_records`)."""
        data: list[bytes | None] = [None] * len(names)
        runs = max(1, min(self.commit_threads, len(names)))
        read = self.store.read_in_dir if whole else self.store.read_in_dir_once
        if runs == 1:
            return read(directory, names)

        def read_run(run: range) -> None:
            for i, raw in zip(run, read(directory, [names[i] for i in run])):
                data[i] = raw

        parallel(read_run, [range(k, len(names), runs) for k in range(runs)], runs)
        return data

    def app_records(self, app: int, job_uuid: str) -> list[TaskCommitRecord]:
        """Every task commit record of one application attempt (of generation *job_uuid*)."""
        out = []
        for name in self.store.list_dir(self.layout.commits_dir(app)):
            if name.startswith("task_") and name.endswith(".json") and name[5:-5].isdigit():
                rec = self.task_record(app, int(name[5:-5]), job_uuid)
                if rec is not None:
                    out.append(rec)
        return out

    def require_job(self) -> JobRecord:
        """The current generation's job record, with this job's configuration; :class:`JobNotSetUp` or
        :class:`JobAlreadyCommitted` when there is none."""
        record = self.job_record()
        if record is None:
            log = self.commit_log()
            self.refuse_if_purged(log)
            if log is not None:
                raise JobAlreadyCommitted(
                    f"job {self.job_id} at {self.store.url()} is committed and cleaned up; a new generation starts "
                    "only through setup_job()")
            raise JobNotSetUp(f"job {self.job_id} has no job record at {self.store.url(self.layout.job_record)}; "
                              "run setup_job() first")
        return self._matching(record)

    def refuse_if_purged(self, log: CommitLog | None) -> None:
        """:class:`GenerationPurged` when there is no job record and a purge ended a generation that this
        committer's DAG run set up, which the run has not set up again since (*log*: the commit log as just read).
        A committer without an owner cannot tell its generation from another: it is not refused."""
        if self.config.owner is None:
            return
        purged = PurgedGeneration.read(self.store, self.layout.purge_record(self.config.owner.key()))
        if purged is None:
            return
        last = "no generation has committed" if log is None else \
            f"the job's last commit is generation {log.generation}'s ({log.job_uuid})"
        raise GenerationPurged(
            f"job {self.job_id} at {self.store.url()}: {purged.describe()} before it committed, and {last}: this "
            f"try of {self.config.owner.describe()} belongs to the purged generation, whose writes are gone. Clear "
            "the whole DAG run, its setup task included: the setup starts a new generation and the writes run again")

    def forget_purge(self) -> None:
        """This committer's DAG run has a job record to work in again (its setup): a try of it is no longer one of
        a purged generation (:meth:`refuse_if_purged`)."""
        if self.config.owner is not None:
            self.store.delete_file(self.layout.purge_record(self.config.owner.key()))

    def _matching(self, record: JobRecord) -> JobRecord:
        """*record*, once :meth:`check_config` accepted it (a record is immutable: checked once)."""
        if record is not self._checked:
            self.check_config(record)
            self._checked = record
        return record

    def app_attempts(self, record: JobRecord, names: Iterable[str] | None = None) -> list[int]:
        """The generation's application attempts, newest first (*names*: the job directory's, when the caller
        has just listed it)."""
        names = set(self.store.list_dir(self.layout.job_dir) if names is None else names)
        apps = sorted((int(n) for n in names if n.isdigit() and int(n) >= record.first_app_attempt), reverse=True)
        # A numbered directory is not always an application attempt: a zombie of a purged generation may re-create
        # one (its trace, its claim) at a number the current generation has not reached. Its marker says it is
        # one; the marker's copy in the job directory (:meth:`~.layout.JobLayout.app_entry`, written after it)
        # says so in this listing, so only an attempt set up by an earlier release, or whose set-up died between
        # the two, costs a look-up of its marker.
        return [n for n in apps
                if self.layout.app_entry_name(n) in names or self.store.exists(self.layout.app_marker(n))]

    def current_app_attempts(self, record: JobRecord, names: Iterable[str] | None = None) -> list[int]:
        """:meth:`app_attempts`, refusing a generation with none (:class:`JobNotSetUp`)."""
        apps = self.app_attempts(record, names)
        if not apps:
            raise JobNotSetUp(f"job {self.job_id} has no application attempt; run setup_job() first")
        return apps

    def current_app_attempt(self, record: JobRecord | None = None) -> int:
        """The newest application attempt of the current generation."""
        return self.current_app_attempts(record or self.require_job())[0]

    def app_owner(self, app: int, record: JobRecord) -> RunOwner | None:
        """The run that owns application attempt *app* of generation *record*, as its marker says (``None``: it
        names none, or is gone: the job's records went with a commit or a purge, which the caller's next read
        finds). A marker is created once and never changes, but a purge lets the next generation number its
        attempts from 0 again: what was read is kept per generation."""
        key = (record.job_uuid, app)
        if key not in self._owners:
            rel = self.layout.app_marker(app)
            doc = records.read(self.store, rel, "app-attempt")
            if doc is None:
                return None
            self._owners[key] = RunOwner.from_record(doc.get("owner"), self.store.url(rel))
        return self._owners[key]

    def other_owner(self, app: int, record: JobRecord) -> RunOwner | None:
        """The run that owns application attempt *app* of generation *record* when it is not this scope's run
        (``config.owner``, any clear of it); ``None`` when it is, when the attempt names no owner, or when this
        scope works for none."""
        ours = self.config.owner
        if ours is None:
            return None
        owner = self.app_owner(app, record)
        return None if owner is None or owner.same_run(ours) else owner

    def own_app_attempts(self, record: JobRecord, names: Iterable[str] | None = None, *,
                         doing: str = "write") -> list[int]:
        """:meth:`current_app_attempts`, refusing (:class:`OverlappingRun`, *doing* saying what was refused) when
        the current one is another run's (:mod:`.owners`) -- unless the generation's commit has fixed its plan:
        then the job's fate is fixed, and whoever asks only finds the records or finishes that commit."""
        apps = self.current_app_attempts(record, names)
        other = self.other_owner(apps[0], record)
        if other is not None and self.commit_plan(record) is None:
            assert self.config.owner is not None   # other_owner found none otherwise
            raise OverlappingRun(not_owned(self.job_id, self.config.owner, other, apps[0], doing), other, apps[0])
        return apps

    def attempt_ended(self, app: int, record: JobRecord) -> bool:
        """Whether the job's records say application attempt *app* of the generation has ended: its run's
        teardown recorded the abort there (:mod:`.abort`)."""
        return self.store.exists(self.layout.abort_record(app, record.job_uuid))

    def plan_and_app_attempt(self, record: JobRecord,
                             names: Iterable[str] | None = None) -> tuple[CommitPlan | None, int]:
        """The plan of the generation's commit (``None`` before one is fixed) and its current application
        attempt, from one listing of the job's directory, which holds both (*names*, when the caller has just
        made it): the plan is read only when its name is there (on S3 a missing record still costs a request)."""
        names = set(self.store.list_dir(self.layout.job_dir) if names is None else names)
        plan = self.commit_plan(record) if self.layout.plan(record.job_uuid).rsplit("/", 1)[-1] in names else None
        return plan, self.current_app_attempts(record, names)[0]

    def registered_tasks(self, record: JobRecord) -> set[int]:
        """Every task that set up an attempt or has a record in the generation (``commit_job()`` without tasks)."""
        tasks: set[int] = set()
        for app in self.app_attempts(record):
            for name in self.store.list_dir(self.layout.commits_dir(app)):
                if name.startswith("task_") and name.endswith(".json"):
                    tasks.add(int(name[5:-5]))
            tasks.update(trace.task for trace in self.ledger.traces(app))
        return tasks

    def visible_files(self) -> set[str]:
        """Data files readers would see (names starting with ``_`` or ``.`` excluded)."""
        return set(self.store.visible_names())

    def check_empty(self, own_files: set[str], visible: set[str] | None = None) -> None:
        """:class:`InvalidOutputSpec` when the target holds data files other than *own_files* (mode ``error``)."""
        if self.table is not None:
            self.table.check_empty(own_files)   # files no snapshot lists (an earlier overwrite's) are not data
            return
        others = sorted((self.visible_files() if visible is None else visible) - own_files)
        if others:
            shown = ", ".join(others[:5]) + (" ..." if len(others) > 5 else "")
            holder = self.target_claim.other_holder() if self.target_claim else None
            owner = f" (job {holder.job_id} claimed it in mode 'error' at {holder.claimed})" if holder else ""
            raise InvalidOutputSpec(
                f"output {self.store.url()} already holds {len(others)} data file(s) ({shown}){owner} and mode is "
                "'error'; use mode='append', 'overwrite' or 'dynamic' to write there")

    # ------------------------------------------------------------------ clean-up any party may run
    def remove_trash(self) -> int:
        """Delete this job's committed directories that a cleanup renamed into ``_temporary/_trash`` (see
        :class:`~.jobcommit.stages.Cleanup`); returns how many. Nothing there is read by anyone: deleting it at any
        time, from any process, in parallel with another such call, is safe."""
        names = [name for name in self.store.list_dir(TRASH) if self.layout.is_own_trash(name)]
        for name in names:
            self.store.delete_tree(f"{TRASH}/{name}")
        if names:
            self.store.remove_dir_if_empty(TRASH)
            self.store.remove_dir_if_empty(TEMPORARY)
        return len(names)

    def remove_stale_abort_records(self) -> None:
        """Delete the abort records of generations other than the current one, and the directories that held only
        them: what a zombie teardown killed between its late record and taking it back leaves (:mod:`.abort`), in
        a job directory it may have made again after the job's commit or purge. Called where the job has no record
        (its next set-up, an abort), so the job directory is empty or nearly: a listing or two.

        A record is stale when its generation is not the one current after the listing: a generation's record
        exists before its teardown writes, and a generation that ended never comes back. No reader looks at
        another generation's record, so deleting it at any time, from any process, is safe."""
        apps = [n for n in self.store.list_dir(self.layout.job_dir) if n.isdigit()]
        found = [f"{self.layout.app_dir(int(n))}/{name}" for n in apps
                 for name in self.store.list_dir(self.layout.app_dir(int(n))) if name.startswith(ABORT_RECORD)]
        if not found:
            return
        job = self.job_record()
        current = {self.layout.abort_record(int(n), job.job_uuid) for n in apps} if job is not None else set()
        delete_and_prune(self.store, [rel for rel in found if rel not in current], 1, lambda: None)


__all__ = ["Job"]


def _describe(table: object) -> str:
    """A job's table identity in words: ``a directory of files``, ``a delta table``, ``iceberg table ns.t``."""
    if not isinstance(table, dict):
        return "a directory of files (no table_format)"
    return f"{table['format']} table {table['name']}" if "name" in table else f"a {table['format']} table"
