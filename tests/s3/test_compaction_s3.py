"""Compaction on S3 (moto's server over HTTP): the claims and the input check with S3's create-if-absent
(``If-None-Match: *``) and ETags, the compaction in worker processes killed and paused at its fault points."""

from __future__ import annotations

import signal
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_commit_provider.protocol import read_success_marker
from airflow_commit_provider.protocol.stores import store_for

from ..protocol import compaction_tables as tables
from ..protocol import compaction_worker as worker
from ..protocol import scenario as sc


def small_table(s3fs_fs, root: str) -> Counter:
    ids = Counter()
    for day in ("d0", "d1"):
        for i in range(4):
            rows = [(day == "d1") * 100 + i * 10 + k for k in range(5)]
            with s3fs_fs.open(f"{root}/day={day}/small-{i}.parquet", "wb") as fh:
                pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), fh, compression="none")
            ids.update((r, day) for r in rows)
    return ids


def leftovers(s3fs_fs, root: str) -> list[str]:
    s3fs_fs.invalidate_cache()
    return [p for p in s3fs_fs.find(root) if "/_temporary/" in p]


def test_s3_compaction_killed_between_deletion_and_publication_then_rerun(bucket, s3fs_fs):
    root = f"s3://{bucket}/table"
    before = small_table(s3fs_fs, root)
    # S3 deletes in batches of up to 1,000 keys: the point fires once, after every input is gone
    killed = worker.run(root, "compact", 1, faults="commit_job.mid_delete=kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    mid = tables.rows(root)
    assert mid == Counter(), "every input deleted, no merged file published yet: rows missing, none twice"
    again = worker.run(root, "compact", 2)
    assert again.returncode == 0, again.stderr
    assert tables.rows(root) == before
    read_success_marker(root, verify_files=True)
    assert len(sc.visible_files(root)) == 2 and not leftovers(s3fs_fs, root)


def test_s3_overlapping_compactions_one_commits_the_other_refuses(bucket, s3fs_fs):
    root = f"s3://{bucket}/overlap"
    before = small_table(s3fs_fs, root)
    worker.overlapping_compactions_one_commits(root)
    assert tables.rows(root) == before
    read_success_marker(root, verify_files=True)
    assert not leftovers(s3fs_fs, root)


def test_s3_versions_are_etags_a_same_size_rewrite_is_another_version(bucket, s3fs_fs):
    root = f"s3://{bucket}/versions"
    small_table(s3fs_fs, root)
    store = store_for(root)
    rel = "day=d0/small-1.parquet"
    (size, version), = store.file_versions([rel]).values()
    with s3fs_fs.open(f"{root}/{rel}", "wb") as fh:
        pq.write_table(pa.table({"id": pa.array([900 + k for k in range(5)], pa.int64())}), fh, compression="none")
    (size2, version2), = store.file_versions([rel]).values()
    assert size2 == size and version2 != version and version.strip('"')
    assert store.file_versions(["day=d0/missing.parquet"]) == {}
