"""Pairs of a target and an algorithm that cannot work, refused when the committer is made: before any record,
directory, table or catalog exists, with an error naming the way out, which then commits.

- A Delta or Iceberg table is committed in one transaction at job commit (algorithm 1): algorithm 2 (files
  visible at task commit) and the magic committer (uploads completed in place) are refused for both formats.
- The magic committer needs a store that stages files under their final names (S3, Azure): on a local disk or
  fsspec's ``memory://`` it is refused.

The same pairs on S3, where magic is otherwise allowed: ``tests/s3/test_refused_pairs_s3.py``.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import (
    InvalidOutputSpec,
    StorageCapabilityError,
    make_committer,
    read_success_marker,
    run_task_attempt,
)
from airflow_commit_provider.protocol.tables import TableTarget, table_target

from .tables_worker import run_job

TABLE_ALGORITHMS = [("delta", 2), ("delta", "magic"), ("iceberg", 2), ("iceberg", "magic")]


def table_cfg(fmt: str, where: str) -> dict:
    """A job's configuration for a Delta table at *where*, or an Iceberg table whose warehouse is *where* (a
    SQLite catalog beside it)."""
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[fmt])
    return {"format": fmt, "location": where, **({"table_name": "ns.events"} if fmt == "iceberg" else {}),
            "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 2, "rows": 4, "gen": 0}


def refuse_table_algorithm(cfg: dict, algorithm: int | str) -> TableTarget:
    """Make the table job's committer with *algorithm*: refused naming algorithm 1. Returns the table target
    (opening an Iceberg table's embedded catalog creates the catalog file and namespace, whatever the algorithm:
    that is the table's opening, not the job's)."""
    table = table_target(cfg["format"], cfg["location"], table_name=cfg.get("table_name"),
                         catalog=cfg.get("catalog"), storage_options=cfg.get("storage_options"))
    with pytest.raises(InvalidOutputSpec, match=rf"{cfg['format']} table is committed at job commit: "
                                                rf"use algorithm 1, not {algorithm!r}"):
        make_committer(table.data_root, cfg["job_id"], algorithm=algorithm, mode="append", partition_by=["day"],
                       table=table, durable=False)
    return table


@pytest.mark.parametrize("fmt,algorithm", TABLE_ALGORITHMS, ids=[f"{f}-{a}" for f, a in TABLE_ALGORITHMS])
def test_a_table_job_with_algorithm_2_or_magic_is_refused_before_anything_is_made(tmp_path, fmt, algorithm):
    cfg = table_cfg(fmt, str(tmp_path / "events"))
    table = refuse_table_algorithm(cfg, algorithm)
    made = sorted(os.path.relpath(os.path.join(d, f), tmp_path) for d, _, fs in os.walk(tmp_path) for f in fs)
    assert made == ([] if fmt == "delta" else ["events/catalog.db"]), f"the refusal made {made}"
    assert not table.exists() and not os.path.exists(table.data_root), "a table, or its data, was made"
    manifest = run_job(cfg)                                   # the advice: algorithm 1 (the default)
    assert manifest["totals"]["rows"] == 8 and manifest["algorithm"] in (1, "1")


@pytest.mark.parametrize("where", ["local", "memory"])
def test_the_magic_committer_off_s3_is_refused_naming_algorithms_1_and_2(tmp_path, where):
    import fsspec

    memory = fsspec.filesystem("memory")
    root = str(tmp_path / "out") if where == "local" else "memory://refused-magic/out"
    with pytest.raises(StorageCapabilityError, match=r"stages files under their final names.*use algorithm 1 or 2 there"):
        make_committer(root, "job-1", algorithm="magic")
    if where == "local":
        assert os.listdir(tmp_path) == [], "the refusal made something"
    else:
        assert not memory.exists("/refused-magic")
    for algorithm in (1, 2):                                  # the advice
        c = make_committer(root, f"job-v{algorithm}", algorithm=algorithm, mode="append")
        c.setup_job()
        run_task_attempt(c, 0, 1, lambda w: w.write(pa.table({"x": [1, 2, 3]})))
        c.commit_job(1)
        assert read_success_marker(root, verify_files=True)["totals"]["rows"] == 3
    if where == "memory":
        memory.rm("/refused-magic", recursive=True)
