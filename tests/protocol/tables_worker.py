"""A job writing into a Delta or Iceberg table, as a real worker process runs it: ``python -m
tests.protocol.tables_worker '<json config>'`` (fault points armed through the environment), or in process through
:func:`run_job`.

Config: ``format``, ``location``, ``storage_options`` (Delta: delta-rs's, e.g. an S3 endpoint and credentials),
``table_name`` and ``catalog`` (Iceberg), ``job_id``, ``mode``, ``partition_by``,
``tasks`` (number of tasks), ``rows`` (per task), ``gen`` (the value of column ``gen`` in every row, so a reader
tells generations apart), ``phase``: ``run`` (set up, write every task, commit) or ``commit`` (commit only: the
resume of a killed commit). Task *t* writes rows ``id = t * 1000 + i`` with ``day = i % 2``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa

from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt
from airflow_commit_provider.protocol.tables import table_target


def committer_for(cfg: dict[str, Any]) -> FileOutputCommitter:
    table = table_target(cfg["format"], cfg.get("location"), table_name=cfg.get("table_name"),
                         catalog=cfg.get("catalog"), storage_options=cfg.get("storage_options"))
    return FileOutputCommitter(table.data_root, cfg["job_id"], mode=cfg.get("mode", "append"),
                               partition_by=cfg.get("partition_by", ["day"]), table=table, durable=False,
                               names=cfg.get("names", {}))


def task_rows(task: int, rows: int, gen: int, extra: dict[str, Any] | None = None) -> pa.Table:
    data = {"id": pa.array([task * 1000 + i for i in range(rows)], pa.int64()),
            "day": pa.array([i % 2 for i in range(rows)], pa.int64()),
            "gen": pa.array([gen] * rows, pa.int64())}
    return pa.table({**data, **(extra or {})})


def run_job(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the configured phase; returns the ``_SUCCESS`` manifest."""
    c = committer_for(cfg)
    tasks = cfg.get("tasks", 3)
    if cfg.get("phase", "run") == "run":
        c.setup_job()
        for t in range(tasks):
            run_task_attempt(c, t, cfg.get("attempt", 1),
                             lambda w, t=t: w.write(task_rows(t, cfg.get("rows", 4), cfg.get("gen", 0))))
    return c.commit_job(tasks)


if __name__ == "__main__":
    manifest = run_job(json.loads(sys.argv[1]))
    print(json.dumps({"table": manifest.get("table"), "generation": manifest["generation"]}))
