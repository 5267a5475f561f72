"""Deduplication that deletes only what is proven duplicate: the same task of the same job, visible twice.

Whether two files can be that is a question of the writer's naming rules (:mod:`.filenames`) and records:

- **This provider's files** (``part-<task>-<job uuid>-c<n>``): the job's commit log ``_commits/<job>.json`` lists
  the files of every task it committed. A visible file with that job's uuid and the number of a committed task
  that the log does not list (a zombie attempt's file, or a copy of a listed one) is deleted, while every file
  the log lists for that task is there with its size.
- **Spark's files** (``part-<split>-<job uuid>[-.]c<n>``): every attempt of a task writes the same name, so a
  second visible copy of a task's file exists only under a copy name (``..._copy_1.parquet``, written by a mover
  that does not replace, as Hive's is). It is deleted when it holds the same bytes, or the same rows, as the file
  under the original name. Two uuids are two jobs: never duplicates, whatever their task numbers.
- **Hive's files** (``<task>_<attempt>``) do not name their job: ``000005_0`` and ``000005_1`` in one directory
  are two attempts of one job or the output of two ``INSERT INTO`` jobs, and ``000005_0_copy_1`` is always a
  second job's. Attempts of one task are duplicates only in a directory one job wrote -- a Hive transaction
  directory (``delta_...``, ``base_...``), or any directory with ``single_job_dirs=True`` (the caller's word that
  each was written by one job, as ``INSERT OVERWRITE`` of a partition does) -- and only when they hold the same
  bytes or rows (no record says which attempt the job committed, so they must not differ). Never by size.
- **Hadoop's files** (``part-r-00005``) are never duplicates: the name holds no attempt, and a copy of it
  (``part-r-00005_copy_1``) is another job's.

Nothing is decided about files of a job that has not committed: this provider's jobs with a job record under
``_temporary/<job>`` (their files carry the job's uuid; with v2 they are visible before the job commits; a
compaction's inputs), and every file under a directory holding another writer's staging directory (Hadoop's
``_temporary``, ``.spark-staging-*``, ``.hive-staging*``, ...). Those are reported as left alone, with why.

:func:`find_duplicates` (the dry run) returns the :class:`~.dedupplan.DedupPlan`; :func:`remove_duplicates`
carries out exactly that plan as a job of the protocol (:mod:`.dedupjob`).
"""

from __future__ import annotations

import io
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import records
from .dedupjob import run_plan, stored_plan
from .dedupplan import DedupPlan, Deletion, LeftAlone, Undecided
from ..errors import DedupInProgress
from .filenames import HADOOP, HIVE, SPARK, TaskFile, is_foreign_staging, is_hive_transaction_dir, parse_task_file
from ..history import commit_log_jobs
from ..records.job import CommitLog
from ..layout import COMMITS, SUCCESS, TEMPORARY, JobLayout
from ..records.success import marker_dirs_above
from ..records.underway import job_dirs
from ..paths import is_hidden, join, partition_of
from ..stores import Store
from ..tables.ownership import refuse_table

OURS = "this-provider"

_STAGING_OWNERS = {"_temporary": "Hadoop's or Spark's FileOutputCommitter", ".spark-staging": "Spark's dynamic "
                   "partition overwrite", ".hive-staging": "Hive", "_tmp.": "Hive", "_task_tmp.": "Hive",
                   "__magic": "the S3A magic committer"}


@dataclass
class _InFlight:
    """What no decision may touch: this provider's jobs that have not committed, other writers' staging."""

    #: job uuid -> job id, for this provider's jobs with a job record
    uuids: dict[str, str] = field(default_factory=dict)
    #: file -> job id, for files a job of this provider will replace at its commit (a compaction's inputs)
    files: dict[str, str] = field(default_factory=dict)
    #: directory -> why: another writer is (or was, and died) writing into it
    dirs: dict[str, str] = field(default_factory=dict)

    def under_staging(self, path: str) -> bool:
        return any(not d or path.startswith(d + "/") for d in self.dirs)

    def why(self, path: str, info: TaskFile | None) -> str | None:
        """Why this file belongs to a job of this provider that has not committed, or ``None``."""
        if info is not None and info.job_uuid in self.uuids:
            return (f"a file of job {self.uuids[info.job_uuid]} (uuid {info.job_uuid}), which has not committed "
                    "(its job record is under _temporary)")
        if path in self.files:
            return f"job {self.files[path]}, which has not committed, replaces it at its commit"
        return None


def _staging_owner(name: str) -> str:
    return next(owner for prefix, owner in _STAGING_OWNERS.items() if name.startswith(prefix))


