"""Recovery recovers only what can still commit, under ``dag.test()``: a run whose code adds a column the Delta
and Iceberg tables lack is refused at its commit (once, not retried); the code is reverted and the run cleared: the
write tasks' code runs again (not recovered from the refused attempt), the commit succeeds, and each table reads
back every row exactly once with its own reader."""

from __future__ import annotations

import importlib
import shutil
import sys
from collections import Counter
from datetime import datetime, timezone

import pytest

from ..conftest import DAGS_FOLDER, TEST_ROOT, TEST_WORK

pytestmark = pytest.mark.airflow


@pytest.fixture
def dags(airflow_db):
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.insert(0, str(DAGS_FOLDER))
    for path in list(TEST_WORK.iterdir()) + list(TEST_ROOT.iterdir()):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return importlib.import_module("table_test_dags")


def states(dr) -> dict[str, tuple[str, int]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{ti.task_id}[{ti.map_index}]": (ti.state, ti.try_number)
                for ti in dr.get_task_instances(session=session)}


def calls() -> Counter:
    """Calls of the write callable per stage (``calls.log``: dag, task group, shard, try)."""
    path = TEST_WORK / "calls.log"
    return Counter(line.split()[1] for line in path.read_text().splitlines()) if path.exists() else Counter()


def table_rows(stage: str):
    root = TEST_ROOT / "tbl_schema" / stage
    if stage == "delta":
        import deltalake
        return deltalake.DeltaTable(str(root)).to_pyarrow_table()
    from airflow_commit_provider.protocol.tables.iceberg import IcebergTarget
    return IcebergTarget.open("schema.events", None, str(root)).catalog.load_table("schema.events").scan().to_arrow()


def test_a_cleared_run_reruns_the_tasks_whose_schema_its_commit_refused(dags):
    dag = dags.tbl_schema
    first, second = datetime(2024, 5, 1, tzinfo=timezone.utc), datetime(2024, 5, 2, tzinfo=timezone.utc)
    assert dag.test(logical_date=first, run_after=first).state == "success"   # makes the tables
    marker = TEST_WORK / "extra-column-tbl_schema"
    marker.touch()                                                           # the code adds a column
    dr = dag.test(logical_date=second, run_after=second)
    st = states(dr)
    assert dr.state == "failed"
    for stage in ("delta", "iceberg"):
        assert st[f"{stage}.commit[-1]"] == ("failed", 1), "a schema refusal is not retried"
        assert st[f"{stage}.abort[-1]"][0] == "success"
    marker.unlink()                                                          # reverted
    dr = dag.test(logical_date=second, run_after=second)                     # the whole run cleared
    assert dr.state == "success", states(dr)
    assert calls() == {"delta": 12, "iceberg": 12}, "the refused tasks' code ran again on the clear"
    for stage in ("delta", "iceberg"):
        t = table_rows(stage)
        assert "note" not in t.column_names
        pairs = Counter(zip(t["shard"].to_pylist(), t["row"].to_pylist()))
        assert pairs == {(s, r): 2 for s in range(4) for r in range(10)}, f"{stage}: two jobs, each row once"
