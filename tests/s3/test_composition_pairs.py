"""Pairs of the composition table (docs/composition.md) that share code paths with a tested cell but had no test of
their own ("GAP-low"), each covered by a real ``dag.test()`` run read back row by row.

One run covers several pairs at once (a covering design, not one test per pair): each case is an authoring style
(hand-wired operators, ``commit_stage``, ``@task.commit_stage``, ``shards_per_task`` with its shards committed
each alone or together, ``job_key``) x a store
(local disk, S3 through moto's server and an Airflow connection) x an algorithm x a mode, with one write task whose
first try fails (a retry), then every consumer: the sensor (poke), the deferrable sensor (its trigger's real
``run()`` and ``execute_complete``), the asset watcher (``CommittedOutputTrigger``, one event per commit, in
order) and the Commit status view's read model. Keyed cases run twice for one data interval (the second run is a
new generation of one job: one more event, rows once); maintenance cases compact or deduplicate the stage's output
afterwards (rows once, no event for the compaction by default). After every run: the callable ran exactly once
per task and try that had to run, every row is read back exactly once, the marker verifies against the listing.
"""

from __future__ import annotations

import asyncio
import importlib
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import DAG

from airflow_commit_provider.decorators.commit_stage import commit_stage_task
from airflow_commit_provider.operators import (
    CommitAbortOperator,
    CommitJobOperator,
    CommitSetupOperator,
    CommitWriteOperator,
)
from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.protocol import read_success_marker
from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor
from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger
from airflow_commit_provider.triggers.success_marker import SuccessMarkerTrigger

from ..airflow.test_committed_output_trigger import Watcher
from ..conftest import DAGS_FOLDER, TEST_ROOT, TEST_WORK
from ..protocol import scenario as sc

CONN = "commit_s3"
TASKS = 3
ROWS = 4
DAY = datetime(2024, 5, 1, tzinfo=timezone.utc)
STORAGE = {"use_listings_cache": False, "skip_instance_cache": True}


@dataclass(frozen=True)
class Case:
    """One ``dag.test()`` stage: authoring *w*, store *s*, algorithm *a*, mode *m*; *runs* runs of one interval."""

    w: str
    s: str
    a: str
    m: str
    runs: int = 1
    then: str | None = None   # maintenance over the output: "compact" or "dedup"
    pcols: bool | None = None   # partitioned by ``day`` (default: only in ``dynamic`` mode)
    table: str | None = None   # table_format: "delta", "iceberg"
    tag: str = "pair"   # the DAG id's prefix: another module's cases are other DAGs
    n: int = TASKS   # shards_per_task of ``shards`` (one write task instance) and ``deco_shards``

    @property
    def dag_id(self) -> str:
        return f"{self.tag}_{self.w}_{self.s}_{self.a}_{self.m}" + (f"_{self.then}" if self.then else "") + (
            f"_{self.table}" if self.table else "")

    @property
    def partitioned(self) -> bool:
        return self.m == "dynamic" if self.pcols is None else self.pcols


CASES = [
    Case("deco", "s3", "v2", "overwrite"),
    Case("deco", "s3", "magic", "dynamic"),
    Case("deco", "local", "v1", "append"),
    Case("deco", "local", "v2", "error"),
    Case("ops", "s3", "magic", "error"),
    Case("ops", "s3", "v1", "dynamic"),
    Case("ops", "local", "v2", "append"),
    Case("ops", "local", "v1", "overwrite"),
    Case("stage", "s3", "magic", "overwrite", then="compact"),
    Case("stage", "s3", "v1", "error"),
    Case("stage", "local", "v2", "dynamic"),
    Case("stage", "local", "v1", "append", then="dedup"),
    Case("shards", "s3", "v1", "error"),
    Case("shards", "s3", "magic", "dynamic"),
    Case("shards", "local", "v2", "overwrite", then="compact"),
    Case("shards", "local", "v1", "append"),
    Case("together", "s3", "magic", "dynamic"),
    Case("together", "s3", "v1", "error"),
    Case("together", "local", "v2", "overwrite", then="compact"),
    Case("together", "local", "v1", "append", then="dedup"),
    Case("key", "s3", "magic", "append", runs=2),
    Case("key", "s3", "v1", "dynamic", runs=2),
    Case("key", "local", "v2", "overwrite", runs=2, then="compact"),
    Case("key", "local", "v1", "error", runs=2, then="dedup"),
]


