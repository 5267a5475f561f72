"""The operators under a real scheduler (LocalExecutor), triggered and cleared through the REST API.

A write task fails on its first try and is retried; then a run is made to fail after other tasks committed, is
cleared through the REST API (a new application attempt), and the committed tasks are recovered, not re-run.
"Clear only failed tasks" (no setup, no teardown) continues the same application attempt. The deferrable sensor
resumes through the real triggerer. A Spark-like writer that deletes its target and dies finds the target again on
its Airflow retry, thanks to the ensure-target ``pre_execute`` guard.

Nothing here depends on timing (load, Airflow's executor-event lag) or sleeps: every step waits for an observable
state (REST API, files the tasks write, the scheduler's record of an executor event); a timeout only fails.
"""

from __future__ import annotations

import json
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
    # the teardown did not run again: the commit deleted the records it renamed into _temporary/_trash itself
    assert not (dep.root / dag_id / "_temporary").exists(), sorted(p.name for p in (dep.root / dag_id).iterdir())


def test_deferrable_sensor_resumes_through_the_triggerer(deployment):
    """Both sensors wait for data that does not exist yet; the reschedule sensor is rescheduled once, the
    deferrable one resumes through the real triggerer; both return the manifest.

    Two Airflow 3.3 races fail a sensor when the executor's event of a try is processed by the scheduler *after*
    the task instance was put back to work: a reschedule poke whose event lags past the next poke
    (apache/airflow#71172), a deferred try whose trigger fires before its event is processed
    (apache/airflow#71580). Under load the lag is seconds, so no poke interval or sleep is safe. Instead, the
    order is enforced: the DAG is paused while the first poke is held in ``pre_execute`` (a paused DAG's tasks
    are neither rescheduled nor queued, but their executor events are processed), the data appears only once
    the scheduler has processed both tries' events, and the DAG is unpaused after that.
    """
    dep, dag_id, run_id = deployment, "ct_sensor", "rest-sensor"
    hold = dep.work / f"hold-{dag_id}-wait_poke"
    hold.touch()
    dep.trigger(dag_id, run_id)
    dep.wait_for(lambda: (dep.work / f"holding-{dag_id}-wait_poke-1").exists(), "first poke of wait_poke started")
    dep.wait_ti(dag_id, run_id, "wait_deferred[-1]", "deferred")
    dep.pause(dag_id, True)
    hold.unlink()                                     # the first poke runs, finds nothing: up_for_reschedule
    dep.wait_ti(dag_id, run_id, "wait_poke[-1]", "up_for_reschedule")
    for task_id, state in (("wait_poke", "up_for_reschedule"), ("wait_deferred", "deferred")):
        dep.wait_for(lambda: dep.executor_event_processed(dag_id, run_id, task_id, state),
                     f"scheduler processed the executor event of {task_id} ({state})")
    assert dep.ti_states(dag_id, run_id) == {"wait_poke[-1]": "up_for_reschedule",
                                             "wait_deferred[-1]": "deferred"}

    dep.trigger("ct_dynamic_v1", "rest-data")
    assert dep.wait_run("ct_dynamic_v1", "rest-data") == "success"
    # the triggerer fired: the task instance is scheduled to resume (it waits: the DAG is paused)
    dep.wait_ti(dag_id, run_id, "wait_deferred[-1]", "scheduled")
    dep.pause(dag_id, False)
    assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)
    for task_id in ("wait_deferred", "wait_poke"):
        ti = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        assert ti["try_number"] == 1, f"{task_id} succeeded on its first try"
        value = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/"
                               "return_value")["value"]
        manifest = value if isinstance(value, dict) else json.loads(value)
        assert manifest["totals"]["rows"] == 4 * ROWS and manifest["job_id"].startswith("ct_dynamic_v1__rest-data")
    assert "resum" in dep.task_log(dag_id, run_id, "wait_deferred", 1).lower()


def test_writer_retry_finds_its_target_thanks_to_the_pre_execute_guard(deployment):
    """A Spark-like INSERT OVERWRITE deletes its target and dies on try 1; its Airflow retry checks the target
    first ("Path does not exist"). With ``pre_execute=ensure_target_before_each_try(...)`` the retry succeeds;
    the same DAG without it fails."""
    dep, run_id = deployment, "rest-spark"
    for dag_id in ("ct_spark_guarded", "ct_spark_unguarded"):
        target = dep.root / dag_id
        target.mkdir()
        (target / "part-00000.txt").write_text("old data")
        (dep.work / f"fail-{dag_id}-0-1").touch()
        dep.trigger(dag_id, run_id)
    assert dep.wait_run("ct_spark_guarded", run_id) == "success", dep.ti_states("ct_spark_guarded", run_id)
    assert dep.wait_run("ct_spark_unguarded", run_id) == "failed"
    for dag_id in ("ct_spark_guarded", "ct_spark_unguarded"):
        assert calls(dep, dag_id) == {0: 2}, "try 1 died, try 2 was Airflow's retry"
    assert (dep.root / "ct_spark_guarded" / "part-00000.txt").read_text() == "written by try 2"
    assert not (dep.root / "ct_spark_unguarded").exists()
    guarded = dep.task_log("ct_spark_guarded", run_id, "insert_overwrite", 2)
    assert "ensure-target before try 2 of insert_overwrite" in guarded and "was missing: created it" in guarded
    assert "Path does not exist" in dep.task_log("ct_spark_unguarded", run_id, "insert_overwrite", 2)


