"""OpenLineage output facets of the commit task, through Airflow's OpenLineage provider and a real transport.

The provider decides at import whether it is enabled (a transport configured), so each run is a process of its
own: ``dag.test()`` of a stage whose first commit try dies after withdrawing the markers (an injected fault) and
whose retry commits. The file transport writes every event the listener emits; the test reads them back: the
failed try reports no output, the committed one the target with its statistics, schema and lifecycle change.
A second process, with every OpenLineage module made unimportable, builds and imports everything of the package:
the integration is optional and nothing of it is imported when it is absent.
"""

from __future__ import annotations

import shutil

import pytest

from airflow_commit_provider.operators.lineage import dataset_name
from airflow_commit_provider.protocol import read_success_marker

from ..conftest import TEST_ROOT, TEST_WORK
from ..protocol import scenario as sc
from .openlineage_runs import run_code, run_dags

pytest.importorskip("airflow.providers.openlineage", reason="the optional openlineage extra is not installed")


def test_dataset_names_follow_the_openlineage_naming_spec():
    assert dataset_name("file:///data/events") == ("file", "/data/events")
    assert dataset_name("/data/events") == ("file", "/data/events")
    assert dataset_name("s3://lake/events/daily") == ("s3://lake", "events/daily")
    assert dataset_name("s3://lake") == ("s3://lake", "/")
    assert dataset_name("gs://lake/events") == ("gs://lake", "events")
    assert dataset_name("memory:///scratch/x") == ("memory://", "/scratch/x")


@pytest.mark.airflow
def test_commit_reports_its_output_through_a_real_transport(airflow_db):
    dag_id = "ct_overwrite_v1"
    target = TEST_ROOT / dag_id
    proc, events = run_dags("commit_test_dags", f'report(commit_test_dags.{dag_id}.test().state)',
                             TEST_WORK / "openlineage.jsonl",
                             COMMIT_PROVIDER_FAULTS="commit_job.after_withdraw=raise")
    assert "STATE success" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = read_success_marker(str(target), verify_files=True)

    commit = [e for e in events if e["job"]["name"] == f"{dag_id}.stage.commit"]
    assert [e["eventType"] for e in commit] == ["START", "FAIL", "START", "COMPLETE"], [e["eventType"] for e in
                                                                                        commit]
    assert commit[1]["outputs"] == [], "a failed commit reports nothing as written"
    [output] = commit[3]["outputs"]
    assert (output["namespace"], output["name"]) == ("file", str(target))
    stats = output["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (
        40, manifest["totals"]["bytes"], manifest["totals"]["files"])
    fields = {f["name"]: f["type"] for f in output["facets"]["schema"]["fields"]}
    assert fields == {"task": "int32", "row": "int32", "attempt": "int32", "day": "string"}
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "OVERWRITE"
    writes = [e for e in events if e["job"]["name"].startswith(f"{dag_id}.stage.write")]
    assert writes and all(e["outputs"] == [] for e in writes), "only the commit publishes"


