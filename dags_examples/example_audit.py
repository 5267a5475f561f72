"""Write, audit, publish: nothing of a stage is visible until its audit passed (and, for the second DAG, until a
person approved it in Airflow's "Required actions").

``commit_audit`` checks four shards of events before its job commit: declarative checks on the statistics the
task commits recorded (every day written has rows, no null ids or amounts, amounts within bounds, the columns and
their types), then a callable that reads the staged files (unique event ids). To see an audit fail, set the
Airflow Variable ``commit_demo_broken_shard`` to a shard number (0-3): that shard writes a negative amount and a
null id, the audit fails naming it, and nothing is published. Delete the Variable and clear the run: only that
shard runs again, the others are recovered, the audit passes and the job commits.

``commit_audit_approval`` asks for an approval after its checks pass: the run waits in the task
``load_for_review.approve`` ("Required actions" in the UI) until someone answers; "Approve" publishes, "Reject"
publishes nothing (a clear of the run computes it again and asks again).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from _demo_data import ROOT, SHARDS, events, record_call
from airflow.sdk import DAG, Variable, task

from airflow_commit_provider.operators.stage import commit_stage

# [START audit_stage]
from airflow_commit_provider.protocol.audit import Approval, Audit, AuditFailed, checks


def unique_event_ids(dataset) -> None:
    """Reads the staged files (a pyarrow dataset of exactly what the job commit would publish)."""
    ids = dataset.to_table(columns=["event_id"]).column("event_id")
    duplicates = len(ids) - len(pc.unique(ids))
    if duplicates:
        raise AuditFailed(f"{duplicates} duplicate event ids")


EVENTS_AUDIT = Audit(
    checks=[checks.Rows(min=1, per="partition"),                  # every day written has rows
            checks.NotNull("event_id", "amount"),                  # the tasks that wrote a null are blamed
            checks.Between("amount", min=0, max=100),
            checks.Columns({"event_id": "int64", "amount": "double", "day": None})],
    data=unique_event_ids)


def load_shard(shard: int, ti):
    record_call("load_shard", ti)
    return broken(events(shard)) if str(shard) == Variable.get("commit_demo_broken_shard", "") else events(shard)


with DAG("commit_audit", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": timedelta(seconds=1)},
         tags=["airflow-commit-provider", "example"]) as dag:
    commit_stage("write_events", target=os.path.join(ROOT, "audited_events"), python_callable=load_shard,
                 expand_op_kwargs=[{"shard": s} for s in range(SHARDS)], mode="dynamic", partition_by=["day"],
                 audit=EVENTS_AUDIT)
# [END audit_stage]


def broken(table):
    """A shard as a bad source delivers it: a negative amount and a null event id."""
    ids, amount = table.column("event_id").to_pylist(), table.column("amount").to_pylist()
    ids[1], amount[0] = None, -1.0
    return table.set_column(0, "event_id", pa.array(ids, pa.int64())).set_column(3, "amount", pa.array(amount))


with DAG("commit_audit_approval", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider", "example"]) as approval_dag:
    # [START audit_approval]
    @task.commit_stage(target=os.path.join(ROOT, "reviewed_events"), mode="append",
                       audit=Audit(checks=[checks.Rows(min=1), checks.NotNull("event_id")],
                                   approval=Approval(timeout=timedelta(hours=4))))
    def load_for_review(shard: int, ti=None):
        record_call("load_for_review", ti)
        return events(shard, rows=100)

    load_for_review.expand(shard=list(range(SHARDS)))   # setup >> write >> audit >> approve >> commit
    # [END audit_approval]
