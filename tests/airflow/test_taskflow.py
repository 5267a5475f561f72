"""Airflow-native authoring: ``@task.commit_stage``, the typed commit summary, errors that fail fast, ``job_key``.

- the decorator, registered through the provider info, builds the same TaskGroup as ``commit_stage``; mapped
  with ``.partial().expand()`` over an upstream task, with a try that fails, it runs end to end in ``dag.test()``,
  rows read back exactly once, and a downstream ``@task`` receives the summary; a writer function works unmapped,
  inside another TaskGroup (whose commit must count the write tasks under their full id);
- an ``@task`` function given as ``python_callable`` fails where the DAG is parsed, naming the fix;
- a missing partition column fails each write once, without retry, while a transient error is retried;
- two runs of one data interval with ``job_key="{{ data_interval_start }}"`` leave the interval's rows once in
  ``append`` mode; without it (each run its own job) they are appended twice; a keyed run after a failed one
  recovers what the failed run committed, and a keyed run after a successful one replaces it.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from airflow.sdk import DAG, task

from airflow_commit_provider.decorators.commit_stage import commit_stage_task
from airflow_commit_provider.operators import CommitSetupOperator, CommitWriteOperator
from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.operators.summary import CommitSummary
from airflow_commit_provider.protocol import InvalidOutputSpec, read_success_marker

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags
from ..protocol import scenario as sc

START = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def dags(airflow_db):
    return fresh_test_dags("taskflow_test_dags")


def calls(dag_id: str) -> Counter:
    """(stage, shard) -> how many times the user callable ran."""
    path = TEST_WORK / "calls.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((stage, int(shard)) for d, stage, shard, _ in map(str.split, lines) if d == dag_id)


def states(dr) -> dict[str, tuple[str, int]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{ti.task_id}[{ti.map_index}]": (ti.state, ti.try_number)
                for ti in dr.get_task_instances(session=session)}


def received_summary(dag_id: str, stage: str) -> dict:
    return json.loads((TEST_WORK / f"summary-{dag_id}-{stage}.json").read_text())


# ------------------------------------------------------------------------------------------- parse time, no DB
def test_the_provider_registers_the_decorator():
    from airflow.sdk import task as airflow_task

    assert airflow_task.commit_stage is commit_stage_task


def shape(group) -> dict:
    """A TaskGroup as the Graph and Grid views draw it: children, their edges, setup/teardown, mapped or not."""
    return {child.task_id.rsplit(".", 1)[1]: (sorted(t.rsplit(".", 1)[1] for t in child.upstream_task_ids),
                                              child.is_setup, child.is_teardown, hasattr(child, "expand_input"),
                                              getattr(child, "trigger_rule", None))
            for child in group.children.values()}


def load(shard: int, ti=None) -> pa.Table:
    return pa.table({"shard": [shard]})


def test_the_decorator_builds_the_same_task_group_as_commit_stage():
    with DAG("tf_same_group", schedule=None, start_date=START) as dag:
        commit_stage("load", target="/data/a", python_callable=load, expand_op_kwargs=[{"shard": 0}],
                     ensure_target=True, mode="dynamic", partition_by="day")
        commit_stage_task(target="/data/b", group_id="load_tf", ensure_target=True, mode="dynamic",
                          partition_by="day")(load).expand(shard=[0])
    classic, taskflow = dag.task_group.children["load"], dag.task_group.children["load_tf"]
    assert shape(taskflow) == shape(classic)
    assert set(shape(classic)) == {"ensure_target", "setup", "write", "commit", "abort"}
    assert dag.task_dict["load_tf.write"].operator_name == "@task.commit_stage"
    assert dag.task_dict["load_tf.commit"].job_name == "load_tf"


def test_a_task_decorated_function_as_python_callable_fails_at_parse_time():
    @task
    def load_shard(shard: int) -> pa.Table:
        return pa.table({"shard": [shard]})

    why = ("python_callable=load_shard is an @task-decorated function, not a plain callable: calling it builds a "
           "task instead of running your code. Decorate it with @task.commit_stage(target=..., ...) instead of "
           "@task")
    with DAG("tf_mistake", schedule=None, start_date=START) as dag:
        with pytest.raises(InvalidOutputSpec, match=r"^commit_stage\('mapped'\): " + why.replace("(", r"\(")
                           .replace(")", r"\)").replace(".", r"\.")):
            commit_stage("mapped", target="/data/x", python_callable=load_shard,
                         expand_op_kwargs=[{"shard": s} for s in range(4)])
        with pytest.raises(InvalidOutputSpec, match="CommitWriteOperator.partial"):
            CommitWriteOperator.partial(task_id="w", target="/data/x", python_callable=load_shard).expand(
                op_kwargs=[{"shard": 0}])
        with pytest.raises(InvalidOutputSpec, match="CommitWriteOperator\\(task_id='w2'\\): python_callable"):
            CommitWriteOperator(task_id="w2", target="/data/x", python_callable=load_shard)
        with pytest.raises(InvalidOutputSpec, match="writer_callable=load_shard is an @task-decorated"):
            commit_stage("unmapped", target="/data/x", writer_callable=load_shard)
        with pytest.raises(InvalidOutputSpec, match=r"@task.commit_stage: python_callable=load_shard is an @task"):
            commit_stage_task(target="/data/x")(load_shard)
    assert dag.task_ids == [], "nothing half-built"


def test_the_decorator_checks_its_parameters_and_arguments_at_parse_time():
    with DAG("tf_bad_args", schedule=None, start_date=START):
        with pytest.raises(InvalidOutputSpec, match=r"@task.commit_stage on load\(\): mode='upsert'"):
            commit_stage_task(target="/data/x", mode="upsert")(load)
        with pytest.raises(InvalidOutputSpec, match="target is required"):
            commit_stage_task(load)
        stage = commit_stage_task(target="/data/x")(load)
        with pytest.raises(TypeError, match="unexpected keyword argument 'shrd'"):
            stage.expand(shrd=[1])
        with pytest.raises(ValueError, match="cannot call partial\\(\\) on task context variable 'ti'"):
            stage.partial(ti=1)
        with pytest.raises(TypeError, match="got an unexpected keyword argument 'other'"):
            stage(shard=1, other=2)


# -------------------------------------------------------------------------------------------------- dag.test()
@pytest.mark.airflow
def test_decorated_stage_mapped_with_a_failing_try_runs_end_to_end(dags):
    (TEST_WORK / "fail-tf_decorator-2-1").touch()   # shard 2's first try dies after writing half its rows
    dr = dags.tf_decorator.test()
    assert dr.state == "success", states(dr)
    root = TEST_ROOT / "tf_decorator" / "load_shard"
    rows = sc.read_rows(str(root))
    assert sorted((r["shard"], r["row"]) for r in rows) == [(s, r) for s in range(4) for r in range(10)]
    assert {r["shard"]: r["try"] for r in rows}[2] == 2 and {r["try"] for r in rows if r["shard"] != 2} == {1}
    assert calls("tf_decorator") == {**{("load_shard", s): 1 for s in (0, 1, 3)}, ("load_shard", 2): 2,
                                     ("export", 7): 1}
    manifest = read_success_marker(str(root), verify_files=True)

    summary = CommitSummary.from_xcom(received_summary("tf_decorator", "load_shard"))   # what `report` got
    assert (summary.rows, summary.files, summary.bytes, summary.tasks) == (
        40, manifest["totals"]["files"], manifest["totals"]["bytes"], 4)
    assert summary.partitions == ["day=d0", "day=d1"] and summary.job_uuid == manifest["job_uuid"]
    assert summary.tasks_recovered == [] and summary.failed_attempts == 1 and summary.mode == "dynamic"
    assert summary.job_id.startswith("tf_decorator__manual__") and "__load_shard" in summary.job_id

    export = CommitSummary.from_xcom(received_summary("tf_decorator", "export"))   # the writer function's stage
    assert export.tasks == 1 and export.files == 2 and export.rows is None, "a CSV's rows are not counted"
    assert {f["path"] for f in export.file_list} >= {"export-00007.csv"}
    assert states(dr)["exports.export.commit[-1]"] == ("success", 1)


@pytest.mark.airflow
def test_deterministic_errors_fail_once_and_transient_ones_retry(dags, capfd):
    dr = dags.tf_fail_fast.test()
    assert dr.state == "failed"
    st = states(dr)
    for shard in (0, 1):
        assert st[f"missing_column.write[{shard}]"] == ("failed", 1), "no retry of a deterministic error"
        assert st[f"flaky.write[{shard}]"] == ("success", 2), "a transient error is retried"
    assert calls("tf_fail_fast") == {("missing_column", 0): 1, ("missing_column", 1): 1, ("flaky", 0): 2,
                                     ("flaky", 1): 2}
    log = capfd.readouterr()
    assert ("AirflowFailException: InvalidOutputSpec: partition column(s) ['region'] are not in the data"
            in log.out + log.err)
    assert sc.read_rows(str(TEST_ROOT / "tf_fail_fast" / "missing_column")) == []


@pytest.mark.airflow
def test_job_key_makes_two_runs_of_one_interval_one_job(dags):
    """``dag.test`` with one logical date and two ``run_after`` values: two DAG runs (two run ids) of one data
    interval, as a manual re-run of a day is."""
    day = datetime(2024, 3, 1, tzinfo=timezone.utc)
    first = dags.tf_job_key.test(logical_date=day, run_after=day + timedelta(hours=1))
    second = dags.tf_job_key.test(logical_date=day, run_after=day + timedelta(hours=2))
    assert first.state == second.state == "success" and first.run_id != second.run_id
    assert calls("tf_job_key") == {(stage, s): 2 for stage in ("per_interval", "per_run") for s in (0, 1)}

    keyed = str(TEST_ROOT / "tf_job_key" / "per_interval")
    rows = sc.read_rows(keyed)
    assert sorted((r["shard"], r["row"]) for r in rows) == [(s, r) for s in (0, 1) for r in range(10)]
    assert {r["day"] for r in rows} == {"2024-03-01"}
    manifest = read_success_marker(keyed, verify_files=True)
    assert manifest["generation"] == 1 and manifest["replaced_generation"] is not None
    assert manifest["job_id"].startswith("tf_job_key__2024-03-01_00_00_00_00_00__per_interval")
    assert manifest["labels"]["job_key"] == "2024-03-01 00:00:00+00:00"

    per_run = sc.read_rows(str(TEST_ROOT / "tf_job_key" / "per_run"))
    assert len(per_run) == 40 and Counter((r["shard"], r["row"]) for r in per_run) == {
        (s, r): 2 for s in (0, 1) for r in range(10)}, "without job_key, each run is a job of its own"


@pytest.mark.airflow
def test_a_keyed_run_after_a_failed_one_recovers_what_it_committed_then_a_third_replaces(dags):
    """README: with ``job_key``, "a run after a failed one continues the job and recovers the tasks the failed run
    committed". Run 1 of the interval fails (shard 1 fails both tries; its teardown keeps shards 0 and 2); run 2,
    another run id of the same interval, recovers shards 0 and 2 without calling their code, runs shard 1 and
    commits; run 3, after that success, is a new generation replacing run 2's rows. Each time: rows once."""
    dag, root = dags.tf_key_after_failure, str(TEST_ROOT / "tf_key_after_failure" / "keyed")
    day = datetime(2024, 4, 1, tzinfo=timezone.utc)
    for try_number in (1, 2):
        (TEST_WORK / f"fail-tf_key_after_failure-1-{try_number}").touch()
    first = dag.test(logical_date=day, run_after=day + timedelta(hours=1))
    assert first.state == "failed" and states(first)["keyed.abort[-1]"][0] == "success", states(first)
    assert sc.read_rows(root) == [], "nothing visible after the failed run"
    for try_number in (1, 2):
        (TEST_WORK / f"fail-tf_key_after_failure-1-{try_number}").unlink()

    def exactly_once() -> list[dict]:
        rows = sc.read_rows(root)
        assert Counter((r["shard"], r["row"]) for r in rows) == {(s, r): 1 for s in range(3) for r in range(10)}
        return rows

    second = dag.test(logical_date=day, run_after=day + timedelta(hours=2))
    assert second.state == "success" and second.run_id != first.run_id, states(second)
    assert calls("tf_key_after_failure") == {("keyed", 0): 1, ("keyed", 1): 3, ("keyed", 2): 1}, \
        "shards 0 and 2 were recovered from the failed run, not run again"
    rows = exactly_once()
    assert {r["shard"]: r["try"] for r in rows} == {0: 1, 1: 1, 2: 1}
    manifest = read_success_marker(root, verify_files=True)
    assert (manifest["generation"], manifest["app_attempt"], manifest["totals"]["rows"]) == (0, 1, 30)
    assert CommitSummary.from_manifest(manifest).tasks_recovered == [0, 2]

    third = dag.test(logical_date=day, run_after=day + timedelta(hours=3))
    assert third.state == "success", states(third)
    assert calls("tf_key_after_failure") == {("keyed", 0): 2, ("keyed", 1): 4, ("keyed", 2): 2}
    exactly_once()
    manifest = read_success_marker(root, verify_files=True)
    assert manifest["generation"] == 1 and manifest["replaced_generation"] is not None


