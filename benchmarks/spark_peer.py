"""The peer: Spark (Hadoop FileOutputCommitter) writing N one-row Parquet files, local[2], file://.

``python -m benchmarks.spark_peer N ALGORITHM RUNS OUT [FILES_PER_TASK [PARTITIONS]]``: N/FILES_PER_TASK tasks,
each writing FILES_PER_TASK one-row files (``maxRecordsPerFile=1``), the same shape as our side of the benchmark;
with PARTITIONS, partitioned by ``p`` (one file of each task in each partition). Prints one
``TOTAL_S <s>`` line per run. The job commit time is Spark's own figure, from the driver's log line
"Write Job <uuid> committed. Elapsed time: <ms> ms" (FileFormatWriter, INFO).
"""

from __future__ import annotations

import re
import shutil
import sys
import time


def main() -> None:
    n, algorithm, runs, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    files_per_task = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    partitions = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").appName("commit-peer")
             .config("spark.ui.enabled", "false")
             .config("spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version", str(algorithm))
             .config("spark.sql.sources.commitProtocolClass",
                     "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol")
             .config("spark.sql.files.maxRecordsPerFile", "1")
             .getOrCreate())
    df = spark.range(n).repartition(max(1, n // files_per_task))
    writer = df.write.mode("overwrite")
    if partitions:
        # ids reach the tasks round-robin, so id // (n / partitions) gives every task one file in each partition
        df = df.withColumn("p", (F.col("id") / max(1, n // partitions)).cast("int"))
        writer = df.write.mode("overwrite").partitionBy("p")
    for _ in range(runs):
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        writer.parquet(out)
        print(f"TOTAL_S {time.perf_counter() - t0:.4f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()


def parse(stdout: str, stderr: str) -> list[tuple[float, float]]:
    """(job commit ms, total s) per run."""
    commits = [float(m) for m in re.findall(r"Write Job [0-9a-f-]+ committed\. Elapsed time: (\d+) ms", stderr)]
    totals = [float(m) for m in re.findall(r"TOTAL_S ([\d.]+)", stdout)]
    return list(zip(commits, totals))
