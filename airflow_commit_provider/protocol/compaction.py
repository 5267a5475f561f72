"""Small-file compaction done through the commit protocol: the Hive merge job, minus its duplicates.

Each group of small Parquet files of one partition is merged by one task; every attempt of it (retries,
speculative copies) writes into its own attempt directory and only the attempt that wins the task commit record
counts. The inputs are named in the job record (``replace_files``) and deleted at job commit from a plan fixed
before the first deletion, and *then* the merged files are moved in (``replace_first``): the merged files hold
the same rows as the inputs, so this order means a reader never sees a row twice -- during the commit, or after
a crash in it, some rows are briefly missing (committed under ``_temporary``, listed in the plan) until the
commit is resumed. No attempt can leave a second copy behind (Hive's ``000005_0`` / ``000005_1``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow.parquet as pq

from .committer import FileOutputCommitter
from .paths import partition_of
from .stores import Store
from .task import TaskOutcome, run_task_attempt
from .writer import TaskAttemptWriter


def plan_groups(files: dict[str, int], target_size: int) -> list[list[str]]:
    """Per partition, consecutive small files packed into groups of at most *target_size* bytes (>= 2 files).

    Deterministic for the same files, so a retried compaction rebuilds the same tasks from its job record.
    """
    by_part: dict[str, list[str]] = defaultdict(list)
    for rel in sorted(files):
        if files[rel] < target_size:
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
    return [g for g in groups if len(g) >= 2]


def small_parquet_files(store: Store) -> dict[str, int]:
    return {rel: size for rel, size in store.list_files("", visible_only=True) if rel.endswith(".parquet")}


def merge_group(writer: TaskAttemptWriter, group: list[str], store: Store) -> None:
    """Write the rows of *group* (one partition) as one Parquet file of the attempt."""
    import io

    part = partition_of(group[0])
    tables = [pq.read_table(io.BytesIO(store.read_bytes(rel))) for rel in group]
    name = writer.next_file_name("snappy.parquet")
    with writer.open_file(f"{part}/{name}" if part else name) as fh:
        with pq.ParquetWriter(fh, tables[0].schema, compression="snappy") as pw:
            for table in tables:
                pw.write_table(table.cast(tables[0].schema))


def compact(committer: FileOutputCommitter, attempt: int, target_size: int = 128 * 2**20) -> dict[str, Any]:
    """Run (or resume) a compaction job; *attempt* numbers this run's task attempts (an Airflow try number)."""
    job, log = committer.job_record(), committer.commit_log()
    if job is None and log is not None:
        return {"state": "committed", **log.to_doc()}  # a retry after the commit: nothing to redo
    inputs = plan_groups(small_parquet_files(committer.store), target_size) if job is None else None
    ctx = committer.setup_job(replace_files=[f for g in inputs for f in g] if inputs is not None else (),
                              replace_first=True)
    job = committer.job_record()
    assert job is not None
    replace = job.replace_files
    wanted = set(replace)
    sizes = {rel: size for rel, size in committer.store.list_files("", visible_only=True) if rel in wanted}
    groups = plan_groups(sizes, target_size) if ctx.state == "running" else []
    outcomes: list[TaskOutcome] = []
    for task, group in enumerate(groups):
        outcomes.append(run_task_attempt(committer, task, attempt,
                                         lambda w, g=group: merge_group(w, g, committer.store)))
    manifest = committer.commit_job(len(groups) if ctx.state == "running" else None)
    return {"state": "committed", "groups": len(groups), "inputs": len(replace),
            "recovered": sum(o.status != "committed" for o in outcomes), **manifest}
