"""Job commit into a table (:mod:`..tables`): the schema check before the plan, and the one transaction.

For a table target the plan deletes nothing at file level (old files stay for the snapshots that list them; the
transaction removes them from the current one), the moves put the files at their final names under the table's
data root (invisible to table readers until a snapshot lists them), and :class:`TableCommitStage` runs after them:
the visibility point. A resumed commit whose generation the table already holds adds nothing; a zombie of an older
generation is refused there (:class:`~..tables.GenerationSuperseded`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..job import Job
from ..records.job import JobRecord
from ..records.task import TaskCommitRecord
from ..schemas import SchemaGroup, compared, file_path, refuse, without_reference
from ..tables.common import DataFile, JobTag, SchemaMismatch, TableCommit, describe_difference, parquet_schema
from . import names
from .stage import Plan, Stage


def data_files(scope: Job, recs: Iterable[TaskCommitRecord]) -> list[DataFile]:
    """The job's files as a table commit adds them (with their partition values)."""
    return [DataFile.from_entry(f.path, f.size, f.rows, scope.config.partition_by) for rec in recs for f in rec.files]


def check_table(scope: Job, job: JobRecord, recs: Iterable[TaskCommitRecord]) -> None:
    """Before the plan is fixed (so a refusal changes nothing): the table's partitioning is the job's, one schema
    among the job's files (their footers, where the task commits left them) and the table's, and, in mode
    ``error``, a table holding nothing but the job's earlier generation (which the transaction removes).

    A schema refusal is for good (the same files fail the same way on every try), so the tasks whose files it
    refuses are recorded (:meth:`~..job.Job.refuse_tasks`): the next application attempt runs them again instead
    of recovering them. Which tasks: those whose files the table's schema refuses; with no table yet, those whose
    schema differs from the one of the tasks committed in this application attempt (the code of now), or every
    task when these disagree too (or none ran now)."""
    assert scope.table is not None
    try:
        scope.table.check_partitioning(scope.config.partition_by)
    except SchemaMismatch as exc:
        raise SchemaMismatch(f"{exc}. Give the stage the table's partitioning (or another table): after this "
                             "failed run's teardown, a clear of the whole DAG run (the stage's setup included) "
                             "starts the job over with it, every task run again") from exc
    refused, error = refused_groups(scope, schema_groups(scope, recs))
    if error is not None:
        refuse(scope, job, refused, error, "so fix the code (or the table's schema) first")
    if scope.mode.claims_target:
        scope.table.check_empty(job.replaced_files)


def schema_groups(scope: Job, recs: Iterable[TaskCommitRecord]) -> list[SchemaGroup]:
    """The distinct schemas of the job's files (their footers), each with the task records that have it."""
    groups: list[SchemaGroup] = []
    for rec in recs:
        for f in rec.files:
            path = file_path(rec, f.path)
            schema = parquet_schema(scope.store, path)
            group = next((g for g in groups if g.schema.equals(schema)), None)
            if group is None:
                group = SchemaGroup(schema, path)
                groups.append(group)
            group.recs[rec.task] = rec
    return groups


def refused_groups(scope: Job, groups: Sequence[SchemaGroup]) -> tuple[list[SchemaGroup], SchemaMismatch | None]:
    """The groups whose files the commit refuses, and the first refusal's error (``None``: none refused; see
    :func:`check_table`)."""
    assert scope.table is not None
    if not groups:
        return [], None
    if scope.table.exists():
        refused, first = [], None
        for g in groups:
            try:
                scope.table.check_schema(g.schema)
            except SchemaMismatch as exc:
                refused.append(g)
                first = first or exc
        return refused, first
    refused = without_reference(groups)
    if not refused:
        return [], None
    ref, other = compared(groups, refused)
    return refused, SchemaMismatch(f"files {ref.path} and {other.path} of one job have different schemas: "
                                   f"{describe_difference(ref.schema, other.schema)}")


class TableCommitStage(Stage[Plan, "TableCommit | None"]):
    """The table's one transaction: the planned files added, the files the mode and the job's earlier generation
    replace removed, tagged with the job's id, uuid and generation."""

    name = names.TABLE_COMMIT
    fault = "table_commit.after"

    def apply(self, plan: Plan) -> TableCommit | None:
        scope, job = self.scope, self.run.job
        table = scope.table
        assert table is not None
        files = data_files(scope, plan.recs)
        if not files and ((not job.replaced_files and scope.mode.name == "append") or not table.exists()):
            return None   # nothing to add or replace: no empty transaction
        tag = JobTag(scope.job_id, job.job_uuid, job.generation)
        # a resumed commit's transaction may have landed, and the history may have forgotten it since: its files
        # are looked up then (a scan of the current version), never on a first try, which cannot have landed
        done = table.committed(tag, files if self.run.resumed else ())
        if done is None:
            schema = parquet_schema(scope.store, files[0].path) if files else None   # one schema: checked at the plan
            done = table.commit(tag, files, schema, scope.mode.name, scope.config.partition_by, job.replaced_files)
        self.run.table_commit = done
        return done

    def counts(self, out: TableCommit | None) -> dict[str, int]:
        if out is None:
            return {}
        return {"version" if out.format == "delta" else "snapshot": out.version, "added": out.added,
                "removed": out.removed}