def test_algorithm_2_with_a_job_key_in_append_or_error_mode_is_refused_where_the_dag_is_parsed():
    """A keyed re-run under algorithm 2 would publish its tasks' files next to the last run's until its job
    commit: the interval's rows twice, visible. Refused by every way of building a stage, before a task exists."""
    key = "{{ data_interval_start }}"
    why = (r"algorithm=('v2'|2): with job_key='\{\{ data_interval_start \}\}' in mode='(append|error)', every run "
           r"of the key after the first replaces the last one's rows at its job commit, .* Use algorithm=1")
    with DAG("tf_keyed_v2", schedule="@daily", start_date=START) as dag:
        for mode in ("append", "error"):
            with pytest.raises(InvalidOutputSpec, match=r"^commit_stage\('s'\): " + why):
                commit_stage("s", target="/data/x", python_callable=load, expand_op_kwargs=[{"shard": 0}],
                             algorithm="v2", mode=mode, job_key=key)
        with pytest.raises(InvalidOutputSpec, match=r"^@task.commit_stage on load\(\): " + why):
            commit_stage_task(target="/data/x", algorithm=2, mode="append", job_key=key)(load)
        with pytest.raises(InvalidOutputSpec, match=r"^CommitSetupOperator\(task_id='setup'\): " + why):
            CommitSetupOperator(task_id="setup", target="/data/x", algorithm=2, job_key=key)   # mode error
        with pytest.raises(InvalidOutputSpec, match=r"^CommitWriteOperator.partial\(task_id='w'\): " + why):
            CommitWriteOperator.partial(task_id="w", target="/data/x", python_callable=load, algorithm=2,
                                        mode="append", job_key=key)
        assert dag.task_ids == [], "nothing half-built"
        # what the advice names, and what algorithm 2 does anyway in the modes that replace: accepted
        commit_stage("v1", target="/data/x", python_callable=load, expand_op_kwargs=[{"shard": 0}], algorithm=1,
                     mode="append", job_key=key)
        commit_stage("no_key", target="/data/y", python_callable=load, expand_op_kwargs=[{"shard": 0}],
                     algorithm=2, mode="append")
        for mode in ("overwrite", "dynamic"):
            commit_stage(f"v2_{mode}", target=f"/data/{mode}", python_callable=load, algorithm=2, mode=mode,
                         partition_by="shard", expand_op_kwargs=[{"shard": 0}], job_key=key)


