"""An audited stage on S3 with the magic committer and an approval of two days, for
``tests/s3/test_audit_s3.py``: the bucket (``COMMIT_TEST_S3_BUCKET``, read when the file is imported) carries a
lifecycle rule aborting incomplete multipart uploads after one day, so the setup refuses before anything is
written. Every call of the user callable is appended to ``calls.log`` in ``COMMIT_TEST_WORK`` (and fails: with
the refusal gone the run ends instead of waiting for an approval nobody gives)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_commit_provider.protocol.audit import Approval, Audit, checks

BUCKET = os.environ.get("COMMIT_TEST_S3_BUCKET", "commit-test")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")

with DAG("s3_audit_magic_approval", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as s3_audit_magic_approval:
    @task.commit_stage(target=f"s3://{BUCKET}/reviewed", conn_id="commit_s3", algorithm="magic", mode="append",
                       audit=Audit(checks=[checks.Rows(min=1)], approval=Approval(timeout=timedelta(days=2))))
    def load(shard: int, ti=None) -> None:
        with open(os.path.join(WORK, "calls.log"), "a") as fh:
            fh.write(f"{ti.dag_id} {shard} {ti.try_number}\n")
        # the setup must have refused the stage; if it did not, fail here rather than wait for an approval forever
        raise RuntimeError("the setup should have refused this stage before any write")

    load.expand(shard=[0, 1])