@pytest.mark.airflow
def test_a_table_stage_reports_the_table_and_its_version(airflow_db):
    """The Delta and the Iceberg stage of ``tbl_deploy``: each commit's output is the table (Delta: its location;
    Iceberg: its identifier, in the namespace of its files, with a symlink to its location) and the version or
    snapshot its transaction made. One commit's first try fails right after its table transaction (the fault
    fires once in the process): that try reports nothing, its retry the table at the version that try made."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    import deltalake
    from pyiceberg.catalog.sql import SqlCatalog

    proc, events = run_dags("table_test_dags", 'report(table_test_dags.tbl_deploy.test().state)',
                             TEST_WORK / "openlineage-tables.jsonl", COMMIT_PROVIDER_FAULTS="table_commit.after=raise")
    assert "STATE success" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    root = TEST_ROOT / "tbl_deploy"
    warehouse = root / "iceberg"
    iceberg = SqlCatalog("commit_provider", uri=f"sqlite:///{warehouse}/catalog.db",
                         warehouse=f"file://{warehouse}").load_table("deploy.events")
    want = {"delta": ("file", str(root / "delta"), str(deltalake.DeltaTable(str(root / "delta")).version())),
            "iceberg": ("file", "deploy.events", str(iceberg.current_snapshot().snapshot_id))}
    failed = 0
    for stage, (namespace, name, version) in want.items():
        commit = [e for e in events if e["job"]["name"] == f"tbl_deploy.{stage}.commit"]
        types = [e["eventType"] for e in commit]
        assert types in (["START", "COMPLETE"], ["START", "FAIL", "START", "COMPLETE"]), (stage, types)
        failed += types.count("FAIL")
        assert all(e["outputs"] == [] for e in commit if e["eventType"] == "FAIL")
        [output] = commit[-1]["outputs"]
        assert (output["namespace"], output["name"]) == (namespace, name), stage
        assert output["facets"]["version"]["datasetVersion"] == version, stage
        assert output["outputFacets"]["outputStatistics"]["rowCount"] == 40, stage
        fields = {f["name"] for f in output["facets"]["schema"]["fields"]}
        assert fields == {"shard", "row", "try", "day"}, stage
        if stage == "iceberg":
            [link] = output["facets"]["symlinks"]["identifiers"]
            assert (link["namespace"], link["name"], link["type"]) == (
                "file", iceberg.location().removeprefix("file://"), "LOCATION")
    assert failed == 1, "the fault fires once in the process: one commit failed after its transaction"


def test_nothing_of_openlineage_is_imported_when_it_is_absent():
    proc = run_code("""
        import importlib.abc, sys

        # the OpenLineage client and what of the provider the package could use (Airflow itself reads the
        # provider's get_provider_info when it discovers providers: that one is Airflow's, not ours)
        BLOCKED = ("openlineage", "airflow.providers.openlineage.extractors", "airflow.providers.openlineage.plugins",
                   "airflow.providers.common.compat.openlineage")

        class NoOpenLineage(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.startswith(BLOCKED):
                    raise ImportError(f"{name} is not installed (test)")

        sys.meta_path.insert(0, NoOpenLineage())
        from datetime import datetime
        from airflow.sdk import DAG
        import airflow_commit_provider.operators.lineage
        from airflow_commit_provider.decorators.commit_stage import commit_stage_task
        from airflow_commit_provider.operators.stage import commit_stage
        from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor
        from airflow_commit_provider.triggers.success_marker import SuccessMarkerTrigger
        from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger
        with DAG("no_ol", schedule=None, start_date=datetime(2024, 1, 1)):
            commit_stage("stage", target="/tmp/x", python_callable=print, expand_op_kwargs=[{}])
        loaded = [m for m in sys.modules if m.startswith(BLOCKED)]
        print("LOADED", loaded)
        """)
    assert "LOADED []" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.airflow
def test_a_rerun_that_replaced_its_own_generation_says_so(airflow_db):
    """``ct_append_v1`` run, then its run cleared after success (same run id: a new generation of the job, which
    replaces the first generation's 40 rows in ``append`` mode). The second COMPLETE reports 40 rows written, and
    a consumer adding up ``outputStatistics`` would count 80: so the output names the generation it replaced and
    what that generation held (a facet of this provider's; OpenLineage's ``OVERWRITE`` would claim the whole
    target was replaced, which is false in ``append`` mode, where other jobs' rows stay). The first COMPLETE
    carries no such facet."""
    dag_id = "ct_append_v1"
    target = TEST_ROOT / dag_id
    proc, events = run_dags("commit_test_dags", f"""
        from datetime import datetime, timezone
        day = datetime(2024, 7, 1, tzinfo=timezone.utc)
        for _ in range(2):   # the run, then a clear of it after its success
            report(commit_test_dags.{dag_id}.test(logical_date=day, run_after=day).state)
        """, TEST_WORK / "openlineage-rerun.jsonl")
    assert proc.stdout.count("STATE success") == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = read_success_marker(str(target), verify_files=True)
    assert manifest["generation"] == 1 and manifest["totals"]["rows"] == 40

    complete = [e for e in events if e["job"]["name"] == f"{dag_id}.stage.commit" and e["eventType"] == "COMPLETE"]
    assert len(complete) == 2
    [first], [second] = (e["outputs"] for e in complete)
    assert "commitProvider_replacedGeneration" not in first["facets"], "the first generation replaced nothing"
    assert second["outputFacets"]["outputStatistics"]["rowCount"] == 40
    replaced = second["facets"]["commitProvider_replacedGeneration"]
    assert (replaced["jobUuid"], replaced["generation"]) == (manifest["replaced_generation"], 0)
    assert (replaced["rowCount"], replaced["fileCount"]) == (40, first["outputFacets"]["outputStatistics"][
        "fileCount"])
    assert replaced["size"] == first["outputFacets"]["outputStatistics"]["size"]
    assert replaced["_schemaURL"].endswith("ReplacedGenerationDatasetFacet.json") and replaced["_producer"]
    assert "lifecycleStateChange" not in second["facets"], "append mode: the rest of the target stays"
    net = sum(e["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"]
              - e["outputs"][0]["facets"].get("commitProvider_replacedGeneration", {}).get("rowCount", 0)
              for e in complete)
    assert net == len(sc.read_rows(str(target))) == 40


@pytest.mark.airflow
def test_maintenance_reads_and_rewrites_its_target(airflow_db):
    """``ct_maintenance``: a deduplication that deletes one file, then a compaction merging eight into one. Each
    reports the target as its input and its output; the compaction's output carries the statistics of the file it
    wrote (every row, once), the deduplication's none written; neither says the dataset was overwritten."""
    from .test_dag_test import hive_output_with_a_duplicate

    root = TEST_ROOT / "ct_maintenance"
    shutil.rmtree(root, ignore_errors=True)
    ids = hive_output_with_a_duplicate(str(root))
    proc, events = run_dags("commit_test_dags", 'report(commit_test_dags.ct_maintenance.test().state)',
                             TEST_WORK / "openlineage-maintenance.jsonl")
    assert "STATE success" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    want = ("file", str(root))
    for task, files, rows in (("dedup", 0, None), ("compact", 1, len(ids))):
        [done] = [e for e in events if e["job"]["name"] == f"ct_maintenance.{task}" and
                  e["eventType"] == "COMPLETE"]
        assert [(i["namespace"], i["name"]) for i in done["inputs"]] == [want], task
        [output] = done["outputs"]
        assert (output["namespace"], output["name"]) == want, task
        stats = output["outputFacets"]["outputStatistics"]
        assert (stats["fileCount"], stats.get("rowCount")) == (files, rows), task
        assert "lifecycleStateChange" not in output.get("facets", {}), task