# ----------------------------------------------------------------------------------------------- the DAGs
def _calls_log(dag_id: str):
    return TEST_WORK / f"calls-{dag_id}.log"


def _rows(dag_id: str, task: int, ti) -> pa.Table:
    """*ROWS* rows of task *task*; the first call of task 1 in a test fails once it has counted itself (a retry;
    a call log, not the try number: a DAG-run clear in ``dag.test()`` numbers tries from 1 again)."""
    log = _calls_log(dag_id)
    first = not log.exists() or not any(line.split()[0] == "1" for line in log.read_text().splitlines())
    with log.open("a") as out:
        out.write(f"{task} {ti.try_number}\n")
    if task == 1 and first:
        raise RuntimeError("the first try of task 1 fails: its retry must commit it once")
    if task == 2 and (TEST_WORK / f"fail-{dag_id}").exists():
        raise RuntimeError("task 2 fails while its flag is set: the run fails, a clear recovers the others")
    return pa.table({"task": [task] * ROWS, "row": list(range(ROWS)), "day": [f"d{r % 2}" for r in range(ROWS)]})


def pair_dag(case: Case, target: str, load: Callable[[Case], Callable[..., Any]] | None = None) -> DAG:
    """The stage of *case* writing *target*: TASKS write tasks (for ``shards``: TASKS shards of one instance; for
    ``together``: the same, committed as one protocol task);
    *load* makes the write callable of the case (default: :func:`_rows`, task 1's first try failing)."""
    load = load or _load
    conn = CONN if case.s == "s3" else None
    shared: dict[str, Any] = {"target": target, "conn_id": conn, "algorithm": case.a, "mode": case.m,
                              "partition_by": ["day"] if case.partitioned else ()}
    if case.table:
        shared.update(table_format=case.table, table_name="pairs.events" if case.table == "iceberg" else None)
    kwargs = [{"task": n} for n in range(TASKS)]
    with DAG(case.dag_id, schedule="@daily", start_date=DAY, catchup=False,
             default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
             tags=["airflow-commit-provider-tests"]) as dag:
        if case.w == "ops":
            ops = {**shared, "job_name": "events"}
            setup = CommitSetupOperator(task_id="setup", **ops)
            write = CommitWriteOperator.partial(task_id="write", python_callable=load(case), **ops).expand(
                op_kwargs=kwargs)
            commit = CommitJobOperator(task_id="commit", write_task_id="write", **ops)
            abort = CommitAbortOperator(task_id="abort", commit_task_id="commit", **ops)
            setup >> write >> commit >> abort.as_teardown(setups=setup)
        elif case.w == "deco":
            commit_stage_task(group_id="events", write_retries=1, **shared)(load(case)).expand_kwargs(kwargs)
        elif case.w == "deco_shards":   # one decorated task instance of n shards
            commit_stage_task(group_id="events", write_retries=1, shards_per_task=case.n, **shared)(
                _load_shard(case))()
        elif case.w in ("shards", "together"):
            commit_stage("events", python_callable=_load_shard(case), shards_per_task=case.n, write_retries=1,
                         shard_commit="each" if case.w == "shards" else "together", **shared)
        else:   # stage, key
            key = "{{ data_interval_start }}" if case.w == "key" else None
            commit_stage("events", python_callable=load(case), expand_op_kwargs=kwargs, write_retries=1,
                         job_key=key, **shared)
    return dag


def _load(case: Case):
    def load(task: int, ti=None) -> pa.Table:
        return _rows(case.dag_id, task, ti)
    return load


def _load_shard(case: Case):
    def load(shard_index: int, ti=None) -> pa.Table:
        return _rows(case.dag_id, shard_index, ti)
    return load


def _dag_of(case: Case, target: str, factory: str = "tests.s3.test_composition_pairs.pair_dag") -> DAG:
    """The DAG *factory* (a dotted name) makes of *case*, from a file in the session's DAGs folder
    (``dag.test()`` runs DAGs of a bundle only)."""
    module = f"pairs_{case.dag_id}"
    home, name = factory.rsplit(".", 1)
    (DAGS_FOLDER / f"{module}.py").write_text(
        f'"""An airflow DAG of {home} (safe mode reads files naming both)."""\n'
        f"from tests.s3.test_composition_pairs import Case\nfrom {home} import {name}\n\n"
        f"dag = {name}({case!r}, {target!r})\n")
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.insert(0, str(DAGS_FOLDER))
    sys.modules.pop(module, None)
    return importlib.import_module(module).dag


