"""Deduplication on S3 (moto's server over HTTP): Spark's files uploaded as Spark wrote them, this provider's
output of every algorithm, zombie copies beside them; the plan record created with ``If-None-Match``."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, read_success_marker, run_task_attempt, store_for
from airflow_commit_provider.protocol.maintenance.dedup import find_duplicates, remove_duplicates

from ..protocol import dedup_tables as t


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
def test_dedup_on_s3(bucket, s3fs_fs, algorithm):
    root = f"s3://{bucket}/table"
    for name in t.TABLES["two_appends"]["files"] + ["_SUCCESS"]:
        s3fs_fs.put_file(str(t.SPARK / "two_appends" / name), f"{bucket}/table/{name}")
    c = FileOutputCommitter(root, "ours", algorithm=algorithm, mode="append")
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(t.ids_table([100, 101])))
    ours = f"{bucket}/table/{c.commit_job(1)['files'][0]['path']}"
    spark_file = t.TABLES["two_appends"]["files"][1]
    copies = [f"{bucket}/table/{spark_file.replace('.snappy.parquet', '.snappy_copy_1.parquet')}",
              ours.replace(".snappy.parquet", ".snappy_copy_1.parquet")]
    s3fs_fs.copy(f"{bucket}/table/{spark_file}", copies[0])
    s3fs_fs.copy(ours, copies[1])
    store = store_for(root)
    plan = find_duplicates(store)
    assert sorted(f"{bucket}/table/{d.path}" for d in plan.deletions) == sorted(copies)
    assert {d.writer for d in plan.deletions} == {"spark", "this-provider"}
    result = remove_duplicates(store, plan)
    assert sorted(result["applied"]["deleted"]) == sorted(d.path for d in plan.deletions)
    s3fs_fs.invalidate_cache()
    ids = ds.dataset(f"{bucket}/table", format="parquet", filesystem=s3fs_fs).to_table().column("id").to_pylist()
    assert sorted(ids) == list(range(12)) + [100, 101]
    assert read_success_marker(root, verify_files=True)["job_id"] == "ours"
    assert not s3fs_fs.exists(f"{bucket}/table/_temporary/_dedup.json")
