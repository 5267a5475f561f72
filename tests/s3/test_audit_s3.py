"""The audit on S3 (moto's server over HTTP): the magic committer's staged uploads cannot be read, but its task
commits record the statistics the writer held, so declarative checks judge them; a failed audit publishes nothing
(no object, no completed upload). An approval whose wait a bucket lifecycle rule (``AbortIncompleteMultipartUpload``)
could outlive is refused at setup, before anything is written: read from the bucket's lifecycle configuration,
rule by rule (prefix, status, tag filters), and under Airflow (``dag.test()``, the connection ``commit_s3``).
"""

from __future__ import annotations

import importlib
import sys
from datetime import datetime, timedelta

import boto3
import pytest

from airflow_commit_provider.protocol import AuditFailed, make_committer, run_task_attempt
from airflow_commit_provider.protocol.audit import Audit, checks
from airflow_commit_provider.protocol.audit.expiry import approval_risk, approval_wait
from airflow_commit_provider.protocol.audit.run import AuditGate, run_audit

from ..conftest import DAGS_FOLDER, TEST_WORK
from ..protocol import scenario as sc
from .test_s3 import pending_uploads


def lifecycle(bucket: str, *rules: dict) -> None:
    boto3.client("s3").put_bucket_lifecycle_configuration(Bucket=bucket,
                                                          LifecycleConfiguration={"Rules": list(rules)})


def abort_rule(days: int, prefix: str = "", status: str = "Enabled", **filt) -> dict:
    return {"ID": f"abort-{days}d-{prefix or 'all'}", "Status": status, "Filter": filt or {"Prefix": prefix},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": days}}


def test_magic_task_commits_record_statistics_and_a_failed_audit_publishes_nothing(bucket):
    root = f"s3://{bucket}/out"
    c = make_committer(root, "job", algorithm="magic", mode="append", partition_by=["day"])
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    audit = Audit(checks=[checks.Between("row", 0, 3)])   # rows 0..5: every task breaks it
    verdict = run_audit(c.job, audit, sc.TASKS, 1)
    assert not verdict.passed and verdict.blamed == list(range(sc.TASKS))
    assert verdict.summary["columns"]["row"]["max"] == sc.ROWS - 1, "read from the footers the writer held"
    with pytest.raises(AuditFailed):
        c.commit_job(sc.TASKS, gate=AuditGate(audit.digest()))
    assert sc.visible_files(root) == [] and len(pending_uploads(bucket)) == 2 * sc.TASKS, "staged, not visible"
    c.abort_job()   # a purge: Hadoop's abortJob
    assert pending_uploads(bucket) == []


def test_the_lifecycle_rules_that_bound_an_approval(bucket):
    magic = make_committer(f"s3://{bucket}/lake/events", "job", algorithm="magic")
    day = timedelta(days=1)
    assert approval_risk(magic.job, None) is None, "no lifecycle configuration: nothing expires"
    lifecycle(bucket, abort_rule(3, "other/"), abort_rule(1, "lake/", status="Disabled"),
              abort_rule(1, "lake/", And={"Prefix": "lake/", "Tags": [{"Key": "k", "Value": "v"}]}))
    assert approval_risk(magic.job, None) is None, "other prefixes, disabled rules, tag filters do not apply"
    lifecycle(bucket, abort_rule(7), abort_rule(2, "lake/"))
    risk = approval_risk(magic.job, 2 * day)
    assert risk is not None and risk.certain and "after 2 day(s)" in risk.message and "timeout" in risk.message
    assert approval_risk(magic.job, None).certain, "an approval without a timeout could outlive any rule"
    assert approval_risk(magic.job, 2 * day - timedelta(hours=1)) is None
    assert approval_risk(make_committer(f"s3://{bucket}/lake/events", "job", algorithm=1).job, None) is None, \
        "algorithm 1 stages plain objects: nothing expires"

    magic.setup_job()   # the approval never waits past the set-up time plus the rule's days
    created = datetime.fromisoformat(magic.job.require_job().created)
    assert approval_wait(magic.job, None, created) == (2 * day, created + 2 * day)
    assert approval_wait(magic.job, 3 * day, created + day) == (day, created + 2 * day)
    assert approval_wait(magic.job, timedelta(hours=1), created) == (timedelta(hours=1), created + 2 * day)
    with pytest.raises(AuditFailed, match="dropped the staged data already"):
        approval_wait(magic.job, None, created + 2 * day)


def test_a_magic_stage_whose_approval_could_outlive_the_bucket_lifecycle_is_refused_at_setup(bucket, airflow_db,
                                                                                              monkeypatch):
    monkeypatch.setenv("COMMIT_TEST_S3_BUCKET", bucket)
    lifecycle(bucket, abort_rule(1))
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.insert(0, str(DAGS_FOLDER))
    (TEST_WORK / "calls.log").unlink(missing_ok=True)
    sys.modules.pop("audit_s3_test_dags", None)
    dags = importlib.import_module("audit_s3_test_dags")
    dr = dags.s3_audit_magic_approval.test()
    from airflow.utils.session import create_session

    with create_session() as session:
        states = {ti.task_id: ti.state for ti in dr.get_task_instances(session=session)}
    assert dr.state == "failed" and states["load.setup"] == "failed", states
    assert states["load.write"] == "upstream_failed" and states["load.approve"] == "upstream_failed", states
    assert not (TEST_WORK / "calls.log").exists(), "no write ran"
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount") == 0 and pending_uploads(bucket) == []
    from airflow_commit_provider.plugins import app as plugin_app

    stage = plugin_app.build_model(dr.dag_id, dr.run_id, "v").summary.stages[0]
    assert stage.state == "refused" and "AbortIncompleteMultipartUpload after 1 day(s)" in stage.error


@pytest.mark.parametrize("algorithm", [1, "magic"])
def test_an_audited_job_on_s3_commits_after_its_checks_its_callable_and_its_approval(bucket, algorithm):
    """Algorithm 1 on S3: the data callable reads the staged objects (through s3fs); magic: checks only. Both wait
    for the approval."""
    from airflow_commit_provider.protocol.audit import Approval
    from airflow_commit_provider.protocol.audit.run import decide_approval, request_approval

    root = f"s3://{bucket}/out"
    c = make_committer(root, "job", algorithm=algorithm, mode="append", partition_by=["day"])
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    seen = {}

    def data(dataset):
        seen["rows"] = sorted((r["task"], r["row"], r["day"]) for r in dataset.to_table().to_pylist())
        return True

    audit = Audit(checks=[checks.Rows(min=sc.ROWS, per="task")], data=data if algorithm == 1 else None,
                  approval=Approval(timeout=timedelta(hours=1)))
    assert run_audit(c.job, audit, sc.TASKS, 1).passed
    if algorithm == 1:
        assert seen["rows"] == sorted((t, i, f"d{i % 2}") for t in range(sc.TASKS) for i in range(sc.ROWS))
    request_approval(c.job, None, None)
    decide_approval(c.job, "approved", "ann")
    assert sc.visible_files(root) == [], "nothing visible before the commit"
    manifest = c.commit_job(sc.TASKS, gate=AuditGate(audit.digest(), approval=True))
    sc.assert_exactly_once(sc.read_rows(root))
    assert manifest["audit"]["approval"]["state"] == "approved" and pending_uploads(bucket) == []
