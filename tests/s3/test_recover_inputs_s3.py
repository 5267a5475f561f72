"""A task is recovered only when its inputs are the same, on S3 (moto's server): with v1 (copies at job commit),
v2 (its visible files replaced by the new commit's) and the magic committer (the old commit's pending uploads
are never completed, and none is left pending). The scenario is
:func:`tests.protocol.test_recover_inputs.clear_with_element_1_changed`."""

from __future__ import annotations

import boto3
import pytest

from ..protocol.test_recover_inputs import clear_with_element_1_changed
from ..protocol.test_recover_valid import Calls


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
def test_a_clear_reruns_only_the_tasks_whose_inputs_changed_on_s3(moto_server, bucket, tmp_path, caplog,
                                                                   algorithm):
    settings = {"part_size": 5 * 2**20} if algorithm == "magic" else {}
    clear_with_element_1_changed(f"s3://{bucket}/out", algorithm, Calls(tmp_path / "calls"), caplog, **settings)
    pending = boto3.client("s3", endpoint_url=moto_server).list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert pending == [], "the declined commit's uploads were aborted, not left pending"
