"""A plain file job meets a table on S3 (moto's server over HTTP): an ``overwrite`` file job pointed at a Delta
table's location or an Iceberg table's data prefix is refused at setup before any request that writes, and the
table still reads every row through its own client. What the check costs setup on a target of 1,000 files is
counted request by request."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, OwnedByTable

from ..protocol.tables_worker import committer_for, run_job
from ..protocol.test_tables import expected, rows
from .test_maintenance_tables_s3 import objects
from .test_tables_s3 import base  # noqa: F401 - the Delta / Iceberg table on S3 fixture


def test_a_file_job_into_a_table_on_s3_is_refused_at_setup(base, bucket, s3fs_fs):  # noqa: F811
    run_job(base)
    run_job({**base, "job_id": "events-2", "gen": 1})
    data = committer_for(base).store.url()
    before = objects(s3fs_fs, bucket)
    job = FileOutputCommitter(data, "files-1", algorithm=1, mode="overwrite", partition_by=["day"])
    with pytest.raises(OwnedByTable) as refused:
        job.setup_job()
    assert objects(s3fs_fs, bucket) == before, "the refused setup wrote, claimed or deleted something"
    writes = {op for op in job.store.request_counts() if not op.startswith(("List", "Get", "Head"))}
    assert not writes, f"the refusal sent {writes}"
    assert refused.value.table_format == base["format"] and f"table_format='{base['format']}'" in str(refused.value)
    assert rows(base) == sorted(expected() + expected(gen=1))


def test_the_setup_check_costs_the_same_however_many_jobs_wrote_the_target(bucket, s3fs_fs):
    """A plain target of 2,000 Parquet files and the commit logs of 100 earlier jobs (copies of one real job's):
    the check reads two listings per level from the target up to the bucket and one commit log; an overwrite's
    (whose commit lists the target anyway) one listing per 1,000 keys below it too, an append's only the
    target's own records (two listings), however many files it holds. Reading every commit log, as maintenance
    does, would cost one request per job ever committed there: a daily job one more each day (measured here:
    100 GetObject)."""
    import boto3
    import pyarrow as pa

    from airflow_commit_provider.protocol import run_task_attempt
    from airflow_commit_provider.protocol.stores import store_for
    from airflow_commit_provider.protocol.tables.ownership import refuse_file_job, table_at

    root = f"s3://{bucket}/lake/out"
    first = FileOutputCommitter(root, "job-0", algorithm=1, mode="append", partition_by=["day"])
    first.setup_job()
    run_task_attempt(first, 0, 1, lambda w: w.write(pa.table({"x": [1], "day": [0]})))
    manifest = first.commit_job(1)
    client = boto3.client("s3")
    parquet, log = (client.get_object(Bucket=bucket, Key=f"lake/out/{rel}")["Body"].read()
                    for rel in (manifest["files"][0]["path"], "_commits/job-0.json"))
    copies = [(f"lake/out/day={i % 10}/part-{i:05d}.parquet", parquet) for i in range(1, 2000)]
    copies += [(f"lake/out/_commits/job-{j}.json", log) for j in range(1, 100)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), copies))
    keys = len(s3fs_fs.find(f"{bucket}/lake/out"))
    assert 2100 <= keys < 3000, keys

    for mode, below in (("append", 2), ("overwrite", 3)):
        store = store_for(root)
        store.request_counts()   # connect first: the count is of the check, not of the client's start
        refuse_file_job(store, mode)
        assert store.request_counts() == {"ListObjectsV2": 2 * 3 + below, "GetObject": 1}, mode
    every = store_for(root)
    every.request_counts()
    assert table_at(every) is None and every.request_counts()["GetObject"] == 100