# ------------------------------------------------------------------------------------------- the consumers
def _calls(case: Case) -> Counter:
    path = _calls_log(case.dag_id)
    return Counter(tuple(map(int, line.split())) for line in path.read_text().splitlines()) if path.exists() \
        else Counter()


def _poke(target: str, conn: str | None, **kwargs: Any) -> dict[str, Any] | None:
    found = SuccessMarkerSensor(task_id="wait", target=target, conn_id=conn, deferrable=False,
                                **kwargs).poke({})
    return found.xcom_value if found.is_done else None


def _deferred(target: str, conn: str | None, **kwargs: Any) -> dict[str, Any]:
    trigger = SuccessMarkerTrigger(target, conn_id=conn, poke_interval=0, **kwargs)
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=120)).payload
    sensor = SuccessMarkerSensor(task_id="wait", target=target, conn_id=conn, deferrable=True, **kwargs)
    return sensor.execute_complete({}, event)


def _view(dag_id: str, run_id: str) -> tuple[str, dict[int, str]]:
    from airflow_commit_provider.plugins import app as plugin_app

    model = plugin_app.build_model(dag_id, run_id, "v")
    [stage] = model.summary.stages
    [setup] = model.stages
    return stage.state, {r.task: r.status for r in model.stages[setup].rows}


def _target(case: Case, bucket: str | None) -> str:
    return f"s3://{bucket}/{case.dag_id}/events" if case.s == "s3" else str(TEST_ROOT / case.dag_id / "events")


def _marker(target: str, **kwargs: Any) -> dict[str, Any]:
    """The target's ``_SUCCESS`` as a plain reader reads it (on S3 with no cached listing)."""
    return read_success_marker(target, storage_options=STORAGE if target.startswith("s3://") else None, **kwargs)


def _assert_rows_once(target: str) -> None:
    rows = sc.read_rows(target)
    assert Counter((r["task"], r["row"]) for r in rows) == {(t, r): 1 for t in range(TASKS) for r in range(ROWS)}, \
        f"every committed row once under {target}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.dag_id.removeprefix("pair_"))
def test_a_stage_commits_once_and_every_consumer_sees_each_commit_once(case, request, airflow_db):
    bucket = request.getfixturevalue("bucket") if case.s == "s3" else None
    conn = CONN if case.s == "s3" else None
    target = _target(case, bucket)
    _calls_log(case.dag_id).unlink(missing_ok=True)
    dag = _dag_of(case, target)
    watcher = Watcher(CommittedOutputTrigger(target=target, conn_id=conn, poke_interval=0))
    try:
        assert watcher.pending() == [], "nothing committed yet: the watcher has nothing to fire"
        job_ids = []
        for run in range(case.runs):
            dr = dag.test(logical_date=DAY, run_after=DAY + timedelta(hours=run + 1))
            assert dr.state == "success", f"run {run + 1} of {case.dag_id}"
            # the callable: every task once per run, and task 1 once more in the first (its first try fails);
            # shards committed together: the retry writes every shard of the task instance again
            calls = _calls(case)
            if case.w == "together":   # a failed shard stops those not started yet: which did depends on threads
                calls = calls | {(t, 1): 1 for t in range(TASKS)}
            retried = range(TASKS) if case.w == "together" else (1,)
            assert calls == {(t, 1): run + 1 for t in range(TASKS)} | {(t, 2): 1 for t in retried}
            _assert_rows_once(target)
            manifest = _marker(target, verify_files=True)
            tasks = 1 if case.w == "together" else TASKS   # protocol tasks
            assert manifest["totals"]["rows"] == TASKS * ROWS and manifest["totals"]["tasks"] == tasks
            job_ids.append(manifest["job_id"])

            event = watcher.next()
            assert (event["job_id"], event["commit_id"]) == (manifest["job_id"], manifest["job_uuid"])
            assert watcher.pending() == [], "one event per commit, not two"

            for found in (_poke(target, conn, verify_files=True), _poke(target, conn, job_id=manifest["job_id"]),
                          _deferred(target, conn, verify_files=True)):
                assert found is not None and found["job_id"] == manifest["job_id"], "the sensor sees the commit"
                assert found["totals"]["rows"] == TASKS * ROWS

            state, statuses = _view(case.dag_id, dr.run_id)
            assert state == "committed"
            assert set(statuses.values()) == {"committed"} and sorted(statuses) == list(range(tasks))
        if case.w == "key":
            assert len(set(job_ids)) == 1, "two runs of one interval are one job"
            assert _marker(target)["generation"] == case.runs - 1
        if case.then:
            _maintain(case, target, conn)
            _assert_rows_once(target)
            assert watcher.pending() == [], "maintenance changes no row: the watcher fires nothing by default"
            for found in (_poke(target, conn, job_id=job_ids[-1]), _deferred(target, conn, job_id=job_ids[-1])):
                assert found["job_id"] == job_ids[-1], "the stage's commit is still found as its commit"
            assert _poke(target, conn, verify_files=True) is not None, "the marker verifies after maintenance"
    finally:
        watcher.close()


