"""The operators under a real Airflow (``dag.test()``, SQLite): every scenario of application attempts.

Each test reads the output back with pyarrow row by row, and counts the user callable's invocations (appended to
a file by the callable itself) to prove that recovered tasks were not run again.
"""

from __future__ import annotations

import importlib
import os
from collections import Counter
from datetime import datetime, timezone

import pytest

from airflow_commit_provider.protocol import faults, read_success_marker

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags
from ..protocol import scenario as sc

pytestmark = pytest.mark.airflow

TASKS = 4
ROWS = 10


@pytest.fixture
def dags(airflow_db):
    return fresh_test_dags("commit_test_dags")


def calls(dag_id: str) -> Counter:
    path = TEST_WORK / "calls.log"
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[1]) for line in path.read_text().splitlines() if line.split()[0] == dag_id)


def flag(name: str) -> None:
    (TEST_WORK / name).touch()


def unflag(name: str) -> None:
    (TEST_WORK / name).unlink()


def run(dag, logical_date=None):
    """One dag.test() run. With *logical_date*, a second call re-runs the same DAG run (same run id, every task
    instance cleared): a DAG-run clear."""
    if logical_date is None:
        return dag.test()
    return dag.test(logical_date=logical_date, run_after=logical_date)


def states(dr) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{ti.task_id}[{ti.map_index}]": ti.state for ti in dr.get_task_instances(session=session)}


def target(dag_id: str) -> str:
    return str(TEST_ROOT / dag_id)


def check_output(dag_id: str, old: set | None = None, tasks: int = TASKS) -> dict:
    rows = sc.read_rows(target(dag_id))
    sc.assert_exactly_once(rows, tasks=tasks, per_task=ROWS, old=old)
    manifest = read_success_marker(target(dag_id), verify_files=True)
    assert manifest["totals"]["rows"] == tasks * ROWS
    assert not os.path.exists(os.path.join(target(dag_id), "_temporary"))
    return manifest


def test_write_retry_is_a_new_task_attempt(dags):
    flag("fail-ct_append_v1-2-1")  # task 2's first try dies after writing half its rows
    dr = run(dags.ct_append_v1)
    assert dr.state == "success", states(dr)
    manifest = check_output("ct_append_v1")
    assert calls("ct_append_v1") == {0: 1, 1: 1, 2: 2, 3: 1}
    assert {t["task"]: t["attempt"] for t in manifest["tasks"]}[2] == 2


def test_commit_task_leaves_the_record_deletion_to_the_teardown(dags):
    """The commit task returns after renaming the job's records into the trash (it does not delete them); the
    stage's teardown, which runs next, deletes them."""
    dr = run(dags.ct_append_v1)
    assert dr.state == "success", states(dr)
    check_output("ct_append_v1")   # _temporary is gone after the run
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        values = {x.task_id: x.value for x in session.query(XComModel).filter_by(
            dag_id="ct_append_v1", run_id=dr.run_id, key="return_value")}
    load = (lambda v: v if isinstance(v, dict) else __import__("json").loads(v))
    commit = load(values["stage.commit"])
    assert commit["diagnostics"]["cleanup_deferred"] is True
    assert load(values["stage.abort"])["trash_removed"] == 1


def test_commit_task_retry_resumes_the_job_commit(dags):
    faults.arm("commit_job.mid_move", "raise", nth=3)  # the commit's first try dies after 3 of 8 moves
    dr = run(dags.ct_append_v1)
    assert dr.state == "success", states(dr)
    check_output("ct_append_v1")
    assert calls("ct_append_v1") == {0: 1, 1: 1, 2: 1, 3: 1}, "a commit retry runs no write again"


