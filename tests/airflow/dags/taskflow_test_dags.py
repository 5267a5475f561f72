"""DAGs written the TaskFlow way, as a DAG author would from the README: ``@task.commit_stage``, errors that fail
fast, and a job key per data interval.

Controlled at run time by files in ``COMMIT_TEST_WORK``, like ``commit_test_dags``: ``fail-<dag_id>-<shard>-<try>``
makes that try of that shard fail after writing half its rows; every call of a user callable is appended to
``calls.log`` (dag id, stage, shard, try); the downstream ``report`` task writes the summary it received to
``summary-<dag_id>-<stage>.json``; ``tf_watched`` (scheduled by an asset watcher on ``tf_watch_source``'s target)
writes the job uuids of the asset events that triggered each run to ``watched-<run_id>.json``. Targets are
``<COMMIT_TEST_ROOT>/<dag_id>/<stage>``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, Asset, AssetWatcher, TaskGroup, task

from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
ROWS = 10
SHARDS = 4
DEFAULTS = {"retries": 1, "retry_delay": timedelta(seconds=0.2)}


def target(dag_id: str, stage: str) -> str:
    return os.path.join(ROOT, dag_id, stage)


def record_call(ti, shard: int) -> None:
    stage = ti.task_id.split(".")[-2]
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.dag_id} {stage} {shard} {ti.try_number}\n")


def rows(shard: int, try_number: int, day_of=lambda r: f"d{r % 2}") -> pa.Table:
    return pa.table({"shard": pa.array([shard] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                     "try": pa.array([try_number] * ROWS, pa.int32()), "day": [day_of(r) for r in range(ROWS)]})


def fail_if_flagged(ti, shard: int) -> None:
    if os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-{shard}-{ti.try_number}")):
        raise RuntimeError(f"injected failure of shard {shard}, try {ti.try_number}")


@task
def report(summary: dict, ti=None) -> int:
    """A downstream task: receives the commit summary as its argument."""
    stage = ti.task_id.split(".")[-1].removeprefix("report_")
    with open(os.path.join(WORK, f"summary-{ti.dag_id}-{stage}.json"), "w") as fh:
        json.dump(summary, fh)
    return summary["rows"]


with DAG("tf_decorator", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as tf_decorator:
    @task
    def shards() -> list[int]:
        return list(range(SHARDS))

    @task
    def extract() -> None:
        open(os.path.join(WORK, "extracted-tf_decorator"), "w").close()

    # the README's usage: mapped over an upstream task's list; shard 2's first try fails midway
    @task.commit_stage(target=target("tf_decorator", "load_shard"), mode="dynamic", partition_by=["day"])
    def load_shard(shard: int, source: str, ti=None) -> pa.Table:
        record_call(ti, shard)
        if not os.path.exists(os.path.join(WORK, "extracted-tf_decorator")):
            raise RuntimeError("the stage ran before its upstream task")
        table = rows(shard, ti.try_number)
        fail_if_flagged(ti, shard)
        return table

    summary = load_shard.partial(source="api").expand(shard=shards())
    extract() >> summary
    report.override(task_id="report_load_shard")(summary)

    # a writer function (it names `writer`), unmapped, inside another TaskGroup
    with TaskGroup("exports"):
        @task.commit_stage(target=target("tf_decorator", "export"), mode="append")
        def export(shard: int, writer, ti=None) -> None:
            record_call(ti, shard)
            with writer.open_file(f"export-{shard:05d}.csv") as fh:
                fh.write(b"shard\n%d\n" % shard)
            writer.write(rows(shard, ti.try_number))

        report.override(task_id="report_export")(export(shard=7))


with DAG("tf_fail_fast", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 2, "retry_delay": timedelta(seconds=0.2)},
         tags=["airflow-commit-provider-tests"]) as tf_fail_fast:
    # a partition column the data does not have: the same on every try, so no try is retried
    @task.commit_stage(target=target("tf_fail_fast", "missing_column"), partition_by=["region"])
    def missing_column(shard: int, ti=None) -> pa.Table:
        record_call(ti, shard)
        return rows(shard, ti.try_number)

    missing_column.expand(shard=[0, 1])

    # a transient error (the store did not answer): retried, and the retry commits
    @task.commit_stage(target=target("tf_fail_fast", "flaky"), partition_by=["day"])
    def flaky(shard: int, ti=None) -> pa.Table:
        record_call(ti, shard)
        if ti.try_number == 1:
            raise ConnectionError("store unreachable (injected)")
        return rows(shard, ti.try_number)

    flaky.expand(shard=[0, 1])


with DAG("tf_job_key", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as tf_job_key:
    def load_day(shard: int, ti, data_interval_start) -> pa.Table:
        record_call(ti, shard)
        return rows(shard, ti.try_number, day_of=lambda r: data_interval_start.date().isoformat())

    # every run of one data interval is one job: a second run is a new generation replacing the first's files
    commit_stage("per_interval", target=target("tf_job_key", "per_interval"), python_callable=load_day,
                 expand_op_kwargs=[{"shard": s} for s in range(2)], mode="append", partition_by=["day"],
                 job_key="{{ data_interval_start }}")
    # the default: every run is its own job, so a second run of the interval appends its rows again
    commit_stage("per_run", target=target("tf_job_key", "per_run"), python_callable=load_day,
                 expand_op_kwargs=[{"shard": s} for s in range(2)], mode="append", partition_by=["day"])


with DAG("tf_key_after_failure", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args=DEFAULTS, tags=["airflow-commit-provider-tests"]) as tf_key_after_failure:
    def load_day_or_fail(shard: int, ti, data_interval_start) -> pa.Table:
        record_call(ti, shard)
        table = rows(shard, ti.try_number, day_of=lambda r: data_interval_start.date().isoformat())
        fail_if_flagged(ti, shard)
        return table

    # a run whose shard fails every try fails; the next run of the interval (another run id) is the same job
    commit_stage("keyed", target=target("tf_key_after_failure", "keyed"), python_callable=load_day_or_fail,
                 expand_op_kwargs=[{"shard": s} for s in range(3)], mode="append", job_key="{{ data_interval_start }}")

with DAG("tf_key_peek", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as tf_key_peek:
    # algorithm 1 (what the refusal of algorithm 2 with a job_key in append mode advises), and a reader between the
    # last task commit and the job commit, writing the (shard, row) pairs it sees to peek-<run_id>.json
    keyed_v1 = commit_stage("keyed", target=target("tf_key_peek", "keyed"), python_callable=load_day_or_fail,
                            expand_op_kwargs=[{"shard": s} for s in range(2)], mode="append", algorithm=1,
                            job_key="{{ data_interval_start }}")

    @task
    def peek(run_id=None) -> int:
        import pyarrow.dataset as ds

        root = target("tf_key_peek", "keyed")
        seen = ds.dataset(root, format="parquet").to_table().to_pylist() if os.path.isdir(root) else []
        with open(os.path.join(WORK, f"peek-{run_id}.json"), "w") as fh:
            json.dump([[r["shard"], r["row"]] for r in seen], fh)
        return len(seen)

    tf_key_peek.task_dict["keyed.write"] >> peek() >> tf_key_peek.task_dict["keyed.commit"]

# ------------------------------------------------- an asset watcher on a target: a DAG run per committed job
WATCHED = target("tf_watch_source", "events")

with DAG("tf_watch_source", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as tf_watch_source:
    @task.commit_stage(target=WATCHED, mode="append")
    def events(shard: int, ti=None) -> pa.Table:
        return rows(shard, ti.try_number)

    events.expand(shard=[0, 1])

watched_events = Asset("tf_watched_events", watchers=[AssetWatcher(
    name="tf_events_committed", trigger=CommittedOutputTrigger(target=WATCHED, poke_interval=1))])

with DAG("tf_watched", schedule=[watched_events], start_date=datetime(2024, 1, 1), catchup=False,
         tags=["airflow-commit-provider-tests"]) as tf_watched:
    @task
    def record_trigger(triggering_asset_events=None, run_id=None) -> list[str]:
        """Writes the job uuids of the asset events that triggered this run."""
        uuids = [event.extra["payload"]["job_uuid"] for events in triggering_asset_events.values()
                 for event in events]
        with open(os.path.join(WORK, f"watched-{run_id}.json"), "w") as fh:
            json.dump(uuids, fh)
        return uuids

    record_trigger()
