"""Airflow-native authoring under a real scheduler, dag-processor and triggerer (LocalExecutor).

- the README's TaskFlow DAG (``@task.commit_stage`` mapped over an upstream task, one try failing midway) runs end
  to end: rows read back exactly once, the downstream task receives the summary, and the commit task's
  OpenLineage COMPLETE event (the deployment's file transport) carries the output dataset and its statistics;
- a DAG scheduled on an asset whose ``CommittedOutputTrigger`` watcher runs in the triggerer runs once per
  upstream commit, each run triggered by that commit's asset event (the manifest in its extra).

Every step waits for an observable state (REST API, files the tasks write); a timeout only fails.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from airflow_commit_provider.operators.summary import CommitSummary
from airflow_commit_provider.protocol import read_success_marker

from ..protocol import scenario as sc

pytestmark = pytest.mark.deployment


def test_decorated_stage_with_a_failing_try(deployment):
    dep, dag_id, run_id = deployment, "tf_decorator", "rest-taskflow"
    (dep.work / f"fail-{dag_id}-2-1").touch()   # shard 2's first try dies after writing half its rows
    dep.trigger(dag_id, run_id)
    assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)
    root = dep.root / dag_id / "load_shard"
    rows = sc.read_rows(str(root))
    assert sorted((r["shard"], r["row"]) for r in rows) == [(s, r) for s in range(4) for r in range(10)]
    lines = (dep.work / "calls.log").read_text().splitlines()
    assert Counter(int(x.split()[2]) for x in lines if x.startswith(f"{dag_id} load_shard ")) == {0: 1, 1: 1, 2: 2,
                                                                                                   3: 1}
    manifest = read_success_marker(str(root), verify_files=True)
    summary = CommitSummary.from_xcom(json.loads((dep.work / f"summary-{dag_id}-load_shard.json").read_text()))
    assert (summary.rows, summary.files, summary.job_uuid) == (40, manifest["totals"]["files"],
                                                               manifest["job_uuid"])

    def commit_completed() -> list[dict]:
        return [e for e in dep.openlineage_events() if e.get("eventType") == "COMPLETE"
                and e.get("job", {}).get("name") == f"{dag_id}.load_shard.commit"]

    dep.wait_for(commit_completed, "the commit task's OpenLineage COMPLETE event", timeout=120)
    [event] = commit_completed()
    [output] = event["outputs"]
    assert (output["namespace"], output["name"]) == ("file", str(root))
    stats = output["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (40, manifest["totals"]["bytes"],
                                                                      manifest["totals"]["files"])
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "OVERWRITE"


def test_asset_watcher_runs_the_downstream_dag_once_per_commit(deployment):
    dep = deployment
    dep.wait_dag("tf_watched")
    [asset] = dep.api("GET", "/assets", params={"name_pattern": "tf_watched_events"})["assets"]

    def downstream() -> list[dict]:
        return dep.api("GET", "/dags/tf_watched/dagRuns")["dag_runs"]

    uuids = []
    for n, run_id in enumerate(("rest-watch-1", "rest-watch-2"), 1):
        dep.trigger("tf_watch_source", run_id)
        assert dep.wait_run("tf_watch_source", run_id) == "success", dep.ti_states("tf_watch_source", run_id)
        uuids.append(read_success_marker(str(dep.root / "tf_watch_source" / "events"))["job_uuid"])
        # the watcher (in the triggerer) fires, the asset event schedules a run of tf_watched
        dep.wait_for(lambda: len(downstream()) == n and all(r["state"] == "success" for r in downstream()),
                     f"downstream run {n}, successful", timeout=300)
    triggered_by = [json.loads((dep.work / f"watched-{r['dag_run_id']}.json").read_text()) for r in downstream()]
    assert sorted(triggered_by) == sorted([[u] for u in uuids]), "each run by one commit's asset event"
    # listed once every run it created has started (Airflow 3.3's /assets/events answers 500 for an event whose
    # created run has no start date yet)
    fired = dep.api("GET", "/assets/events", params={"asset_id": asset["id"], "order_by": "timestamp"})[
        "asset_events"]
    assert [e["extra"]["payload"]["job_uuid"] for e in fired] == uuids, "one event per commit, none twice"
    assert fired[1]["extra"]["payload"]["totals"]["rows"] == 20 and fired[1]["extra"]["from_trigger"] is True
