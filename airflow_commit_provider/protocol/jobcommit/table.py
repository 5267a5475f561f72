"""Job commit into a table (:mod:`..tables`): the schema check before the plan, and the one transaction.

For a table target the plan deletes nothing at file level (old files stay for the snapshots that list them; the
transaction removes them from the current one), the moves put the files at their final names under the table's
data root (invisible to table readers until a snapshot lists them), and :class:`TableCommitStage` runs after them:
the visibility point. A resumed commit whose generation the table already holds adds nothing; a zombie of an older
generation is refused there (:class:`~..tables.GenerationSuperseded`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..job import Job
from ..records.task import TaskCommitRecord
from ..tables.common import DataFile, JobTag, TableCommit, file_schema, parquet_schema
from .stage import Plan, Stage


def data_files(scope: Job, recs: Iterable[TaskCommitRecord]) -> list[DataFile]:
    """The job's files as a table commit adds them (with their partition values)."""
    return [DataFile.from_entry(f.path, f.size, f.rows, scope.config.partition_by) for rec in recs for f in rec.files]


def check_table(scope: Job, recs: Iterable[TaskCommitRecord], replaced: Collection[str]) -> None:
    """Before the plan is fixed (so a refusal changes nothing): one schema among the job's files (their footers,
    where the task commits left them) and the table's, and, in mode ``error``, a table holding nothing but the
    job's earlier generation (*replaced*, which the transaction removes)."""
    assert scope.table is not None
    sources = [f"{rec.data_dir}/{f.path}" if rec.data_dir else f.path for rec in recs for f in rec.files]
    if sources:
        scope.table.check_schema(file_schema(scope.store, sources))
    if scope.mode.claims_target:
        scope.table.check_empty(replaced)


class TableCommitStage(Stage[Plan, "TableCommit | None"]):
    """The table's one transaction: the planned files added, the files the mode and the job's earlier generation
    replace removed, tagged with the job's id, uuid and generation."""

    name = "table_commit"
    fault = "table_commit.after"

    def apply(self, plan: Plan) -> TableCommit | None:
        scope, job = self.scope, self.run.job
        table = scope.table
        assert table is not None
        files = data_files(scope, plan.recs)
        if not files and ((not job.replaced_files and scope.mode.name == "append") or not table.exists()):
            return None   # nothing to add or replace: no empty transaction
        tag = JobTag(scope.job_id, job.job_uuid, job.generation)
        done = table.committed(tag)
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