def _our_debris(store: Store, job_dir: str) -> bool:
    """Whether a job directory without a job record is this provider's (a committed job's records being deleted,
    a purged generation's zombie leftovers): it holds application attempts with their ``_app.json``."""
    return any(n.isdigit() and store.exists(f"{job_dir}/{n}/_app.json") for n in store.list_dir(job_dir))


def _scan_in_flight(store: Store, visible: Iterable[str]) -> _InFlight:
    found = _InFlight()
    for name, job in job_dirs(store).items():
        if job is not None:
            found.uuids[job.job_uuid] = name
            found.files.update((f, name) for f in job.replace_files)
        elif not _our_debris(store, JobLayout(name).job_dir):
            found.dirs.setdefault("", f"{TEMPORARY}/{name} is not this provider's: a Hadoop or Spark job that has "
                                      "not committed may be writing into this root (with algorithm 2 its task "
                                      "commits are visible)")
    # every directory that holds (or is above) a visible file, listed: a staging directory may be empty yet
    dirs = {""}
    for path in visible:
        head = partition_of(path)
        while head not in dirs:
            dirs.add(head)
            head = partition_of(head)
    for d in sorted(dirs):
        for name in store.list_dir(d):
            if is_foreign_staging(name) and not (d == "" and name == TEMPORARY):
                found.dirs.setdefault(d, f"{join(d, name)} is {_staging_owner(name)}'s work in progress: a job "
                                         "that has not committed may be writing there")
    return found


def _committed_logs(store: Store) -> dict[str, tuple[str, CommitLog]]:
    """job uuid -> (job id, commit log) of every job this provider committed into the root."""
    logs = {}
    for job in commit_log_jobs(store.list_dir(COMMITS)):
        log = CommitLog.read(store, f"{COMMITS}/{job}.json")
        if log is not None:
            logs[log.job_uuid] = (job, log)
    return logs


def same_content(store: Store, a: str, b: str) -> str | None:
    """How *a* and *b* are proven to hold the same data -- identical bytes, or (Parquet) the same rows in any
    order -- or ``None`` when they are not."""
    da, db = store.read_bytes(a), store.read_bytes(b)
    if da == db:
        return "identical bytes"
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        ta, tb = pq.read_table(io.BytesIO(da)), pq.read_table(io.BytesIO(db))
    except (pa.ArrowException, OSError):
        return None  # not Parquet: only identical bytes prove it
    if not ta.schema.equals(tb.schema) or ta.num_rows != tb.num_rows:
        return None
    try:
        keys = [(name, "ascending") for name in ta.column_names]
        ta, tb = ta.sort_by(keys), tb.sort_by(keys)
    except pa.ArrowException:
        pass  # a column type without an order: compare in the files' order
    return "the same rows (Parquet)" if ta.equals(tb) else None


def _hive_named(path: str) -> bool:
    info = parse_task_file(path.rpartition("/")[2])
    return info is not None and info.writer == HIVE


