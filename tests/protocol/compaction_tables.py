"""Tables to compact, as real writers leave them: this provider's output in every mode and algorithm, and
directories Spark wrote (``fixtures/spark_small``, see its ``generate.py``).

Every row carries a unique ``id`` and its partition ``day``; a test reads the rows before the compaction and
requires the same rows, each as often, afterwards (:func:`rows`).
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa

from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt

from . import scenario as sc

SPARK = Path(__file__).parent / "fixtures" / "spark_small"
SPARK_TABLES = ("range_unpartitioned", "by_day", "by_day_appended")
#: (mode, algorithm) of this provider's tables
PROVIDER_TABLES = [(m, a) for m in ("error", "append", "overwrite", "dynamic") for a in (1, 2)]


def write_job(root: str, job: str, mode: str, algorithm: int, first_id: int, days: tuple[str, ...], tasks: int = 3,
         rows_per_file: int = 4) -> None:
    """One job of this provider: *tasks* tasks, each writing *rows_per_file*-row files into every day of *days*."""
    c = FileOutputCommitter(root, job, algorithm=algorithm, mode=mode, partition_by=["day"])
    c.setup_job()
    per_task = rows_per_file * 2 * len(days)
    for task in range(tasks):
        start = first_id + task * per_task
        ids = list(range(start, start + per_task))
        table = pa.table({"id": pa.array(ids, pa.int64()), "day": [days[i % len(days)] for i in range(per_task)]})
        run_task_attempt(c, task, 1, lambda w, t=table: w.write(t), max_rows_per_file=rows_per_file)
    c.commit_job(tasks)


def provider_table(root: str, mode: str, algorithm: int) -> None:
    """A table this provider wrote in *mode* with *algorithm*: in ``error`` mode one job; in ``append`` two; in
    ``overwrite`` a job then the overwrite that replaced it; in ``dynamic`` a job over three days, then a dynamic
    job that replaced one of them (each with its partition's ``_SUCCESS``)."""
    if mode == "error":
        write_job(root, "w0", "error", algorithm, 0, ("d0", "d1"))
    elif mode == "append":
        write_job(root, "w0", "append", algorithm, 0, ("d0", "d1"))
        write_job(root, "w1", "append", algorithm, 1000, ("d1", "d2"))
    elif mode == "overwrite":
        write_job(root, "w0", "append", algorithm, 0, ("d0", "d1"))
        write_job(root, "w1", "overwrite", algorithm, 1000, ("d0", "d1"))
    else:
        write_job(root, "w0", "dynamic", algorithm, 0, ("d0", "d1", "d2"))
        write_job(root, "w1", "dynamic", algorithm, 1000, ("d1",))


def spark_table(root: str, name: str) -> None:
    shutil.copytree(SPARK / name, root)


def rows(root: str) -> Counter[tuple[int, str]]:
    """Every row readers see, as ``(id, day)`` (``day`` empty in an unpartitioned table), with how often."""
    return Counter((r["id"], str(r.get("day", ""))) for r in sc.read_rows(root))


def rows_duckdb(root: str) -> Counter[tuple[int, str]]:
    import duckdb

    files = [f"{root}/{p}" for p in sc.visible_files(root) if p.endswith(".parquet")]
    if not files:
        return Counter()
    con = duckdb.connect()
    hive = any("=" in f.rsplit("/", 2)[-2] for f in files)
    sql = ("select id, day from read_parquet(?, hive_partitioning = true)" if hive
           else "select id, '' from read_parquet(?)")
    return Counter((int(i), str(d)) for i, d in con.execute(sql, [files]).fetchall())