def test_cleared_failed_run_recovers_committed_tasks(dags):
    when = datetime(2024, 3, 1, tzinfo=timezone.utc)
    flag("fail-ct_append_v1-3-always")
    dr = run(dags.ct_append_v1, when)
    assert dr.state == "failed"
    st = states(dr)
    assert st["stage.write[3]"] == "failed" and st["stage.commit[-1]"] == "upstream_failed"
    assert st["stage.abort[-1]"] == "success", "the teardown ran"
    assert sc.read_rows(target("ct_append_v1")) == [], "nothing of a failed job is visible"
    unflag("fail-ct_append_v1-3-always")
    dr = run(dags.ct_append_v1, when)  # dag.test on the same logical date clears the whole run
    assert dr.state == "success", states(dr)
    manifest = check_output("ct_append_v1")
    assert calls("ct_append_v1") == {0: 1, 1: 1, 2: 1, 3: 3}, "tasks 0-2 were recovered, not re-run"
    recovered = {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]}
    assert recovered == {0: 0, 1: 0, 2: 0, 3: None} and manifest["app_attempt"] == 1


@pytest.mark.parametrize("mode", ["append", "overwrite", "dynamic"])
def test_clear_after_commit_recomputes_without_duplicates(dags, mode):
    dag_id = f"ct_{mode}_v1"
    when = datetime(2024, 3, 2, tzinfo=timezone.utc)
    assert run(getattr(dags, dag_id), when).state == "success"
    first = read_success_marker(target(dag_id))
    assert run(getattr(dags, dag_id), when).state == "success"
    manifest = check_output(dag_id)
    assert manifest["generation"] == 1 and manifest["replaced_generation"] == first["job_uuid"]
    assert calls(dag_id) == {t: 2 for t in range(TASKS)}, "a clear after a commit is a request to recompute"


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("mode", ["error", "append", "overwrite", "dynamic"])
def test_output_modes(dags, mode, algorithm):
    dag_id = f"ct_{mode}_v{algorithm}"
    if mode != "error":
        sc.write_old_data(target(dag_id))
    old_files = set(sc.visible_files(target(dag_id)))
    dr = run(getattr(dags, dag_id))
    assert dr.state == "success", states(dr)
    check_output(dag_id, old=sc.old_rows_expected(mode))
    if mode == "dynamic":
        assert read_success_marker(os.path.join(target(dag_id), "day=d0"))["partition"] == "day=d0"
    if mode == "append":
        assert old_files <= set(sc.visible_files(target(dag_id)))


def test_error_mode_refuses_a_non_empty_target(dags):
    sc.write_old_data(target("ct_error_v1"))
    before = sc.all_files(target("ct_error_v1"))
    dr = run(dags.ct_error_v1)
    assert dr.state == "failed"
    assert states(dr)["stage.setup[-1]"] == "failed"
    assert sc.all_files(target("ct_error_v1")) == before, "nothing written"
    assert calls("ct_error_v1") == {}


def test_mapped_over_nothing_commits_an_empty_output(dags):
    dr = run(dags.ct_empty)
    assert dr.state == "success", states(dr)
    manifest = read_success_marker(target("ct_empty"))
    assert manifest["totals"]["files"] == 0 and manifest["totals"]["tasks"] == 0


def test_sensor_reschedule_and_deferrable(dags):
    assert run(dags.ct_dynamic_v1).state == "success"
    dr = run(dags.ct_sensor)
    assert dr.state == "success", states(dr)
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        values = {x.task_id: x.value for x in session.query(XComModel).filter_by(dag_id="ct_sensor",
                                                                              run_id=dr.run_id, key="return_value")}
    assert set(values) == {"wait_poke", "wait_deferred"}
    for value in values.values():
        manifest = value if isinstance(value, dict) else __import__("json").loads(value)
        assert manifest["totals"]["rows"] == TASKS * ROWS


def test_example_dags_run_end_to_end(dags):
    """The example DAGs as shipped (their own data and callables)."""
    ex = {name: importlib.import_module(name) for name in ("example_partitioned_write", "example_retry_recover",
                                                             "example_overwrite", "example_downstream_sensor")}
    for name, module in ex.items():
        dr = module.dag.test()
        assert dr.state == "success", (name, states(dr))
    root = os.environ["COMMIT_DEMO_ROOT"]
    for sub, rows in (("events", 12000), ("events_retried", 12000), ("daily_totals", 2)):
        manifest = read_success_marker(os.path.join(root, sub), verify_files=True)
        assert manifest["totals"]["rows"] == rows
    ids = [r["event_id"] for r in sc.read_rows(os.path.join(root, "events_retried"))]
    assert len(ids) == len(set(ids)) == 12000


