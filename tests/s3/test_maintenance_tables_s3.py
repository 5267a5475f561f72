"""Maintenance meets table targets on S3 (moto's server over HTTP): a compaction or a deduplication of a Delta
table's location (or a prefix inside it) or of an Iceberg table's data prefix is refused before any request that
writes, and the table still reads every row through its own client."""

from __future__ import annotations

import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, OwnedByTable
from airflow_commit_provider.protocol.maintenance.compaction import compact
from airflow_commit_provider.protocol.maintenance.dedup import remove_duplicates
from airflow_commit_provider.protocol.stores import store_for

from ..protocol.tables_worker import run_job
from ..protocol.test_tables import expected, rows
from .test_tables_s3 import base  # noqa: F401 - the Delta / Iceberg table on S3 fixture


def objects(s3fs_fs, bucket: str) -> dict[str, str]:
    """Every object in the bucket with its ETag, and every pending multipart upload: what a write would change."""
    s3fs_fs.invalidate_cache()
    found = {path: info["ETag"] for path, info in s3fs_fs.find(bucket, detail=True).items()}
    uploads = s3fs_fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", [])
    return {**found, **{f"upload:{u['Key']}": u["UploadId"] for u in uploads}}


@pytest.mark.parametrize("operation", ["compact", "remove_duplicates"])
@pytest.mark.parametrize("inside", [False, True])
def test_maintenance_of_a_table_on_s3_is_refused(base, bucket, s3fs_fs, operation, inside):  # noqa: F811
    run_job(base)
    run_job({**base, "job_id": "events-2", "gen": 1})
    data = base["location"] if base["format"] == "delta" else f"{base['location']}/ns/events/data"
    target = f"{data}/day=0" if inside else data
    before = objects(s3fs_fs, bucket)
    with pytest.raises(OwnedByTable) as refused:
        if operation == "compact":
            compact(FileOutputCommitter(target, "compact-1", algorithm=1, mode="append"), 1, 10**6)
        else:
            remove_duplicates(store_for(target))
    assert objects(s3fs_fs, bucket) == before, "the refusal wrote, claimed or deleted something"
    assert refused.value.table_format == base["format"] and f"{base['format']} table" in str(refused.value)
    assert refused.value.location == data.removesuffix("/data")
    assert rows(base) == sorted(expected() + expected(gen=1))
