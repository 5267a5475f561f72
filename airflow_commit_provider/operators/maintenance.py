"""Maintenance of outputs: duplicate cleanup for directories written without a protocol, and compaction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.storage import CommitStorageHook
from ..protocol import FileOutputCommitter
from ..protocol.compaction import compact
from ..protocol.dedup import find_duplicates, remove_duplicates
from .commit import make_job_id


class DeduplicateOutputOperator(BaseOperator):
    """Report (``apply=False``, the default) or remove duplicate task outputs (Hive ``000005_0``/``000005_1``,
    Spark ``part-00005-<uuid>`` of two attempts). The winner is the file a commit record lists, else the highest
    attempt id; never the larger file. Ambiguous groups are reported and left alone. Returns the report."""

    template_fields = ("target", "conn_id")

    def __init__(self, *, target: Any, conn_id: str | None = None, apply: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target, self.conn_id, self.apply = target, conn_id, apply

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        store = CommitStorageHook(self.conn_id).get_store(self.target)
        report = find_duplicates(store)
        for group in report["groups"]:
            self.log.info("task %s in %r: keep %s (%s); %s %s", group["task"], group["partition"], group["winner"],
                          group["reason"], "delete" if self.apply else "would delete", group["losers"])
        for amb in report["ambiguous"]:
            self.log.warning("task %s in %r is ambiguous, left alone: %s", amb["task"], amb["partition"], amb["why"])
        return remove_duplicates(store, report) if self.apply else {**report, "deleted": [], "dry_run": True}


class CompactOutputOperator(BaseOperator):
    """Merge small Parquet files per partition into files of about *target_size* bytes, through the commit
    protocol (:mod:`~airflow_commit_provider.protocol.compaction`): each merge is a task attempt, the small files
    are replaced at job commit only. The first try fixes the merge groups; a retry is a new application attempt
    that recovers the merges already committed and never regroups.

    The task fails, having changed nothing visible, when another compaction holds one of the files
    (:class:`InputsClaimed`: it is running, or failed and was not aborted) or when another job deleted or rewrote
    one of them since the plan (:class:`InputsChanged`); after the latter a retry plans afresh."""

    template_fields = ("target", "conn_id")

    def __init__(self, *, target: Any, conn_id: str | None = None, target_size: int = 128 * 2**20,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target, self.conn_id, self.target_size = target, conn_id, target_size

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        store = CommitStorageHook(self.conn_id).get_store(self.target)
        job_id = make_job_id(context["dag"].dag_id, context["run_id"], f"compact-{self.task_id}")
        committer = FileOutputCommitter(store, job_id, algorithm=1, mode="append",
                                        labels={"dag_id": context["dag"].dag_id, "run_id": context["run_id"]})
        result = compact(committer, context["ti"].try_number, self.target_size)
        self.log.info("compaction %s: %s: %s groups merged from %s small files", job_id, result["state"],
                      result.get("groups"), result.get("inputs"))
        return {k: v for k, v in result.items() if k != "files"}
