"""Write the Spark-written tables the deduplication tests start from (``fixtures/spark43``), with real Spark.

Run once, from the repository root, where pyspark 4.3 and Java 17 are installed (CI has neither; the tables are
committed)::

    python -m tests.protocol.make_spark_fixtures

Spark runs ``local[2,2]`` (two cores, a task may fail once) over ``file://`` with its default commit protocol
(Hadoop's FileOutputCommitter, algorithm 1). Every table's rows are ``id`` (bigint), and every row id is written
once, so a test can tell a lost row from a duplicated one. ``fixtures/spark43/tables.json`` records what each
table holds (``ids``: the half-open range of row ids) and what Spark did, for the tests to check against:

- ``two_appends``: two jobs appending ids 0-5 and 6-11, two tasks each: two job uuids in the names.
- ``partitioned``: the same two appends partitioned by ``p = id % 2`` (Spark's dynamic-partition writer names
  these ``.c000``, its single-directory writer the unpartitioned ones ``-c000``).
- ``max_records``: one task writing ids 0-5 as three files (``maxRecordsPerFile=2``): ``-c000`` to ``-c002``, three
  files of one task of one job that are not duplicates.
- ``retried``: ids 0-5 in two tasks, where the first attempt of task 1 fails in the middle of its rows; Spark
  runs attempt 1 and the output holds one file per task (attempts of a task share a name).
- ``speculative``: ids 0-5 in two tasks, where the first attempt of task 1 writes all its rows and fails just
  before its task commit, as a speculative attempt that lost (``spark/KeepAttemptFiles.java``, Spark's commit
  protocol that keeps a copy of every attempt's files); Spark runs attempt 1, which commits. Then the lost
  attempt's file is moved in as a zombie would, without replacing the committed file of the same name: Hive's
  ``mvFile`` names it ``..._copy_1.parquet`` (with its Hadoop checksum).

``javac`` (JDK 17) compiles ``spark/KeepAttemptFiles.java`` against pyspark's jars into a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).parent / "fixtures" / "spark43"
_NAME = re.compile(r"^part-(\d{5})-([0-9a-f-]{36})([-.])c(\d{3})\.")


def _fail_first_attempt_of_task_1(marker_dir: str):  # type: ignore[no-untyped-def]
    """A UDF that records (task, attempt) and fails attempt 0 of task 1 in the middle of its rows."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def passthrough(value: int) -> int:
        ctx = TaskContext.get()
        Path(marker_dir, f"{ctx.partitionId()}_{ctx.attemptNumber()}").touch()
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and value % 6 >= 4:
            raise RuntimeError("attempt 0 of task 1 fails on purpose")
        return value

    return F.udf(passthrough, LongType())


def _describe(root: Path) -> dict:
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    data = [f for f in files if not any(part.startswith(("_", ".")) for part in f.split("/"))]
    parsed = [_NAME.match(f.rsplit("/", 1)[-1]) for f in data]
    return {"files": data, "job_uuids": sorted({m.group(2) for m in parsed if m}),
            "tasks": sorted({int(m.group(1)) for m in parsed if m}),
            "counter_separators": sorted({m.group(3) for m in parsed if m}),
            "success_bytes": (root / "_SUCCESS").stat().st_size}


def _compile_committer(classes: str) -> None:
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    source = Path(__file__).parent / "spark" / "KeepAttemptFiles.java"
    subprocess.run(["javac", "-d", classes, "-cp", jars, str(source)], check=True)


def _move_in_without_replacing(table: Path, attempt_dir: Path) -> dict:
    """The zombie's late move of its file into the table: the name is taken, so Hive's mvFile rule applies."""
    (src,) = [p for p in attempt_dir.iterdir() if p.name.startswith("part-")]
    base, _, ext = src.name.rpartition(".")
    dst = f"{base}_copy_1.{ext}"
    shutil.copyfile(src, table / dst)
    shutil.copyfile(attempt_dir / f".{src.name}.crc", table / f".{dst}.crc")
    return {"lost_attempt": attempt_dir.name, "zombie_copy": dst, "copy_of": src.name,
            "identical_bytes": (table / src.name).read_bytes() == src.read_bytes()}


def main() -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pyspark

    work = tempfile.mkdtemp()
    _compile_committer(work)
    spark = (SparkSession.builder.master("local[2,2]").appName("dedup-fixtures")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraClassPath", work).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    tables: dict[str, dict] = {}

    def ids(lo: int, hi: int, tasks: int):  # type: ignore[no-untyped-def]
        return spark.range(lo, hi, numPartitions=tasks)

    for lo, hi in ((0, 6), (6, 12)):
        ids(lo, hi, 2).write.mode("append").parquet(str(OUT / "two_appends"))
        ids(lo, hi, 2).withColumn("p", (F.col("id") % 2).cast("int")).write.mode("append").partitionBy("p") \
            .parquet(str(OUT / "partitioned"))
    tables["two_appends"] = {"ids": [0, 12], "jobs": 2}
    tables["partitioned"] = {"ids": [0, 12], "jobs": 2, "partition_by": ["p"]}

    spark.conf.set("spark.sql.files.maxRecordsPerFile", "2")
    ids(0, 6, 1).write.mode("append").parquet(str(OUT / "max_records"))
    spark.conf.unset("spark.sql.files.maxRecordsPerFile")
    tables["max_records"] = {"ids": [0, 6], "jobs": 1}

    with tempfile.TemporaryDirectory() as markers:
        udf = _fail_first_attempt_of_task_1(markers)
        ids(0, 6, 2).select(udf(F.col("id")).alias("id")).write.mode("append").parquet(str(OUT / "retried"))
        attempts = sorted(os.listdir(markers))
    tables["retried"] = {"ids": [0, 6], "jobs": 1, "attempts_run": attempts}

    keep = Path(work, "attempts")
    # session settings reach the job's Hadoop configuration as they are
    for key, value in (("spark.sql.sources.commitProtocolClass", "fixtures.KeepAttemptFiles"),
                       ("fixtures.keep.dir", keep.as_uri()), ("fixtures.fail.attempt", "1_0")):
        spark.conf.set(key, value)
    ids(0, 6, 2).write.mode("append").parquet(str(OUT / "speculative"))
    spark.conf.unset("spark.sql.sources.commitProtocolClass")
    # Hadoop attempt ids end with Spark's unique task attempt id: task 1's lost first attempt has the smaller one
    attempts = sorted(keep.iterdir(), key=lambda p: (p.name.split("_m_")[1][:6], int(p.name.rsplit("_", 1)[1])))
    tables["speculative"] = {"ids": [0, 6], "jobs": 1, "attempts_kept": [a.name for a in attempts],
                             **_move_in_without_replacing(OUT / "speculative", attempts[1])}

    for name, info in tables.items():
        info.update(_describe(OUT / name))
    doc = {"spark": pyspark.__version__, "java": spark.sparkContext._jvm.System.getProperty("java.version"),
           "master": "local[2,2]", "command": "python -m tests.protocol.make_spark_fixtures", "tables": tables}
    spark.stop()
    shutil.rmtree(work)
    (OUT / "tables.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps(doc, indent=1, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