class _Planner:
    """The decisions of one plan, made from one listing of the root."""

    def __init__(self, store: Store, single_job_dirs: bool) -> None:
        self.store = store
        self.single_job_dirs = single_job_dirs
        listing = store.list_files("")
        self.visible = {p: s for p, s in listing if not is_hidden(p)}
        self.marker_dirs = {partition_of(p) for p, _ in listing
                            if p.rpartition("/")[2] == SUCCESS and not is_hidden(partition_of(p))}
        self.in_flight = _scan_in_flight(store, self.visible)
        self.logs = _committed_logs(store)
        self.deletions: list[Deletion] = []
        self.undecided: list[Undecided] = []
        self.left_alone: list[LeftAlone] = [LeftAlone(d, why) for d, why in sorted(self.in_flight.dirs.items())]
        self.seen: dict[str, int] = defaultdict(int)

    def plan(self) -> DedupPlan:
        ours: dict[str, list[tuple[str, TaskFile]]] = defaultdict(list)
        spark: dict[tuple[str, str], list[tuple[str, TaskFile]]] = defaultdict(list)
        hive: dict[str, list[tuple[str, TaskFile]]] = defaultdict(list)
        for path in sorted(self.visible):
            info = parse_task_file(path.rpartition("/")[2])
            ours_uuid = info is not None and (info.job_uuid in self.logs or info.job_uuid in self.in_flight.uuids)
            writer = "unrecognised" if info is None else OURS if ours_uuid else info.writer
            self.seen[writer] += 1
            if self.in_flight.under_staging(path):
                continue  # its directory is reported once
            why = self.in_flight.why(path, info)
            if why is not None:
                self.left_alone.append(LeftAlone(path, why))
                continue
            if info is None or info.writer == HADOOP:
                continue  # Hadoop's names: attempts share one name, and a copy of it is another job's
            if info.job_uuid in self.logs:
                ours[info.job_uuid or ""].append((path, info))
            elif info.writer == SPARK:
                spark[(partition_of(path), info.original)].append((path, info))
            elif info.writer == HIVE:
                hive[partition_of(path)].append((path, info))
        for job_uuid, files in sorted(ours.items()):
            self._by_commit_log(job_uuid, files)
        for (_, original), files in sorted(spark.items()):
            if len(files) > 1:
                self._spark_copies(original, files)
        for directory, files in sorted(hive.items()):
            self._hive_attempts(directory, files)
        withdraw = tuple(sorted(marker_dirs_above(d.path for d in self.deletions))) if self.deletions else ()
        markers = {d: self.store.read_bytes(join(d, SUCCESS)) for d in withdraw if d in self.marker_dirs}
        return DedupPlan(str(uuid.uuid4()), records.now_iso(), self.store.url(), self.single_job_dirs,
                         tuple(self.deletions), tuple(self.undecided), tuple(self.left_alone), withdraw, markers,
                         dict(sorted(self.seen.items())))

    def _keep(self, paths: Iterable[str]) -> tuple[tuple[str, int], ...]:
        return tuple((p, self.visible[p]) for p in sorted(paths))

    def _by_commit_log(self, job_uuid: str, files: list[tuple[str, TaskFile]]) -> None:
        """This provider's files: the commit log decides which file of each task is the committed one."""
        job_id, log = self.logs[job_uuid]
        listed = {f["path"]: f["size"] for f in log.files}
        by_task: dict[int, list[str]] = defaultdict(list)
        for f in log.files:
            by_task[f["task"]].append(f["path"])
        tasks = {t["task"] for t in log.manifest["tasks"]}
        where = f"{COMMITS}/{job_id}.json"
        for path, info in files:
            if path in listed:
                continue
            if info.task not in tasks:
                self.undecided.append(Undecided(OURS, (path,), (
                    f"job {job_id} (uuid {job_uuid}) committed no task {info.task} ({where}): this file is no "
                    "second copy of a committed task's output")))
                continue
            committed = by_task.get(info.task, [])
            changed = [p for p in committed if self.visible.get(p) != listed[p]]
            if changed:
                self.undecided.append(Undecided(OURS, (path, *committed), (
                    f"task {info.task}'s committed file(s) {changed} ({where}) are missing or changed: this "
                    "unlisted file may hold the only copy of its rows")))
                continue
            self.deletions.append(Deletion(path, self.visible[path], OURS, self._keep(committed), (
                f"job {job_id} (uuid {job_uuid}) committed task {info.task} with the {len(committed)} file(s) "
                f"{where} lists; this file of the same task is not one of them (an attempt the commit did not "
                f"choose{', or a copy' if info.copies else ''})")))

    def _spark_copies(self, original: str, files: list[tuple[str, TaskFile]]) -> None:
        """One Spark file (job uuid, task, file number) under its own name and copy names."""
        files = sorted(files, key=lambda f: (f[1].copies != (), f[1].copies, f[0]))
        keeper, info = files[0]
        for path, other in files[1:]:
            proof = same_content(self.store, keeper, path)
            names = (f"task {info.task}'s file {original} of Spark job {info.job_uuid} under a copy name "
                     f"({path.rpartition('/')[2]})")
            if proof is None:
                self.undecided.append(Undecided(SPARK, (keeper, path), (
                    f"{names}, but its content differs from {keeper}: which one the job committed is unknown")))
            else:
                self.deletions.append(Deletion(path, self.visible[path], SPARK, self._keep([keeper]),
                                               f"{names}: {proof} as {keeper}"))

    def _hive_attempts(self, directory: str, files: list[tuple[str, TaskFile]]) -> None:
        """Hive files of one directory: attempts of one task are duplicates only in a directory one job wrote."""
        groups: dict[tuple[int, str], list[tuple[str, TaskFile]]] = defaultdict(list)
        for path, info in files:
            if not info.copies:
                groups[(info.task, info.original.partition(".")[2])].append((path, info))
        # a copy name is Hive's for a second job's file; a name Hive does not write is another writer's
        others = sorted(path for path, info in files if info.copies) + sorted(
            p for p in self.visible if partition_of(p) == directory and not _hive_named(p))
        name = directory.rpartition("/")[2]
        if is_hive_transaction_dir(name):
            evidence: str | None = f"{name} is a Hive transaction directory (AcidUtils): one job writes it"
        elif self.single_job_dirs:
            evidence = "single_job_dirs=True: the caller states that one job wrote each directory"
        else:
            evidence = None
        for (task, _), group in sorted(groups.items()):
            if len(group) < 2:
                continue
            group.sort(key=lambda f: f[1].attempt or 0)
            paths = tuple(p for p, _ in group)
            if evidence is None:
                self.undecided.append(Undecided(HIVE, paths, (
                    f"Hive names do not name their job: attempts {[i.attempt for _, i in group]} of task {task} "
                    f"in {directory or 'the root'} are two attempts of one job or the output of different jobs "
                    "(an INSERT INTO whose first attempt failed writes 000000_1 next to an earlier 000000_0); "
                    "single_job_dirs=True states that one job wrote each directory")))
                continue
            if others:
                self.undecided.append(Undecided(HIVE, paths, (
                    f"{others[0]} is there: Hive names a file _copy_<n> when another job moves it in and writes no "
                    f"other names than <task>_<attempt>, so more than one job wrote {directory or 'the root'}")))
                continue
            keeper, first = group[0]
            for path, info in group[1:]:
                proof = same_content(self.store, keeper, path)
                if proof is None:
                    self.undecided.append(Undecided(HIVE, (keeper, path), (
                        f"attempts {first.attempt} and {info.attempt} of Hive task {task} differ: which one the job "
                        "committed is not recorded")))
                else:
                    self.deletions.append(Deletion(path, self.visible[path], HIVE, self._keep([keeper]), (
                        f"attempt {info.attempt} of Hive task {task}, whose attempt {first.attempt} wrote {keeper}, "
                        f"in a directory one job wrote ({evidence}): {proof}")))