def _maintain(case: Case, target: str, conn: str | None) -> None:
    from airflow_commit_provider.protocol import FileOutputCommitter
    from airflow_commit_provider.protocol.maintenance.compaction import compact
    from airflow_commit_provider.protocol.maintenance.dedup import remove_duplicates
    from airflow_commit_provider.protocol.stores import store_for

    if case.then == "compact":
        result = compact(FileOutputCommitter(target, f"{case.dag_id}-compact", mode="append"), 1,
                         target_size=2**20)
        assert result["state"] == "committed", result
        assert len(sc.visible_files(target)) == 1, "the small files were merged into one"
    else:
        report = remove_duplicates(store_for(target))
        assert report["delete"] == [], "a committed stage holds no duplicate: nothing to delete"
        assert _marker(target, verify_files=True)["totals"]["rows"] == TASKS * ROWS


def test_the_cases_cover_every_authoring_store_algorithm_and_mode_pair():
    """The design is a covering one: every pair of values of W, S, A, M named here has a case."""
    axes = {"w": {"ops", "stage", "deco", "shards", "together", "key"}, "s": {"local", "s3"}, "a": {"v1", "v2", "magic"},
            "m": {"error", "append", "overwrite", "dynamic"}}
    refused = {("a", "magic", "s", "local")}   # refused where the DAG is parsed: test_operator_base.py
    covered = {(x, getattr(c, x), y, getattr(c, y)) for c in CASES for x in axes for y in axes if x < y}
    missing = sorted((x, u, y, v) for x in axes for y in axes if x < y for u in axes[x] for v in axes[y]
                     if (x, u, y, v) not in covered and (x, u, y, v) not in refused
                     and (y, v, x, u) not in refused)
    assert missing == [], f"pairs without a case: {missing}"


#: The OpenLineage cells a stage's own run decides: sharded, magic on S3 (``dynamic``), ``error`` mode.
LINEAGE_CASES = [c for c in CASES if c.dag_id in ("pair_shards_s3_magic_dynamic", "pair_deco_local_v2_error")]


