"""Maintenance of outputs: duplicate cleanup for directories written without a protocol, and compaction.

A refusal no retry can cure (a target that is a Delta or Iceberg table, files that do not merge) fails the task
on its first try (:mod:`.failures`); one that can (another compaction holds an input, an input changed) retries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.storage import CommitStorageHook
from ..protocol import CommitConfig
from ..protocol.maintenance.compaction import compact
from ..protocol.maintenance.dedup import find_duplicates, remove_duplicates, summary_lines
from .failures import fail_fast_on_deterministic_errors
from .identity import job_names, make_job_id
from .lineage import MaintenanceLineageMixin


class DeduplicateOutputOperator(MaintenanceLineageMixin, BaseOperator):
    """Report (``apply=False``, the default) or remove duplicate task outputs: files proven to be the same task of
    the same job twice, by the writer's naming rules and this provider's commit logs (``protocol.dedup``). The
    dry run returns the plan the apply carries out; with ``apply=True`` the plan runs as a job of the protocol
    (recorded before the first deletion, markers withdrawn and rewritten, resumed by a retry). *single_job_dirs*:
    one job wrote each directory that holds Hive-named files (``INSERT OVERWRITE`` per partition). Returns the
    plan's report (and ``applied``). A target that is, lies inside or holds a Delta or Iceberg table is refused
    (:class:`OwnedByTable`, not retried), dry run included: the table's log says which files are its data."""

    template_fields = ("target", "conn_id")

    def __init__(self, *, target: Any, conn_id: str | None = None, apply: bool = False,
                 single_job_dirs: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target, self.conn_id, self.apply, self.single_job_dirs = target, conn_id, apply, single_job_dirs

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with fail_fast_on_deterministic_errors():
            return self._deduplicate()

    def _deduplicate(self) -> dict[str, Any]:
        store = CommitStorageHook(self.conn_id).get_store(self.target)
        plan = find_duplicates(store, single_job_dirs=self.single_job_dirs)
        self.log.info("deduplication plan %s%s: %d file(s) to delete", plan.plan_id,
                      " (unfinished by an earlier run: finishing it)" if plan.pending else "", len(plan.deletions))
        for line in summary_lines(plan):
            self.log.info("%s%s", "" if self.apply or not line.startswith("delete") else "would ", line)
        self._maintained = (store.url(), None)
        if not self.apply:
            return {**plan.to_doc(), "dry_run": True}
        result = remove_duplicates(store, plan)
        if plan.deletions:
            self._maintained = (store.url(), {"files": 0})
        for skipped in result["applied"]["skipped"]:
            self.log.warning("skipped %s: %s", skipped["path"], skipped["why"])
        return result


class CompactOutputOperator(MaintenanceLineageMixin, BaseOperator):
    """Merge small Parquet files per partition into files of about *target_size* bytes, through the commit
    protocol (:mod:`~airflow_commit_provider.protocol.maintenance.compaction`): each merge is a task attempt, the small files
    are replaced at job commit only. The first try fixes the merge groups; a retry is a new application attempt
    that recovers the merges already committed and never regroups.

    The task fails, having changed nothing visible, when another compaction holds one of the files
    (:class:`InputsClaimed`: it is running, or failed and was not aborted) or when another job deleted or rewrote
    one of them since the plan (:class:`InputsChanged`); after the latter a retry plans afresh. It fails without
    a retry, having changed nothing at all, when the target is, lies inside or holds a Delta or Iceberg table
    (:class:`OwnedByTable`: the message names the table's own compaction)."""

    template_fields = ("target", "conn_id")

    def __init__(self, *, target: Any, conn_id: str | None = None, target_size: int = 128 * 2**20,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target, self.conn_id, self.target_size = target, conn_id, target_size

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        names = job_names(context["dag"].dag_id, context["run_id"], f"compact-{self.task_id}")
        job_id = make_job_id(**names)
        # named as a compaction too: a stage someone called "compact-<task id>" is another job, refused at set-up
        config = CommitConfig(algorithm=1, mode="append", names={**names, "compaction": self.task_id},
                              labels={"dag_id": context["dag"].dag_id, "run_id": context["run_id"]})
        with fail_fast_on_deterministic_errors():
            committer = CommitStorageHook(self.conn_id).make_committer(self.target, job_id, config)
            result = compact(committer, context["ti"].try_number, self.target_size)
        totals = result.get("totals") if result["state"] == "committed" else None
        self._maintained = (committer.store.url(), None if totals is None else
                            {k: totals[k] for k in ("rows", "bytes", "files") if k in totals})
        self.log.info("compaction %s: %s: %s groups merged from %s small files", job_id, result["state"],
                      result.get("groups"), result.get("inputs"))
        return {k: v for k, v in result.items() if k != "files"}
