"""Two runs of one job on S3 (moto's server over HTTP): the application attempt's owner is read from its marker
there too, and a run that ended is taken over without its late tasks writing anything (magic: no upload of
theirs is left pending either)."""

from __future__ import annotations

import boto3
import pytest

from ..protocol.test_overlapping_runs import take_over


@pytest.mark.parametrize("algorithm", [1, "magic"])
def test_a_run_that_ended_is_taken_over_on_s3(bucket, moto_server, algorithm):
    take_over(f"s3://{bucket}/out", "overwrite", algorithm)
    s3 = boto3.client("s3", endpoint_url=moto_server)
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads"), "no pending upload left"
