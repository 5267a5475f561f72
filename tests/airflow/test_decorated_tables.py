"""``@task.commit_stage`` into a Delta table under ``dag.test()``: one write's first try fails and its retry
redoes it; the table, read with deltalake, holds every row once, added by one transaction; the callable ran once
per task plus the retry. (Iceberg through the decorator:
``test_dag_test.py::test_example_tables_dag_commits_each_job_once_per_table``.)"""

from __future__ import annotations

from collections import Counter

import pytest

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags

pytestmark = pytest.mark.airflow


@pytest.fixture
def dags(airflow_db):
    pytest.importorskip("deltalake")
    return fresh_test_dags("deco_table_test_dags")


def test_a_decorated_delta_stage_with_a_failing_try_adds_each_row_once_in_one_transaction(dags):
    import deltalake
    import pyarrow as pa

    (TEST_WORK / "fail-dt_delta-1-1").touch()
    dr = dags.dt_delta.test()
    assert dr.state == "success"
    lines = (TEST_WORK / "calls.log").read_text().splitlines()
    assert Counter((int(n), int(tr)) for d, n, tr in map(str.split, lines) if d == "dt_delta") == {
        (0, 1): 1, (1, 1): 1, (1, 2): 1, (2, 1): 1}
    table = deltalake.DeltaTable(str(TEST_ROOT / "dt_delta"))
    rows = pa.table(table.to_pyarrow_table())
    assert Counter(zip(rows["n"].to_pylist(), rows["row"].to_pylist())) == {(n, r): 1 for n in range(3)
                                                                            for r in range(10)}
    assert dict(zip(rows["n"].to_pylist(), rows["try"].to_pylist())) == {0: 1, 1: 2, 2: 1}
    assert table.version() == 0, "one transaction for the job commit"