def test_table_stages_retried_killed_after_their_transaction_and_cleared_after_success(deployment):
    """Delta and Iceberg under the real scheduler: a write try that fails midway, the commit task's first try
    SIGKILLed right after its table transaction (its retry resumes and adds nothing), then a clear after success
    (a new generation that replaces the first): every row exactly once in each table, by the format's reader."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    import deltalake
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    dep, dag_id, run_id = deployment, "tbl_deploy", "rest-tables"
    (dep.work / f"fail-{dag_id}-2-1").touch()
    for stage in ("delta", "iceberg"):
        (dep.work / f"kill-commit-{dag_id}-{stage}-1").touch()
    warehouse = dep.root / dag_id / "iceberg"

    def tables():
        delta = pa.table(deltalake.DeltaTable(str(dep.root / dag_id / "delta")).to_pyarrow_table())
        iceberg = SqlCatalog("commit_provider", uri=f"sqlite:///{warehouse}/catalog.db",
                             warehouse=f"file://{warehouse}").load_table("deploy.events")
        return delta, iceberg

    expected = [(s, r) for s in range(4) for r in range(10)]
    for generation in (0, 1):
        if generation:
            dep.clear(dag_id, run_id, only_failed=False)         # a clear after success: generation 1
        else:
            dep.trigger(dag_id, run_id)
        assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)
        delta, iceberg = tables()
        scanned = iceberg.scan().to_arrow()
        for t in (delta, scanned):
            assert sorted(zip(t["shard"].to_pylist(), t["row"].to_pylist())) == expected, generation
        assert deltalake.DeltaTable(str(dep.root / dag_id / "delta")).version() == generation
        assert len(iceberg.metadata.snapshots) == generation + 1
        if generation == 0:   # the commit's first try was killed after its transaction; the retry added nothing
            for stage in ("delta", "iceberg"):
                ti = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{stage}.commit")
                assert ti["try_number"] == 2, ti
                success = read_success_marker(str(dep.root / dag_id / stage) if stage == "delta" else
                                              f"{iceberg.location()}/data".removeprefix("file://"))
                assert success["table"]["already_committed"] is True, success["table"]


def test_table_stages_cleared_after_failure_recover_their_committed_shards(deployment):
    """Delta and Iceberg under the real scheduler: shard 3 fails every try, so the run fails and its teardown keeps
    the three committed shards; the table has no transaction yet. A clear of the whole run (a new application
    attempt) recovers shards 0-2 without calling their code, runs shard 3, and commits once: every row exactly once
    in each table, by the format's reader."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    import deltalake
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    dep, dag_id, run_id = deployment, "tbl_clear", "rest-tables-clear"
    failing = dep.work / f"fail-{dag_id}-3"
    failing.touch()
    dep.trigger(dag_id, run_id)
    assert dep.wait_run(dag_id, run_id) == "failed", dep.ti_states(dag_id, run_id)
    states = dep.ti_states(dag_id, run_id)
    assert states["delta.abort[-1]"] == states["iceberg.abort[-1]"] == "success", states
    assert not (dep.root / dag_id / "delta" / "_delta_log").exists(), "a failed run made no table transaction"
    failing.unlink()
    dep.clear(dag_id, run_id, only_failed=False)
    assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)
    warehouse = dep.root / dag_id / "iceberg"
    delta = pa.table(deltalake.DeltaTable(str(dep.root / dag_id / "delta")).to_pyarrow_table())
    iceberg = SqlCatalog("commit_provider", uri=f"sqlite:///{warehouse}/catalog.db",
                         warehouse=f"file://{warehouse}").load_table("clear.events")
    expected = [(s, r) for s in range(4) for r in range(10)]
    for t in (delta, iceberg.scan().to_arrow()):
        assert sorted(zip(t["shard"].to_pylist(), t["row"].to_pylist())) == expected
    assert deltalake.DeltaTable(str(dep.root / dag_id / "delta")).version() == 0
    assert len(iceberg.metadata.snapshots) == 1
    calls = [line.split() for line in (dep.work / "calls.log").read_text().splitlines()
             if line.startswith(f"{dag_id} ")]
    for stage in ("delta", "iceberg"):
        per_shard = {s: sorted(int(c[3]) for c in calls if c[1] == stage and int(c[2]) == s) for s in range(4)}
        assert all(len(per_shard[s]) == 1 for s in range(3)), per_shard   # recovered: their code not called again
        assert len(per_shard[3]) == 3, per_shard                          # two failed tries, then the clear's
