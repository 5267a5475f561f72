"""v2's publisher: each task commit moves its files into the output; job commit only checks they are there."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..errors import CorruptRecord
from ..faults import mid_delete
from ..records.success import marker_dirs_above, withdraw_markers
from ..records.task import TaskCommitRecord
from ..stores.helpers import delete_and_prune, missing
from .base import Publisher, complete_moves


class TaskCommitPublisher(Publisher):
    """v2: each task commit moves its files straight to their final names; job commit only checks they are there.
    Faster, not atomic: a failed job's committed tasks were visible (its abort removes them)."""

    algorithm = 2
    label = "v2"
    visibility = "task-commit"
    keeps_committed = False
    moves_after_record = True
    flat_attempts = True

    def data_dir(self, app: int, work_dir: str) -> str:
        return ""

    def complete_task_commit(self, rec: TaskCommitRecord) -> None:
        if rec.adopted:
            return
        complete_moves(self.store, self.job_id, rec, "", replace=True)

    def clobbered(self, paths: Sequence[str]) -> list[str]:
        # a visible file of that name belongs to another job (a user-chosen name), or to the winner of this task
        # when a zombie asks: moving over it would lose its rows (the v1 plan refuses the same at job commit)
        return sorted(set(paths) - set(missing(self.store, list(paths))))

    def publish(self, recs: Sequence[TaskCommitRecord]) -> int:
        gone = missing(self.store, [f.path for rec in recs for f in rec.files])
        if gone:
            raise CorruptRecord(f"job {self.job_id}: committed v2 file(s) missing from the output: {gone[:5]}")
        return 0

    def strays(self, visible: set[str], planned: set[str], job_uuid: str) -> set[str]:
        # a zombie's late task commit after the teardown, or a v2 abort that died between a record and its files
        return {p for p in visible - planned if job_uuid in p.rsplit("/", 1)[-1]}

    def withdraw_commit(self, rec: TaskCommitRecord, keep: Collection[str] = ()) -> list[str]:
        """The record is gone already (see the abort): remove the visible files, the markers above them first."""
        paths = [f.path for f in rec.files if f.path not in keep]
        present = sorted(set(paths) - set(missing(self.store, paths)))
        if present:   # no visible file goes (an empty task, a commit that died before its moves): no marker lies
            withdraw_markers(self.store, marker_dirs_above(present))
        delete_and_prune(self.store, present, self.threads, mid_delete)
        self.store.delete_tree(rec.work_dir)
        return present


