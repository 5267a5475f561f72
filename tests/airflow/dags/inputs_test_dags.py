"""Stages whose mapped list changes between a failed run and its clear (tests/airflow/test_task_inputs.py).

Controlled by files in ``COMMIT_TEST_WORK``: ``<dag_id>-items`` holds the list (comma-separated; default
``a,b,c``): ``in_operator`` reads it when the DAG file is parsed (a DAG edit), ``in_decorator``'s upstream task
when it runs (an upstream XCom that now returns other values). ``fail-<dag_id>-<item>-always`` makes every try
of the write given that item fail. Every call of a write callable is appended to ``calls.log`` as ``<dag_id>
<map_index> <item> <shard_index> <try>``. Targets are ``<COMMIT_TEST_ROOT>/<dag_id>`` (``in_operator``'s unmapped
stage: ``<COMMIT_TEST_ROOT>/in_operator_single``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pyarrow as pa
from airflow.sdk import DAG, task

from airflow_commit_provider.operators.stage import commit_stage

ROOT = os.environ.get("COMMIT_TEST_ROOT", "/tmp/commit-test-root")
WORK = os.environ.get("COMMIT_TEST_WORK", "/tmp/commit-test-work")
ROWS = 5
DEFAULTS = {"retries": 1, "retry_delay": timedelta(seconds=0.2)}


def items_of(dag_id: str) -> list[str]:
    path = os.path.join(WORK, f"{dag_id}-items")
    return open(path).read().split(",") if os.path.exists(path) else ["a", "b", "c"]


def item_rows(item: str, ti, shard_index: int = 0) -> pa.Table:
    """The rows of *item* (and shard); fails every try while ``fail-<dag_id>-<item>-always`` exists."""
    with open(os.path.join(WORK, "calls.log"), "a") as fh:
        fh.write(f"{ti.dag_id} {ti.map_index} {item} {shard_index} {ti.try_number}\n")
    if os.path.exists(os.path.join(WORK, f"fail-{ti.dag_id}-{item}-always")):
        raise RuntimeError(f"injected failure of the write given {item!r}, try {ti.try_number}")
    return pa.table({"item": [item] * ROWS, "shard": pa.array([shard_index] * ROWS, pa.int32()),
                     "row": pa.array(range(ROWS), pa.int32())})


with DAG("in_operator", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as in_operator:
    mapped = commit_stage("stage", target=os.path.join(ROOT, "in_operator"), python_callable=item_rows,
                          expand_op_kwargs=[{"item": i} for i in items_of("in_operator")], mode="append")
    # an unmapped write given element 1; its commit waits for the mapped stage's, so it fails with it
    single = commit_stage("single", target=os.path.join(ROOT, "in_operator_single"), python_callable=item_rows,
                          op_kwargs={"item": items_of("in_operator")[1]}, mode="append")
    mapped.children["stage.commit"] >> single.children["single.commit"]


with DAG("in_decorator", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=DEFAULTS,
         tags=["airflow-commit-provider-tests"]) as in_decorator:
    @task
    def items() -> list[str]:
        return items_of("in_decorator")

    @task.commit_stage(target=os.path.join(ROOT, "in_decorator"), mode="append", shards_per_task=2)
    def load(item: str, shard_index: int, ti=None) -> pa.Table:
        return item_rows(item, ti, shard_index)

    load.expand(item=items())
