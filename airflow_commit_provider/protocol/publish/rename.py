"""v1's publishers: task output hidden until job commit, then renamed (local disk) or moved (object stores)."""

from __future__ import annotations

from collections.abc import Sequence

from ..faults import inject
from ..paths import partition_of
from ..records.task import TaskCommitRecord
from .base import Publisher, complete_moves


class MovePublisher(Publisher):
    """v1 where a move copies bytes or cannot refuse to replace (object stores, other fsspec file systems): the
    task commit record alone commits, the data stays in the attempt directory, job commit moves it once."""


class RenamePublisher(Publisher):
    """v1 on a local disk: task commit moves the winner's files into the application attempt's ``_committed``
    directory with moves that refuse to replace; job commit renames whole directories where it can."""

    moves_after_record = True
    flat_attempts = True

    def data_dir(self, app: int, work_dir: str) -> str:
        return self.layout.committed_dir(app)

    def complete_task_commit(self, rec: TaskCommitRecord) -> None:
        if rec.adopted:
            return
        complete_moves(self.store, self.job_id, rec, rec.data_dir, replace=False)

    def publish(self, recs: Sequence[TaskCommitRecord]) -> int:
        moves = [(f"{rec.data_dir}/{f.path}", f.path, f.size) for rec in recs for f in rec.files]
        renamed = self._publish_directories(recs)
        if renamed:
            moves = [m for m in moves if not m[0].startswith(renamed)]
        self._publish_files(moves)
        return len(renamed)

    def _publish_directories(self, recs: Sequence[TaskCommitRecord]) -> tuple[str, ...]:
        """Rename whole directories of committed files whose destination does not exist yet.

        A new partition then appears in one rename, however many files and tasks it holds (Hadoop's mergePaths
        renames a task's directory when its destination is missing; here one ``_committed`` directory holds every
        task's files, so it is one rename per new partition for the whole job). Only a directory holding nothing
        but this plan's files is renamed, so a stray file (from a task commit the plan does not include) never
        becomes visible; anything else falls back to the file-by-file moves. Returns the source prefixes renamed.
        """
        if not any("/" in f.path for rec in recs for f in rec.files):
            return ()  # no directories: an unpartitioned output pays nothing for this
        planned: dict[str, set[str]] = {}
        for rec in recs:
            planned.setdefault(rec.data_dir, set()).update(f.path for f in rec.files)
        renamed: list[str] = []
        for data_dir, files in planned.items():
            children: dict[str, set[str]] = {}
            for directory in {partition_of(path) for path in files} - {""}:
                parts = directory.split("/")
                for i, part in enumerate(parts):
                    children.setdefault("/".join(parts[:i]), set()).add(part)
            stack = sorted(children.get("", ()), reverse=True)
            while stack:
                rel = stack.pop()
                if not self.store.exists(rel):
                    under = {f"{rel}/{p}" for p in self.store.list_names(f"{data_dir}/{rel}")}
                    if under and under <= files and self.store.move_dir_if_absent(f"{data_dir}/{rel}", rel):
                        renamed.append(f"{data_dir}/{rel}/")
                        inject("commit_job.mid_move")
                        continue
                stack.extend(f"{rel}/{d}" for d in sorted(children.get(rel, ()), reverse=True))
        return tuple(renamed)