def find_duplicates(store: Store, *, single_job_dirs: bool = False) -> DedupPlan:
    """The dry run: the plan :func:`remove_duplicates` would carry out, changing nothing.

    When an earlier deduplication of the root created its plan and did not finish, that plan (``pending``) is what
    the next apply finishes, so that is what this returns. *single_job_dirs*: the caller states that one job wrote
    each directory holding Hive-named files (see the module docstring). :class:`OwnedByTable` when the root is,
    lies inside or holds a Delta or Iceberg table (:mod:`..tables.ownership`): its log, not file names, says which
    files are its data.
    """
    refuse_table(store, "deduplication")
    pending = stored_plan(store)
    if pending is not None:
        return pending
    return _Planner(store, single_job_dirs).plan()


def remove_duplicates(store: Store, plan: DedupPlan | None = None, *,
                      single_job_dirs: bool = False) -> dict[str, Any]:
    """Carry out *plan* (made now by :func:`find_duplicates` when not given) as a job of the protocol, or finish
    the unfinished plan of an earlier run; returns the plan's report with what was applied (``applied``).

    :class:`DedupInProgress` when another deduplication's plan is unfinished and *plan* is not it (the dry run
    shows the unfinished one: apply that); :class:`OwnedByTable` as :func:`find_duplicates` raises it, before the
    plan's record is created or a marker withdrawn.
    """
    refuse_table(store, "deduplication")
    pending = stored_plan(store)
    if plan is None:
        plan = pending or _Planner(store, single_job_dirs).plan()
    if pending is not None and pending.plan_id != plan.plan_id:
        raise DedupInProgress(
            f"deduplication plan {pending.plan_id} of {store.url()} (created {pending.created}) is unfinished; "
            f"it must be finished before plan {plan.plan_id} runs: find_duplicates() returns it, remove_duplicates() "
            "finishes it")
    return run_plan(store, plan)


def summary_lines(plan: DedupPlan | Mapping[str, Any]) -> list[str]:
    """One line per decision of a plan (or its report), for logs."""
    doc = plan.to_doc() if isinstance(plan, DedupPlan) else plan
    lines = [f"delete {d['path']} ({d['writer']}; keep {[k['path'] for k in d['keep']]}): {d['proof']}"
             for d in doc["delete"]]
    lines += [f"undecided {u['files']} ({u['writer']}): {u['why']}" for u in doc["undecided"]]
    lines += [f"left alone {a['path'] or 'the whole root'}: {a['why']}" for a in doc["left_alone"]]
    return lines


__all__ = ["find_duplicates", "remove_duplicates", "same_content", "summary_lines"]