def test_asset_event_carries_the_commit_summary(dags):
    """The example's commit task emits an asset event whose extra is the commit summary."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    module = importlib.import_module("example_partitioned_write")
    dr = module.dag.test()
    assert dr.state == "success"
    manifest = read_success_marker(os.path.join(os.environ["COMMIT_DEMO_ROOT"], "events"))
    with create_session() as session:
        asset = session.query(AssetModel).filter_by(name="commit_demo_events").one()
        event = session.query(AssetEvent).filter_by(asset_id=asset.id).order_by(AssetEvent.id.desc()).first()
        extra = dict(event.extra)
    assert extra["job_uuid"] == manifest["job_uuid"]
    assert (extra["files"], extra["rows"], extra["bytes"]) == tuple(manifest["totals"][k] for k in
                                                                    ("files", "rows", "bytes"))


def hive_output_with_a_duplicate(root: str) -> list[int]:
    """Eight Hive-named files of one job in ``ds=1``, task 2 twice (a speculative duplicate): the row ids once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids: list[int] = []
    for i in range(8):
        rows = list(range(len(ids), len(ids) + 3))
        ids += rows
        os.makedirs(f"{root}/ds=1", exist_ok=True)
        for attempt in ((0, 1) if i == 2 else (0,)):  # task 2 has a speculative duplicate
            pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), f"{root}/ds=1/{i:06d}_{attempt}")
    os.rename(f"{root}/ds=1/000002_0", f"{root}/ds=1/000002_0.parquet")
    os.rename(f"{root}/ds=1/000002_1", f"{root}/ds=1/000002_1.parquet")
    for i in (0, 1, 3, 4, 5, 6, 7):
        os.rename(f"{root}/ds=1/{i:06d}_0", f"{root}/ds=1/{i:06d}_0.parquet")
    return ids


def test_dedup_then_compaction_operators(dags):
    import pyarrow.parquet as pq

    root = target("ct_maintenance")
    ids = hive_output_with_a_duplicate(root)
    dr = dags.ct_maintenance.test()
    assert dr.state == "success", states(dr)
    got = pq.read_table(root).column("id").to_pylist()
    assert sorted(got) == sorted(ids), "the duplicate is gone, no row lost"
    assert len(sc.visible_files(root)) == 1, "eight small files merged into one"


def delta_table_at(dag_id: str) -> tuple[str, dict[str, bytes]]:
    """A Delta table of 24 rows (two jobs of the table committer) at *dag_id*'s target: the target and every file
    under it with its bytes."""
    pytest.importorskip("deltalake")
    from ..protocol.dedup_tables import all_files
    from ..protocol.tables_worker import run_job

    root = target(dag_id)
    cfg = {"format": "delta", "location": root, "job_id": "events-1", "tasks": 3, "rows": 4}
    run_job(cfg)
    run_job({**cfg, "job_id": "events-2"})
    return root, all_files(root)


def test_maintenance_operators_refuse_a_delta_table_without_a_retry(dags):
    """Both operators pointed at a Delta table: each task fails on its first try (a refusal no retry cures),
    nothing under the table changes, and the table reads every row with deltalake."""
    deltalake = pytest.importorskip("deltalake")
    from ..protocol.dedup_tables import all_files

    root, before = delta_table_at("ct_table_maintenance")
    dr = dags.ct_table_maintenance.test()
    assert dr.state == "failed" and states(dr) == {"dedup[-1]": "failed", "compact[-1]": "failed"}, states(dr)
    from airflow.utils.session import create_session

    with create_session() as session:
        assert {ti.task_id: ti.try_number for ti in dr.get_task_instances(session=session)} == \
            {"dedup": 1, "compact": 1}, "a refusal is not retried"
    assert all_files(root) == before
    assert deltalake.DeltaTable(root).to_pyarrow_table().num_rows == 24