def test_openlineage_reports_each_commit_once_with_its_rows(request, airflow_db):
    """Each case's run in one process whose OpenLineage events go through the file transport (the provider
    decides at import whether it is enabled): only the commit task reports the output, once, with every row;
    the failed write try (task 1's first) reports nothing as written."""
    pytest.importorskip("airflow.providers.openlineage", reason="the optional openlineage extra is not installed")
    from ..airflow.openlineage_runs import run_dags
    from airflow_commit_provider.operators.lineage import dataset_name

    bucket = request.getfixturevalue("bucket")
    targets = {c: _target(c, bucket) for c in LINEAGE_CASES}
    for case, target in targets.items():
        _calls_log(case.dag_id).unlink(missing_ok=True)
        shutil.rmtree(TEST_ROOT / case.dag_id, ignore_errors=True)   # error mode: an earlier test's output
        _dag_of(case, target)
    runs = "\n".join(f"import pairs_{c.dag_id} as m\nreport(m.dag.test(logical_date=datetime({DAY.year}, "
                     f"{DAY.month}, {DAY.day}, tzinfo=timezone.utc)).state)" for c in targets)
    proc, events = run_dags("datetime", f"from datetime import datetime, timezone\n{runs}",
                             TEST_WORK / "openlineage-pairs.jsonl")
    assert proc.stdout.count("STATE success") == len(targets), proc.stdout[-3000:] + proc.stderr[-3000:]
    for case, target in targets.items():
        _assert_rows_once(target)
        commit = [e for e in events if e["job"]["name"].startswith(f"{case.dag_id}.") and
                  e["job"]["name"].endswith(".commit") and e["eventType"] == "COMPLETE"]
        [output] = [o for e in commit for o in e["outputs"]]
        assert (output["namespace"], output["name"]) == dataset_name(target), case.dag_id
        assert output["outputFacets"]["outputStatistics"]["rowCount"] == TASKS * ROWS, case.dag_id
        writes = [e for e in events if e["job"]["name"].startswith(f"{case.dag_id}.") and ".write" in
                  e["job"]["name"]]
        assert writes and all(e["outputs"] == [] for e in writes), "only the commit publishes"


# ------------------------------------------------------------------------------------ lifecycle across runs
#: A failed run cleared, then a clear after success whose code partitions otherwise: per authoring style.
LIFECYCLE_CASES = [
    Case("ops", "local", "v2", "overwrite"),
    Case("deco", "s3", "v1", "append"),
    Case("shards", "s3", "magic", "overwrite"),
    Case("key", "local", "v1", "append"),
]


@pytest.mark.parametrize("case", LIFECYCLE_CASES, ids=lambda c: c.dag_id.removeprefix("pair_"))
def test_a_failed_run_cleared_recovers_then_a_clear_with_other_partition_columns_replaces_it(case, request,
                                                                                           airflow_db):
    """Run 1 fails (task 2 fails both tries; task 1's first try too): nothing visible, no event. Cleared, it
    recovers tasks 0 and 1 (their code is not called again; with v2 they were withdrawn and run again), runs
    task 2 and commits: one event, rows once, the view says which tasks were recovered. Cleared again after that success with the code now partitioning by
    ``day``: a new generation, every task's code runs once more, the old files are replaced, one more event."""
    bucket = request.getfixturevalue("bucket") if case.s == "s3" else None
    conn = CONN if case.s == "s3" else None
    target = _target(case, bucket)
    _calls_log(case.dag_id).unlink(missing_ok=True)
    flag = TEST_WORK / f"fail-{case.dag_id}"
    flag.touch()
    dag = _dag_of(case, target)
    watcher = Watcher(CommittedOutputTrigger(target=target, conn_id=conn, poke_interval=0))
    try:
        assert dag.test(logical_date=DAY, run_after=DAY).state == "failed"
        assert watcher.pending() == [] and _poke(target, conn) is None, "a failed run commits nothing"
        if case.a != "v2":
            assert sc.read_rows(target) == [], "nothing of a failed job is visible"

        flag.unlink()
        failed_run = _calls(case)
        assert failed_run == {(0, 1): 1, (1, 1): 1, (1, 2): 1, (2, 1): 1, (2, 2): 1}
        dr = dag.test(logical_date=DAY, run_after=DAY)   # the same run: Airflow clears it
        assert dr.state == "success"
        # v1, magic: tasks 0 and 1 are recovered (their code is not called again); v2's teardown withdrew the
        # tasks it had published (user guide, "Commit status": ``withdrawn``), so the clear runs them again
        rerun = {0, 1, 2} if case.a == "v2" else {2}
        assert Counter(t for t, _ in (_calls(case) - failed_run).elements()) == {t: 1 for t in rerun}
        _assert_rows_once(target)
        manifest = _marker(target, verify_files=True)
        recovered = {t: None if t in rerun else 0 for t in range(TASKS)}
        assert {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]} == recovered
        assert watcher.next()["commit_id"] == manifest["job_uuid"] and watcher.pending() == []
        state, statuses = _view(case.dag_id, dr.run_id)
        assert (state, statuses) == ("committed", {t: "committed" if t in rerun else "recovered"
                                                   for t in range(TASKS)})

        dag = _dag_of(Case(case.w, case.s, case.a, case.m, pcols=True), target)
        dr = dag.test(logical_date=DAY, run_after=DAY)
        assert dr.state == "success"
        before = sum(failed_run.values()) + len(rerun)
        assert sum(_calls(case).values()) == before + TASKS, "a clear after success recomputes every task once"
        _assert_rows_once(target)
        again = _marker(target, verify_files=True)
        assert again["generation"] == manifest["generation"] + 1 and again["replaced_generation"] == \
            manifest["job_uuid"]
        assert {f["path"].split("/", 1)[0] for f in again["files"]} == {"day=d0", "day=d1"}, \
            "the new generation's files are partitioned; the old unpartitioned ones are gone"
        assert watcher.next()["commit_id"] == again["job_uuid"] and watcher.pending() == []
        assert _poke(target, conn, job_id=again["job_id"], verify_files=True)["job_uuid"] == again["job_uuid"]
    finally:
        watcher.close()
        flag.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------- tables
