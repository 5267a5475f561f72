"""Recovery recovers only what can still commit, under ``dag.test()``: a run whose code adds a column the Delta
and Iceberg tables lack is refused at its commit (once, not retried); the code is reverted and the run cleared: the
write tasks' code runs again (not recovered from the refused attempt), the commit succeeds, and each table reads
back every row exactly once with its own reader. A directory stage whose code changed its schema between a failed
run and its clear is refused at its commit the same way, and its next clear runs the old-schema shards again."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import pytest

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags

pytestmark = pytest.mark.airflow


@pytest.fixture
def dags(airflow_db):
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    return fresh_test_dags("table_test_dags")


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


def test_a_directory_stage_cleared_after_a_schema_change_reruns_the_old_schema_shards(dags):
    """A directory of Parquet files: run 1 commits shards 0-2 and shard 3 fails every try; the code then adds a
    column and the run is cleared: shards 0-2 (old schema) are recovered, shard 3 runs the new code, and the
    commit refuses (once, not retried) before anything is visible. The next clear runs shards 0-2 again, recovers
    shard 3, and the directory reads back with one schema, every row once."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    dag, day = dags.dir_schema, datetime(2024, 5, 3, tzinfo=timezone.utc)
    root, fail = TEST_ROOT / "dir_schema", TEST_WORK / "fail-dir_schema-3"
    fail.touch()
    assert dag.test(logical_date=day, run_after=day).state == "failed"
    assert calls() == {"write": 3 + 2}
    fail.unlink()
    (TEST_WORK / "extra-column-dir_schema").touch()                        # the code adds a column
    dr = dag.test(logical_date=day, run_after=day)                          # the whole run cleared
    st = states(dr)
    assert dr.state == "failed" and st["commit[-1]"][0] == "failed" and st["abort[-1]"][0] == "success", st
    assert calls() == {"write": 3 + 2 + 1}, "shards 0-2 were recovered, shard 3 ran the new code"
    assert not any(p.suffix == ".parquet" for p in root.glob("day=*/*")), "nothing visible"
    dr = dag.test(logical_date=day, run_after=day)                          # cleared again
    assert dr.state == "success", states(dr)
    assert calls() == {"write": 3 + 2 + 1 + 3}, "the refused shards ran again, shard 3 was recovered"
    dataset = ds.dataset(str(root), format="parquet", partitioning="hive")
    assert len({pq.read_schema(f).remove_metadata() for f in dataset.files}) == 1
    t = dataset.to_table()
    assert Counter(zip(t["shard"].to_pylist(), t["row"].to_pylist())) == {(s, r): 1 for s in range(4)
                                                                          for r in range(10)}
    assert set(t["note"].to_pylist()) == {"new"}
