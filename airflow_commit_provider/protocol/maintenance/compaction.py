"""Small-file compaction done through the commit protocol: the Hive merge job, minus its duplicates and its losses.

A compaction is a job of the protocol (v1, mode ``append``) whose tasks merge groups of small Parquet files of one
partition and whose job commit deletes the inputs and publishes the merged files. A run goes through:

1. **Plan** (first application attempt of a generation only): the visible Parquet files smaller than the target
   size, except those of jobs still under way and of a task output present twice (:func:`candidate_files`),
   packed per partition into groups. The
   job record names every input with its size and version (``replace_files``, :mod:`.inputs`).
2. **Claim** every input (:mod:`.claims`): a compaction that finds one held by another live compaction refuses.
3. **Fix the groups** in the compaction plan (:class:`CompactionPlan`, created exclusively): task *i* merges
   group *i* in every later application attempt, retry and recovery, and nothing recomputes them. Recovery adopts
   an earlier attempt's merge by task number, so a task must stand for the same group for the whole generation.
4. **Merge**: each group is a task attempt; only the attempt that wins the task commit counts (no Hive
   ``000005_0`` / ``000005_1``).
5. **Job commit**: refuses, before anything visible changes, if an input is gone or changed since the plan;
   else withdraws the markers, deletes the inputs, *then* moves the merged files in (``replace_first``: they
   hold the same rows, so this order means a reader never sees a row twice), then writes the markers: the
   root's, and each partition's it withdrew (the commit plan names those that existed), unless another job of
   this provider is changing that partition (:class:`~..jobcommit.stages.WriteMarkers`).
6. **Release** the claims.

A refusal (at 2; because an input changed: at 2, 4 or 5; or because the files of a group do not merge, at 4)
aborts the generation (its merged files were never visible) and releases its claims, then raises
:class:`InputsClaimed`, :class:`InputsChanged` or :class:`InvalidOutputSpec` naming the input:
the output is as it was, and the next run plans afresh over what is there then. A crash at any step is finished
by running the compaction again (the same job id): before its commit plan it continues with the fixed groups
(merges already committed are recovered), after it the commit rolls forward.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import records
from ..committer import FileOutputCommitter
from ..errors import CorruptRecord, InputsChanged, InputsClaimed, InvalidOutputSpec
from ..faults import inject
from ..layout import TEMPORARY, JobLayout, check_job_id
from ..paths import is_hidden, partition_of
from ..records.claims import InputClaims, sweep
from ..records.inputs import changed_inputs, check_unchanged
from ..records.job import InputFile, JobRecord
from ..records.merged import merged_metadata
from ..runner import TaskOutcome, run_task_attempt
from ..stores import Store
from ..tables.ownership import refuse_table
from ..tasks.writer import TaskAttemptWriter
from .dedup import find_duplicates


def pack_groups(files: Mapping[str, int], target_size: int) -> list[list[str]]:
    """Per partition, consecutive files (in name order) packed into groups of at most *target_size* bytes (a larger
    file is a group of its own): every file in exactly one group."""
    by_part: dict[str, list[str]] = defaultdict(list)
    for rel in sorted(files):
        by_part[partition_of(rel)].append(rel)
    groups: list[list[str]] = []
    for part in sorted(by_part):
        current: list[str] = []
        size = 0
        for rel in by_part[part]:
            if current and size + files[rel] > target_size:
                groups.append(current)
                current, size = [], 0
            current.append(rel)
            size += files[rel]
        groups.append(current)
    return groups


def plan_groups(files: Mapping[str, int], target_size: int) -> list[list[str]]:
    """The files smaller than *target_size*, packed by :func:`pack_groups`; groups of one file are left out
    (rewriting a file alone merges nothing)."""
    small = {rel: size for rel, size in files.items() if size < target_size}
    return [g for g in pack_groups(small, target_size) if len(g) >= 2]


def small_parquet_files(store: Store) -> dict[str, int]:
    """Every visible Parquet file and its size."""
    return {rel: size for rel, size in store.list_files("", visible_only=True) if rel.endswith(".parquet")}


def candidate_files(store: Store) -> dict[str, int]:
    """The visible Parquet files a compaction may merge: all but those of jobs still under way on the target, and
    those of a task output present twice (:func:`duplicate_copies`).

    A job with a job record has not finished: its job commit may be publishing (and will list its files in its
    ``_SUCCESS``, or resume moving them), or, with v2, its committed tasks' files are visible before its job
    commit. Their names carry the job's uuid (this provider's and Spark's file names do), and the files of the
    generation it replaces are in its record. The job records are read *after* the listing, so a job whose files
    the listing saw was still under way then, or had finished (its files are settled). Files a job under way wrote
    with names of its own choosing cannot be told apart (see the README's maintenance section).
    """
    files = small_parquet_files(store)
    busy: set[str] = set()
    replaced: set[str] = set()
    for job in running_jobs(store):
        busy.add(job.job_uuid)
        replaced |= job.replaced_files
    replaced |= duplicate_copies(store)
    return {rel: size for rel, size in files.items()
            if rel not in replaced and not any(u in rel.rsplit("/", 1)[-1] for u in busy)}


def duplicate_copies(store: Store) -> set[str]:
    """The files in which deduplication finds one task's output twice, or may (:func:`~.dedup.find_duplicates`,
    the dry run, or the plan of a deduplication under way): each copy it would delete, the files it keeps for it,
    and those it cannot decide on. A compaction leaves them where they are: merged, a second copy's rows would
    sit in a file whose name tells nothing, where deduplication, which proves a copy by its name and its bytes,
    could never find them, and the table would hold them twice for good."""
    plan = find_duplicates(store)
    out = {d.path for d in plan.deletions} | {path for d in plan.deletions for path, _ in d.keep}
    return out | {path for u in plan.undecided for path in u.files}


def running_jobs(store: Store) -> list[JobRecord]:
    """The job records under ``_temporary`` (jobs set up and not yet committed and cleaned up, or aborted)."""
    jobs = []
    for name in sorted(store.list_dir(TEMPORARY)):
        if is_hidden(name):
            continue
        try:
            check_job_id(name)
        except InvalidOutputSpec:
            continue
        job = JobRecord.read(store, JobLayout(name).job_record)
        if job is not None:
            jobs.append(job)
    return jobs


@dataclass(frozen=True)
class CompactionPlan:
    """A compaction generation's merge tasks: task *i* merges ``groups[i]`` (each input with the size and version
    its job record holds). Created once, exclusively, by the first application attempt that gets there."""

    KIND = "compaction-plan"

    job_uuid: str
    target_size: int
    groups: tuple[tuple[InputFile, ...], ...]

    @property
    def inputs(self) -> list[str]:
        return [f.path for g in self.groups for f in g]

    def to_json(self) -> bytes:
        return records.dumps(self.KIND, {"job_uuid": self.job_uuid, "target_size": self.target_size,
                                         "groups": [[f.to_doc() for f in g] for g in self.groups]})

    @classmethod
    def from_json(cls, data: bytes, where: str) -> CompactionPlan:
        doc = records.loads(cls.KIND, data, where)
        groups = []
        for i, group in enumerate(records.get_field(doc, "groups", list, where, cls.KIND)):
            if not isinstance(group, list) or not group:
                raise CorruptRecord(f"{where}: field groups[{i}] is not a list of input files; the compaction plan "
                                    "is corrupt")
            entries = []
            for j, f in enumerate(group):
                if not isinstance(f, dict):
                    raise CorruptRecord(f"{where}: field groups[{i}][{j}] is not an object; the compaction plan is "
                                        "corrupt")
                prefix = f"groups[{i}][{j}]."
                entries.append(InputFile(records.get_field(f, "path", str, where, cls.KIND, prefix),
                                         records.get_field(f, "size", int, where, cls.KIND, prefix),
                                         records.get_field(f, "version", str, where, cls.KIND, prefix)))
            groups.append(tuple(entries))
        return cls(records.get_field(doc, "job_uuid", str, where, cls.KIND),
                   records.get_field(doc, "target_size", int, where, cls.KIND), tuple(groups))

    @classmethod
    def read(cls, store: Store, rel: str) -> CompactionPlan | None:
        return records.read(store, rel, cls.KIND, cls.from_json)


def fix_plan(c: FileOutputCommitter, job: JobRecord, groups: Sequence[Sequence[str]] | None,
             target_size: int) -> CompactionPlan:
    """The generation's merge groups: the stored plan, or *groups* (this attempt planned the job) fixed now.

    The plan must split the job record's inputs exactly (the job commit deletes all of them): when this attempt
    did not plan them (a crash between the job record and the plan, or a concurrent setup that won the job
    record), the inputs of the record are packed."""
    where = c.layout.compaction_plan(job.job_uuid)
    plan = CompactionPlan.read(c.store, where)
    if plan is None:
        inputs = {f.path: f for f in job.replace_inputs}
        if groups is None or [p for g in groups for p in g] != list(job.replace_files):
            groups = pack_groups({p: f.size for p, f in inputs.items()}, target_size)
        plan = CompactionPlan(job.job_uuid, target_size, tuple(tuple(inputs[p] for p in g) for g in groups))
        if not c.store.create_exclusive(where, plan.to_json()):
            plan = CompactionPlan.read(c.store, where)
            assert plan is not None, f"{c.store.url(where)} vanished"
    if plan.job_uuid != job.job_uuid or sorted(plan.inputs) != sorted(job.replace_files):
        raise CorruptRecord(f"{c.store.url(where)} does not split the inputs of job {c.job_id} (generation "
                            f"{job.job_uuid}); the compaction plan is corrupt")
    return plan


def merge_group(writer: TaskAttemptWriter, group: Sequence[str], store: Store) -> None:
    """Write the rows of *group* (one partition) as one Parquet file of the attempt, in the first file's schema;
    :class:`InvalidOutputSpec` naming two files whose schemas do not merge (other columns, or types that do not
    cast), before anything is written."""
    part = partition_of(group[0])
    tables = [pq.read_table(io.BytesIO(store.read_bytes(rel))) for rel in group]
    schema = tables[0].schema
    cast = []
    for rel, table in zip(group, tables):
        try:
            cast.append(table.cast(schema))
        except (pa.ArrowException, ValueError) as exc:
            shown = [s.to_string(show_schema_metadata=False).replace("\n", ", ") for s in (table.schema, schema)]
            raise InvalidOutputSpec(f"cannot merge {store.url(rel)} ({shown[0]}) into the schema of "
                                    f"{store.url(group[0])} ({shown[1]}): {exc}; nothing was changed") from exc
    name = writer.next_file_name("snappy.parquet")
    # the footer names the data files whose rows it holds: a job replacing them finds them here (:mod:`.provenance`)
    schema = schema.with_metadata({**(schema.metadata or {}), **merged_metadata(
        writer.attempt.job_uuid, ((rel, t.schema.metadata) for rel, t in zip(group, tables)))})
    with writer.open_file(f"{part}/{name}" if part else name) as fh:
        with pq.ParquetWriter(fh, schema, compression="snappy") as pw:
            for table in cast:
                pw.write_table(table)


def compact(committer: FileOutputCommitter, attempt: int, target_size: int = 128 * 2**20) -> dict[str, Any]:
    """Run (or resume) a compaction job; *attempt* numbers this run's task attempts (an Airflow try number).

    Returns the ``_SUCCESS`` manifest with ``groups``, ``inputs`` and ``recovered`` (``state`` is
    ``nothing_to_compact``, with no job set up, when no partition has two small files); raises
    :class:`InputsClaimed` or :class:`InputsChanged` when it refused (see the module docstring), having changed
    nothing visible; :class:`OwnedByTable`, having changed nothing at all, when the target is, lies inside or holds
    a Delta or Iceberg table (:mod:`..tables.ownership`)."""
    c = committer
    refuse_table(c.store, "compaction")   # a table's files are the table's to merge: before any claim or sweep
    job, log = c.job_record(), c.commit_log()
    groups: list[list[str]] | None = None
    if job is None:
        sweep(c.store)   # the claims of compactions that ended (this one's, when a crash skipped its release)
        if log is not None:  # a retry after the commit: nothing to redo but a cleanup a crash cut short
            c.remove_trash()
            return {"state": "committed", **log.to_doc()}
        groups = plan_groups(candidate_files(c.store), target_size)
        if not groups:   # no job: a commit would withdraw and rewrite the markers for nothing
            return {"state": "nothing_to_compact", "groups": 0, "inputs": 0, "recovered": 0}
        ctx = c.setup_job(replace_files=[f for g in groups for f in g], replace_first=True)
    else:
        ctx = c.setup_job()
    job = c.job.require_job()
    if not job.replace_first:
        raise InvalidOutputSpec(f"job {c.job_id} at {c.store.url()} was set up by another kind of job, not a "
                                "compaction; use a job id of its own")
    claims = InputClaims(c.store, job)
    if ctx.state == "committing":   # a commit that fixed its plan: only rolling forward is safe
        manifest = c.commit_job()
        release(c, claims, job)
        return {"state": "committed", "groups": manifest["totals"]["tasks"], "inputs": len(job.replace_files),
                "recovered": manifest["totals"]["tasks"], **manifest}
    try:
        if job.replace_files and not job.replace_inputs:
            raise InputsChanged(f"compaction job {c.job_id} was set up by a release that did not record its "
                                "inputs' sizes and versions, so its commit could not check them", [])
        claims.claim_all(job.replace_files)
        check_unchanged(c.store, job)
    except (InputsClaimed, InputsChanged):
        refuse(c, claims, job)
        raise
    plan = fix_plan(c, job, groups, target_size)
    inject("compact.after_plan")
    try:
        outcomes: list[TaskOutcome] = [
            run_task_attempt(c, task, attempt, lambda w, g=[f.path for f in group]: merge_group(w, g, c.store))
            for task, group in enumerate(plan.groups)]
    except InvalidOutputSpec:   # inputs that cannot be merged: a retry would fail the same way
        refuse(c, claims, job)
        raise
    except Exception:
        if changed_inputs(c.store, job.replace_inputs):  # an input went (or changed) under a merge
            refuse(c, claims, job)
            check_unchanged(c.store, job)
        raise
    try:
        manifest = c.commit_job(len(plan.groups))
    except InputsChanged:   # raised before the commit plan: nothing visible changed
        refuse(c, claims, job)
        raise
    release(c, claims, job)
    return {"state": "committed", "groups": len(plan.groups), "inputs": len(job.replace_files),
            "recovered": sum(o.status != "committed" for o in outcomes), **manifest}


def release(c: FileOutputCommitter, claims: InputClaims, job: JobRecord) -> None:
    """After the commit: the inputs are deleted, so their claims are released and their chains swept."""
    inject("compact.before_release")
    claims.release_all(job.replace_files)
    sweep(c.store)


def refuse(c: FileOutputCommitter, claims: InputClaims, job: JobRecord) -> None:
    """End a generation that cannot go on: abort it (purge: its merged files were never visible) and release its
    claims. A concurrent process of the job that already fixed its commit plan keeps both (it rolls forward)."""
    state = c.abort_job()["state"]
    if state in ("aborted", "absent"):
        claims.release_all(job.replace_files)