#: Table stages by the authoring styles the example DAG does not use for that format.
TABLE_CASES = [Case("deco", "local", "v1", "append", table="delta"),
               Case("stage", "local", "v1", "append", table="iceberg", pcols=True)]


def _table_rows(case: Case, target: str) -> list[dict[str, Any]]:
    """The rows the table's own reader sees at its current version."""
    if case.table == "delta":
        import deltalake

        return deltalake.DeltaTable(target).to_pyarrow_table().to_pylist()
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("commit_provider", uri=f"sqlite:///{target}/catalog.db", warehouse=f"file://{target}")
    return catalog.load_table("pairs.events").scan().to_arrow().to_pylist()


@pytest.mark.parametrize("case", TABLE_CASES, ids=lambda c: c.dag_id.removeprefix("pair_"))
def test_a_table_stage_commits_one_transaction_per_run_and_every_consumer_sees_it(case, airflow_db):
    """A Delta stage by ``@task.commit_stage``, an Iceberg stage by ``commit_stage`` (partitioned): one write try
    fails and is retried; the run commits one table transaction (rows once through the format's reader), the
    watcher fires once with that version, the sensor finds it, and the view names the version or snapshot. Cleared
    after success, the run replaces its own rows in a second transaction: rows once, one more event."""
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[case.table])
    from airflow_commit_provider.protocol.tables import table_target

    target = str(TEST_ROOT / case.dag_id / "events")
    _calls_log(case.dag_id).unlink(missing_ok=True)
    dag = _dag_of(case, target)
    table = table_target(case.table, target, table_name="pairs.events" if case.table == "iceberg" else None)
    watcher = Watcher(CommittedOutputTrigger(target=table.data_root, poke_interval=0))
    try:
        versions = []
        for clear in range(2):
            dr = dag.test(logical_date=DAY, run_after=DAY)   # the second: a clear after success
            assert dr.state == "success"
            rows = _table_rows(case, target)
            assert Counter((r["task"], r["row"]) for r in rows) == {(t, r): 1 for t in range(TASKS)
                                                                    for r in range(ROWS)}
            manifest = _marker(table.data_root, verify_files=True)
            event = watcher.next()
            assert event["commit_id"] == manifest["job_uuid"] and watcher.pending() == []
            version = manifest["table"].get("version", manifest["table"].get("snapshot_id"))
            assert event["table"] == manifest["table"] and version is not None
            versions.append(version)
            found = _poke(table.data_root, None, job_id=manifest["job_id"], verify_files=True)
            assert found["job_uuid"] == manifest["job_uuid"]
            from airflow_commit_provider.plugins import app as plugin_app

            model = plugin_app.build_model(case.dag_id, dr.run_id, "v")
            [stage] = model.summary.stages
            kind = "version" if case.table == "delta" else "snapshot"
            assert stage.state == "committed" and f"{case.table} " in stage.table and \
                stage.table.endswith(f"{kind} {version}"), stage.table
        assert len(set(versions)) == 2, "each run made its own transaction"
        assert sum(_calls(case).values()) == 2 * TASKS + 1, "every task once per run, task 1's failed try once"
    finally:
        watcher.close()


