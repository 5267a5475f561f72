"""The operators under a real scheduler (LocalExecutor), triggered and cleared through the REST API.

A write task fails on its first try and is retried; then a run is made to fail after other tasks committed, is
cleared through the REST API (a new application attempt), and the committed tasks are recovered, not re-run.
"Clear only failed tasks" (no setup, no teardown) continues the same application attempt. The deferrable sensor
resumes through the real triggerer.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from airflow_commit_provider.protocol import read_success_marker

from ..protocol import scenario as sc

pytestmark = pytest.mark.deployment

ROWS = 10


def calls(dep, dag_id: str) -> Counter:
    path = dep.work / "calls.log"
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[1]) for line in path.read_text().splitlines() if line.split()[0] == dag_id)


def check_output(dep, dag_id: str) -> dict:
    root = str(dep.root / dag_id)
    sc.assert_exactly_once(sc.read_rows(root), tasks=4, per_task=ROWS, old=set())
    return read_success_marker(root, verify_files=True)


def test_retry_then_failure_then_full_clear_recovers(deployment):
    dep, dag_id, run_id = deployment, "ct_append_v1", "rest-clear-all"
    (dep.work / f"fail-{dag_id}-1-1").touch()        # task 1: first try dies midway, retry succeeds
    (dep.work / f"fail-{dag_id}-3-always").touch()   # task 3: fails every try -> the run fails
    dep.trigger(dag_id, run_id)
    assert dep.wait_run(dag_id, run_id) == "failed"
    states = dep.ti_states(dag_id, run_id)
    assert states["stage.write[1]"] == "success" and states["stage.write[3]"] == "failed"
    assert states["stage.abort[-1]"] == "success"
    assert calls(dep, dag_id) == {0: 1, 1: 2, 2: 1, 3: 2}
    assert sc.read_rows(str(dep.root / dag_id)) == [], "nothing of the failed run is visible"

    (dep.work / f"fail-{dag_id}-3-always").unlink()
    dep.clear(dag_id, run_id, only_failed=False)      # the whole run: setup runs again -> application attempt 1
    assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)
    assert calls(dep, dag_id) == {0: 1, 1: 2, 2: 1, 3: 3}, "committed tasks were recovered, not re-run"
    manifest = check_output(dep, dag_id)
    assert manifest["app_attempt"] == 1
    assert {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]} == {0: 0, 1: 0, 2: 0, 3: None}


def test_clear_only_failed_continues_the_application_attempt(deployment):
    dep, dag_id, run_id = deployment, "ct_overwrite_v1", "rest-clear-failed"
    (dep.work / f"fail-{dag_id}-2-always").touch()
    dep.trigger(dag_id, run_id)
    assert dep.wait_run(dag_id, run_id) == "failed"
    (dep.work / f"fail-{dag_id}-2-always").unlink()
    dep.clear(dag_id, run_id, only_failed=True)       # neither setup nor teardown runs again
    assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)
    assert calls(dep, dag_id) == {0: 1, 1: 1, 2: 3, 3: 1}
    manifest = check_output(dep, dag_id)
    assert manifest["app_attempt"] == 0, "no setup ran, so the application attempt is unchanged"
    assert all(t["recovered_from_app"] is None for t in manifest["tasks"])


def test_deferrable_sensor_resumes_through_the_triggerer(deployment):
    dep = deployment
    dep.trigger("ct_sensor", "rest-sensor")
    dep.wait_ti("ct_sensor", "rest-sensor", "wait_deferred[-1]", "deferred")
    # Airflow 3.3 race (apache/airflow#71580, #66374): if the trigger fires before the scheduler has processed
    # the executor's "success" event of the deferring try, the scheduler sees a state mismatch and fails the
    # task. Seen once here with a 5 s gap; give the scheduler time before the data appears.
    time.sleep(15)
    dep.trigger("ct_dynamic_v1", "rest-data")
    assert dep.wait_run("ct_dynamic_v1", "rest-data") == "success"
    assert dep.wait_run("ct_sensor", "rest-sensor") == "success", dep.ti_states("ct_sensor", "rest-sensor")
    for task_id in ("wait_deferred", "wait_poke"):
        value = dep.api("GET", f"/dags/ct_sensor/dagRuns/rest-sensor/taskInstances/{task_id}/xcomEntries/"
                               "return_value")["value"]
        manifest = value if isinstance(value, dict) else json.loads(value)
        assert manifest["totals"]["rows"] == 4 * ROWS and manifest["job_id"].startswith("ct_dynamic_v1__rest-data")