def test_the_compaction_operator_gives_back_the_partition_marker_a_sensor_waits_on(dags):
    """A dynamic job wrote ``ds=1`` in three small files, with its ``_SUCCESS``; the maintenance DAG compacts it.
    Afterwards the partition's marker is there again (before the fix it was withdrawn for good and the sensor
    waited forever), the sensor returns it, and the one file it lists holds every row once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt
    from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor

    root = target("ct_maintenance")
    c = FileOutputCommitter(root, "daily", mode="dynamic", partition_by=["ds"])
    c.setup_job()
    for task in range(3):
        ids = list(range(task * ROWS, (task + 1) * ROWS))
        run_task_attempt(c, task, 1, lambda w, t=pa.table({"id": ids, "ds": ["1"] * ROWS}): w.write(t))
    c.commit_job(3)
    sensor = SuccessMarkerSensor(task_id="wait", target=os.path.join(root, "ds=1"), verify_files=True,
                                 deferrable=False)
    assert sensor.poke({}).xcom_value["job_id"] == "daily"
    dr = dags.ct_maintenance.test()
    assert dr.state == "success", states(dr)
    found = sensor.poke({})
    assert found.is_done, "the partition marker the compaction withdrew is back"
    manifest = found.xcom_value
    assert manifest["job_id"].startswith("ct_maintenance") and manifest["partition"] == "ds=1"
    assert [f["path"] for f in manifest["files"] + manifest["retained"]] == sc.visible_files(root) != []
    rows = pq.read_table(os.path.join(root, manifest["files"][0]["path"])).column("id").to_pylist()
    assert sorted(rows) == list(range(3 * ROWS))


def test_example_tables_dag_commits_each_job_once_per_table(dags):
    """The Delta and Iceberg example end to end, then cleared after success: each table holds every row exactly
    once, read by its own reader, and the clear's generation replaced the first one's files in one transaction."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    import deltalake
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    module = importlib.import_module("example_tables")
    root = os.environ["COMMIT_DEMO_ROOT"]
    warehouse = os.path.join(root, "warehouse")

    def table_rows():
        delta = pa.table(deltalake.DeltaTable(os.path.join(root, "events_delta")).to_pyarrow_table())
        catalog = SqlCatalog("commit_provider", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
        iceberg = catalog.load_table("demo.events")
        return delta["event_id"].to_pylist(), iceberg.scan().to_arrow()["event_id"].to_pylist(), iceberg

    date = datetime(2024, 3, 1, tzinfo=timezone.utc)
    for generation in (0, 1):                            # the run, then a clear of the successful run
        dr = run(module.dag, date)
        assert dr.state == "success", states(dr)
        delta_ids, iceberg_ids, iceberg = table_rows()
        assert sorted(delta_ids) == sorted(iceberg_ids) == list(range(12000)), generation
        delta_marker = read_success_marker(os.path.join(root, "events_delta"))
        assert delta_marker["generation"] == generation
        assert delta_marker["table"]["version"] == deltalake.DeltaTable(os.path.join(root, "events_delta")).version()
        iceberg_marker = read_success_marker(os.path.join(iceberg.location(), "data"))
        assert iceberg_marker["table"]["snapshot_id"] == iceberg.current_snapshot().snapshot_id
    assert deltalake.DeltaTable(os.path.join(root, "events_delta")).version() == 1
    assert len(iceberg.metadata.snapshots) == 2


def test_a_file_stage_into_a_delta_table_fails_at_setup_on_its_first_try(dags):
    """A stage without ``table_format`` whose target is a Delta table: its setup task fails on try 1 (a refusal
    no retry cures), no write task runs, nothing under the table changes, and the table reads every row."""
    deltalake = pytest.importorskip("deltalake")
    from airflow.utils.session import create_session

    from ..protocol.dedup_tables import all_files

    root, before = delta_table_at("ct_table_filejob")
    dr = dags.ct_table_filejob.test()
    assert dr.state == "failed", states(dr)
    with create_session() as session:
        tis = {ti.task_id: ti for ti in dr.get_task_instances(session=session)}
    setup = tis["stage.setup"]
    assert setup.state == "failed" and setup.try_number == 1, "a refusal is not retried"
    assert not calls("ct_table_filejob"), "no write task ran"
    assert all_files(root) == before
    assert deltalake.DeltaTable(root).to_pyarrow_table().num_rows == 24
