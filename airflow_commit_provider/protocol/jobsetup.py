"""Job setup (Hadoop's ``setupJob``): the job record once per generation, the next application attempt, the target
checked before anything else; :class:`JobContext` is what it established."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from . import records
from .abort import abort_job
from .errors import CommitProtocolError, InvalidOutputSpec, OverlappingRun
from .faults import inject
from .job import Job
from .layout import COMMITS
from .owners import RunFinished, still_running
from .paths import check_relative
from .records.inputs import record_inputs
from .records.job import CommitLog, JobRecord, Replaces
from .replacing import holders, refuse_mixed
from .stores.helpers import missing
from .tables.ownership import refuse_file_job

log = logging.getLogger(__name__)

#: how many application attempt numbers one setup tries before it refuses (:func:`claim_app_attempt`)
APP_CLAIM_TRIES = 16


@dataclass(frozen=True)
class JobContext:
    """What :func:`setup_job` established: the generation and the application attempt."""

    job_id: str
    job_uuid: str
    generation: int
    app_attempt: int
    first_app_attempt: int
    #: ``"running"``, or ``"committing"`` when a job commit had already started (setup then changes nothing)
    state: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def setup_job(scope: Job, *, replace_files: Iterable[str] = (), replace_first: bool = False,
              run_finished: RunFinished | None = None) -> JobContext:
    """See :meth:`~.committer.FileOutputCommitter.setup_job`."""
    check_target(scope)
    if scope.target_claim:
        scope.target_claim.refuse_other()   # fail fast: another job owns the target
    scope.remove_trash()
    inject("setup_job.before_record")
    job = scope.job_record()
    if job is not None and scope.repartitioned(job) and failed_run_torn_down(scope, job):
        job = start_over(scope, job)
    if job is None:
        job = create_job_record(scope, [check_relative(f) for f in replace_files], replace_first)
    scope.check_config(job)
    apps = scope.app_attempts(job)
    if apps:   # before the plan: a run still committing the job is not joined either
        check_no_overlap(scope, job, apps[0], run_finished)
    scope.forget_purge()   # the run works in this job record now, whatever a purge ended before (records/purged.py)
    plan = scope.commit_plan(job)
    if plan is not None:
        return context(scope, job, plan.app_attempt, "committing")
    app, marker = claim_app_attempt(scope, job, apps)
    inject("setup_job.after_app_marker")
    scope.store.write_bytes(scope.layout.app_entry(app), marker)   # after the marker: it only ever repeats one
    inject("setup_job.after_app_attempt")
    return context(scope, job, app, "running")


def claim_app_attempt(scope: Job, job: JobRecord, apps: Sequence[int]) -> tuple[int, bytes]:
    """The application attempt after *apps* (the generation's, newest first), claimed by the exclusive creation
    of its marker, and the marker's bytes (which name this run as the attempt's owner, when it is known).

    A marker another setup created first sends this one to the next number; the marker carries a nonce, so that
    a marker this very setup created (its answer lost, its resent request refused) is told from a rival's (see
    :meth:`~.stores.base.Store.create_exclusive`). The numbers tried are bounded (:data:`APP_CLAIM_TRIES`): every
    one taken means another setup of this job ran at the same moment, and runs of one job must not overlap."""
    first = apps[0] + 1 if apps else job.first_app_attempt
    owner = {"owner": scope.config.owner.to_dict()} if scope.config.owner is not None else {}
    nonce = uuid.uuid4().hex
    for app in range(first, first + APP_CLAIM_TRIES):
        marker = records.dumps("app-attempt", {"app_attempt": app, "job_uuid": job.job_uuid, "nonce": nonce,
                                               "started": records.now_iso(), "labels": scope.config.labels,
                                               **owner})
        if scope.store.create_exclusive(scope.layout.app_marker(app), marker):
            return app, marker
    raise CommitProtocolError(
        f"setup of job {scope.job_id} found application attempts {first} to {first + APP_CLAIM_TRIES - 1} each "
        f"claimed by another setup while it tried ({scope.store.url(scope.layout.job_dir)}): other setups of this "
        "job are running at the same moment (a retried setup beside its zombie, a cleared run beside the running "
        "one), and runs of one job must not overlap. Nothing was changed; retry this setup once the other runs' "
        "setups are done")


def failed_run_torn_down(scope: Job, job: JobRecord) -> bool:
    """Whether generation *job* never fixed a commit plan and the teardown of its newest application attempt ran
    (its abort record): the run failed, nothing of it can still commit on its own, and starting it over destroys
    no work under way. Without that record (a teardown killed, a run still running) nobody can tell."""
    apps = scope.app_attempts(job)
    return scope.commit_plan(job) is None and bool(apps) \
        and scope.store.exists(scope.layout.abort_record(apps[0], job.job_uuid))


def start_over(scope: Job, job: JobRecord) -> JobRecord | None:
    """Purge generation *job* (:func:`~.abort.abort_job`, as it was set up: its committed tasks' files are laid
    out by its old ``partition_by``), so that this setup creates the job again with the new one; every task then
    runs again. The job record as it is after the purge: ``None``, unless another party moved the job on
    meanwhile (then :meth:`~.job.Job.check_config` refuses it, naming the way out)."""
    old = Job(scope.store, scope.job_id, replace(scope.config, partition_by=job.partition_by), scope.table)
    log.warning("job %s: set up with partition_by=%s, now %s, and its last run failed: its committed tasks cannot "
                "be recovered into the new partitioning, so the job starts over (every task runs again)",
                scope.job_id, list(job.partition_by), list(scope.config.partition_by))
    abort_job(old)
    return scope.job_record()


def check_no_overlap(scope: Job, job: JobRecord, app: int, run_finished: RunFinished | None) -> None:
    """:class:`OverlappingRun` when another run owns the job's current application attempt *app* and has not
    ended (:mod:`.owners`): neither the job's records (its teardown's abort record) nor *run_finished* (the
    scheduler) says it did. A run that ended is taken over: the attempt this setup opens recovers its commits."""
    other = scope.other_owner(app, job)
    if other is None or scope.attempt_ended(app, job):
        return
    finished = run_finished(other) if run_finished is not None else None
    if finished is True:
        return
    marker = records.read(scope.store, scope.layout.app_marker(app), "app-attempt") or {}
    raise OverlappingRun(still_running(scope.job_id, other, app, marker.get("started"), finished), other, app)


def context(scope: Job, job: JobRecord, app: int, state: str) -> JobContext:
    return JobContext(job_id=scope.job_id, job_uuid=job.job_uuid, generation=job.generation,
                      app_attempt=app, first_app_attempt=job.first_app_attempt, state=state)


def check_target(scope: Job) -> None:
    """The output root is a directory (or absent), and ``_temporary`` and ``_commits`` below it are no link and on
    the same volume: found here, not at a rename half way through the commit. A job of files (no table) refuses a
    root that is, lies inside or holds a table (:func:`~.tables.ownership.refuse_file_job`): in every mode its
    commit would delete files the table's log names or add files it does not; a table job's root is its table."""
    if scope.store.exists("") and not scope.store.isdir(""):
        raise InvalidOutputSpec(f"output root {scope.store.url()} is a file, not a directory")
    if scope.table is None:
        refuse_file_job(scope.store, scope.mode.name)
    scope.store.check_tree([scope.layout.job_dir, COMMITS])


def replaced_generation(scope: Job, log: CommitLog) -> Replaces:
    """The committed generation *log* keeps, as the next one replaces it: its files where they are now, also where
    a compaction merged them (:mod:`.replacing`); kept in the job record, so that a compaction under way leaves
    them alone. Refused, before anything is written, when a merged file holds its rows with other files' and the
    mode would keep that file (``append``, ``error``: ``dynamic`` is decided at the commit, by the partitions it
    writes; ``overwrite`` deletes it anyway)."""
    files = {f["path"] for f in log.files}
    if scope.mode.name == "overwrite" or scope.table is not None or not missing(scope.store, sorted(files)):
        # replaces everything (a table: by its transaction), or every file is where the generation left it
        return Replaces(log.job_uuid, log.generation, tuple(sorted(files)))
    found = holders(scope.store, files, scope.visible_files(), threads=scope.commit_threads,
                    generation_uuid=log.job_uuid)
    if scope.mode.name != "dynamic":
        refuse_mixed(scope.store, found, scope.job_id, log.generation, scope.mode.name)
    # every file of the generation (a merged file holds rows of a subset: the commit checks against all of them)
    return Replaces(log.job_uuid, log.generation, tuple(sorted(files | found.merged)))


def create_job_record(scope: Job, replace_files: list[str], replace_first: bool) -> JobRecord:
    """The first generation's record, or the next one's after a committed generation (which it replaces)."""
    log = scope.commit_log()
    replaces = None
    generation, first_app = 0, 0
    if log is not None:
        scope.check_names(log.names, f"the commit log {scope.store.url(scope.layout.commit_log)} of its generation "
                                     f"{log.generation}")
        generation, first_app = log.generation + 1, log.app_attempt + 1
        replaces = replaced_generation(scope, log)
    scope.remove_stale_abort_records()
    # Never reuse an application attempt directory a zombie of a purged generation may have re-created.
    first_app = max([first_app] + [int(n) + 1 for n in scope.store.list_dir(scope.layout.job_dir) if n.isdigit()])
    if scope.mode.claims_target:
        scope.check_empty(set(replaces.files) if replaces else set())
    inputs = record_inputs(scope.store, replace_files, scope.job_id) if replace_files else ()
    scope.store.ensure_root()
    identity = scope.identity()
    record = JobRecord(identity["committer"], identity["algorithm"], scope.mode.name, scope.config.partition_by,
                       scope.job_id, str(uuid.uuid4()), generation, first_app, records.now_iso(),
                       scope.config.labels, replaces, tuple(replace_files), replace_first, inputs,
                       identity.get("table"), scope.config.names or None)
    scope.store.create_exclusive(scope.layout.job_record, record.to_json())
    job = scope.job_record()
    if job is None:  # pragma: no cover - created just above, or by a concurrent setup
        raise CommitProtocolError(f"job record {scope.store.url(scope.layout.job_record)} vanished")
    return job


__all__ = ["JobContext", "setup_job"]