@pytest.mark.airflow
def test_a_keyed_rerun_under_algorithm_1_shows_the_last_runs_rows_once_until_its_job_commit(dags):
    """The refusal's advice followed: ``algorithm=1`` with the key in ``append`` mode. A reader between the
    second run's last task commit and its job commit sees the first run's rows once (nothing of the second run);
    after the commit, the second run's rows once."""
    dag, root = dags.tf_key_peek, str(TEST_ROOT / "tf_key_peek" / "keyed")
    day = datetime(2024, 8, 1, tzinfo=timezone.utc)
    runs = [dag.test(logical_date=day, run_after=day + timedelta(hours=h)) for h in (1, 2)]
    assert [dr.state for dr in runs] == ["success", "success"], [states(dr) for dr in runs]
    once = sorted([s, r] for s in range(2) for r in range(10))
    seen = [sorted(json.loads((TEST_WORK / f"peek-{dr.run_id}.json").read_text())) for dr in runs]
    assert seen == [[], once], "mid-stage: nothing of the first run; the first run's rows once in the second"
    rows = sc.read_rows(root)
    assert sorted([r["shard"], r["row"]] for r in rows) == once
    assert calls("tf_key_peek") == {("keyed", 0): 2, ("keyed", 1): 2}
    assert read_success_marker(root, verify_files=True)["generation"] == 1