# ------------------------------------------------------------------------------------ a changed shard count
#: Sharded stages whose DAG changes ``shards_per_task`` between a failed run and its clear: a table target, S3
#: (magic), and the decorator (v2, whose teardown withdrew what its tasks published).
SHARD_CHANGE_CASES = [Case("shards", "local", "v1", "append", table="delta"),
                      Case("shards", "s3", "magic", "append"),
                      Case("deco_shards", "local", "v2", "overwrite")]


@pytest.mark.parametrize("case", SHARD_CHANGE_CASES, ids=lambda c: c.dag_id.removeprefix("pair_"))
def test_a_clear_after_the_shard_count_changed_is_refused_before_any_code_runs_and_either_advice_works(
        case, request, airflow_db):
    """Run 1 fails with shards 0 and 1 committed (shard 2 fails both tries). The DAG is edited to 2 shards and
    the run cleared: the setup refuses at once (a deterministic error: no retry), before any user code, and
    nothing becomes visible. Followed, the refusal's advice works both ways: "restore shards_per_task" (the clear
    then recovers shards 0 and 1 and commits once; v2 re-runs what its teardown withdrew) and "start another job
    (a new run)" (the 2-shard run commits its own job)."""
    from ..airflow.test_ensure_target import states

    if case.table:
        pytest.importorskip("deltalake")
    bucket = request.getfixturevalue("bucket") if case.s == "s3" else None
    target = _target(case, bucket)
    shutil.rmtree(TEST_ROOT / case.dag_id, ignore_errors=True)
    _calls_log(case.dag_id).unlink(missing_ok=True)
    flag = TEST_WORK / f"fail-{case.dag_id}"
    flag.touch()

    def visible() -> Counter:
        rows = _table_rows(case, target) if case.table else sc.read_rows(target)
        return Counter((r["task"], r["row"]) for r in rows)

    def nothing_visible() -> None:
        if case.table:
            assert not (TEST_ROOT / case.dag_id / "events" / "_delta_log").exists(), "no table version yet"
        else:
            assert sc.read_rows(target) == [], "nothing of the failed job is visible"

    try:
        assert _dag_of(case, target).test(logical_date=DAY, run_after=DAY).state == "failed"
        nothing_visible()
        failed_run = _calls(case)
        edited = Case(case.w, case.s, case.a, case.m, table=case.table, n=2)
        cleared = _dag_of(edited, target).test(logical_date=DAY, run_after=DAY)
        st = states(cleared)
        assert cleared.state == "failed" and st["events.setup[-1]"] == ("failed", 1), \
            f"refused at setup, not retried: {st}"
        assert _calls(case) == failed_run, "no user code ran"
        nothing_visible()
        from airflow_commit_provider.plugins import app as plugin_app

        (stage,) = plugin_app.run_status(case.dag_id, cleared.run_id).stages   # what the view says of it
        assert (stage.state, stage.action) == ("refused", "fix_setup") and "shards_per_task=3" in stage.error, stage

        flag.unlink()   # advice 1: restore shards_per_task, and clear again
        restored = _dag_of(case, target).test(logical_date=DAY, run_after=DAY)
        assert restored.state == "success", states(restored)
        rerun = {0, 1, 2} if case.a == "v2" else {2}
        assert Counter(t for t, _ in (_calls(case) - failed_run).elements()) == {t: 1 for t in rerun}
        assert visible() == {(t, r): 1 for t in range(TASKS) for r in range(ROWS)}
        committed = _marker(_marker_root(case, target), verify_files=True)
        assert committed["totals"]["tasks"] == TASKS

        # advice 2: another job, a new run of the edited DAG (2 shards): it commits its own job
        other = _dag_of(edited, target).test(logical_date=DAY + timedelta(days=1), run_after=DAY + timedelta(days=1))
        assert other.state == "success", states(other)
        new = _marker(_marker_root(case, target), verify_files=True)
        assert new["job_id"] != committed["job_id"] and new["totals"]["tasks"] == 2
        two = {(t, r): 1 for t in range(2) for r in range(ROWS)}
        expected = Counter(two) if case.m == "overwrite" else \
            Counter({(t, r): 1 for t in range(TASKS) for r in range(ROWS)}) + Counter(two)
        assert visible() == expected, "the new job's rows, once, beside (or instead of) the first's as the mode says"
    finally:
        flag.unlink(missing_ok=True)


