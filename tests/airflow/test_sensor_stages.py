"""``SuccessMarkerSensor`` in poke mode and deferrable (its trigger run inline by ``dag.test()``) waiting on the
output of a ``@task.commit_stage`` stage, a sharded stage (``shards_per_task=2``) and a keyed stage (``job_key``),
each run twice (the second run replaces the first's rows: overwrite, or the key's next generation): every sensor
returns the marker of the second run's commit, whose files it verified; the rows are there once, the second run's;
the user callables ran once per task per run."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags
from ..protocol import scenario as sc

pytestmark = pytest.mark.airflow

TASKS = {"decorated": 2, "sharded": 4, "keyed": 2}


@pytest.fixture
def dags(airflow_db):
    return fresh_test_dags("sensor_stage_test_dags")


def test_sensors_wait_on_decorated_sharded_and_keyed_stages(dags):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    day = datetime(2024, 7, 1, tzinfo=timezone.utc)
    runs = [dags.ss_producers.test(logical_date=day + timedelta(days=n), run_after=day + timedelta(days=n))
            for n in (0, 1)]
    assert [r.state for r in runs] == ["success", "success"]
    lines = (TEST_WORK / "calls.log").read_text().splitlines()
    assert Counter((stage, int(task)) for d, stage, task, _ in map(str.split, lines) if d == "ss_producers") == {
        (stage, t): 2 for stage, n in TASKS.items() for t in range(n)}, "each task once per run"

    dr = dags.ss_sensors.test()
    assert dr.state == "success"
    with create_session() as session:
        values = {x.task_id: x.value for x in session.query(XComModel).filter_by(
            dag_id="ss_sensors", run_id=dr.run_id, key="return_value")}
    assert set(values) == {f"{how}_{stage}" for how in ("poke", "defer") for stage in TASKS}
    for stage, tasks in TASKS.items():
        root = str(TEST_ROOT / "ss_producers" / stage)
        marker = read_success_marker(root, verify_files=True)
        rows = sc.read_rows(root)
        assert Counter((r["task"], r["row"]) for r in rows) == {(t, i): 1 for t in range(tasks) for i in range(10)}
        assert {r["run"] for r in rows} == {runs[1].run_id}, f"{stage}: the second run's rows only"
        for how in ("poke", "defer"):
            got = values[f"{how}_{stage}"]
            got = got if isinstance(got, dict) else json.loads(got)
            assert (got["job_uuid"], got["totals"]["rows"]) == (marker["job_uuid"], tasks * 10), (how, stage)
    keyed = read_success_marker(str(TEST_ROOT / "ss_producers" / "keyed"))
    assert keyed["generation"] == 1 and keyed["replaced_generation"] is not None
    assert read_success_marker(str(TEST_ROOT / "ss_producers" / "sharded"))["labels"]["shards_per_task"] == 2
