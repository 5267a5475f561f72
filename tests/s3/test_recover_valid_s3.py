"""Recovery recovers only what can still commit, on S3 (moto's server over HTTP): the refused tasks' record is
written and read through the S3 store and found in the job directory's listing, and the clear re-runs exactly the
refused tasks (the protocol test, on the S3 tables of :mod:`.test_tables_s3`)."""

from __future__ import annotations

from ..protocol.test_recover_valid import (
    test_a_clear_after_a_refused_schema_reruns_the_tasks_instead_of_recovering_them as refused_schema_then_clear,
)
from .test_tables_s3 import base  # noqa: F401  (the fixture)


def test_a_clear_after_a_refused_schema_on_s3_reruns_the_tasks(base, tmp_path):  # noqa: F811
    refused_schema_then_clear(base, tmp_path)