def _marker_root(case: Case, target: str) -> str:
    """Where the stage's ``_SUCCESS`` is: the target, or a table's data root."""
    if not case.table:
        return target
    from airflow_commit_provider.protocol.tables import table_target

    return table_target(case.table, target).data_root


# ----------------------------------------------------------------------- a re-run after a compaction
#: Appending stages whose output a compaction merges between two generations of their job.
RERUN_AFTER_COMPACTION_CASES = [Case("deco", "local", "v1", "append", then="compact"),
                                Case("key", "s3", "magic", "append", runs=2, then="compact")]


@pytest.mark.parametrize("case", RERUN_AFTER_COMPACTION_CASES, ids=lambda c: c.dag_id.removeprefix("pair_"))
def test_a_new_generation_after_a_compaction_replaces_the_rows_it_merged(case, request, airflow_db):
    """Found from outside: a run cleared after success (a key's next run) after a compaction merged its files
    kept the old rows in the merged file beside the new ones (24 of 12 rows, ``success``). The merged file names
    the files it holds; the new generation deletes it with them: rows once, the marker verifies."""
    bucket = request.getfixturevalue("bucket") if case.s == "s3" else None
    conn = CONN if case.s == "s3" else None
    target = _target(case, bucket)
    shutil.rmtree(TEST_ROOT / case.dag_id, ignore_errors=True)
    _calls_log(case.dag_id).unlink(missing_ok=True)
    dag = _dag_of(case, target)
    assert dag.test(logical_date=DAY, run_after=DAY).state == "success"
    _maintain(case, target, conn)   # the three files merged into one
    again = dag.test(logical_date=DAY, run_after=DAY + timedelta(hours=1) if case.w == "key" else DAY)
    assert again.state == "success"
    _assert_rows_once(target)
    manifest = _marker(target, verify_files=True)
    assert manifest["generation"] == 1 and manifest["totals"]["rows"] == TASKS * ROWS
    assert sorted(sc.visible_files(target)) == sorted(f["path"] for f in manifest["files"]), \
        "the merged file went with the generation it held"


def test_openlineage_of_a_failed_run_and_its_clear_reports_the_output_once(airflow_db):
    """A run that fails (task 2 fails both tries) reports no output: its commit task never ran and its writes
    report none. Its clear commits, recovering tasks 0 and 1: the clear's commit task reports the output once with
    every row, the recovered tasks' included."""
    pytest.importorskip("airflow.providers.openlineage", reason="the optional openlineage extra is not installed")
    from ..airflow.openlineage_runs import run_dags
    from airflow_commit_provider.operators.lineage import dataset_name

    case = Case("stage", "local", "v1", "append", tag="ol")
    target = _target(case, None)
    _calls_log(case.dag_id).unlink(missing_ok=True)
    shutil.rmtree(TEST_ROOT / case.dag_id, ignore_errors=True)
    _dag_of(case, target)
    day = f"datetime({DAY.year}, {DAY.month}, {DAY.day}, tzinfo=timezone.utc)"
    # the flag in the DAG process's own work directory (importing the tests' conftest there makes another)
    runs = (f"from datetime import datetime, timezone\nimport pairs_{case.dag_id} as m\n"
            f"from tests.conftest import TEST_WORK\nflag = TEST_WORK / 'fail-{case.dag_id}'\nflag.touch()\n"
            f"report(m.dag.test(logical_date={day}, run_after={day}).state)\n"
            "flag.unlink()\n"
            f"report(m.dag.test(logical_date={day}, run_after={day}).state)\n")
    proc, events = run_dags("datetime", runs, TEST_WORK / "openlineage-clear.jsonl")
    assert proc.stdout.count("STATE failed") == 1 and proc.stdout.count("STATE success") == 1, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    _assert_rows_once(target)
    mine = [e for e in events if e["job"]["name"].startswith(f"{case.dag_id}.")]
    outputs = [(e["job"]["name"], e["eventType"], o) for e in mine for o in e["outputs"]]
    [(name, kind, output)] = outputs
    assert (name, kind) == (f"{case.dag_id}.events.commit", "COMPLETE"), "only the clear's commit reports output"
    assert (output["namespace"], output["name"]) == dataset_name(target)
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == TASKS * ROWS, "the recovered tasks' rows too"
