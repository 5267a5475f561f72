"""``shards_per_task`` under a real Airflow (``dag.test()``, SQLite): one write task instance, several protocol
tasks; a retry of the task instance calls the user code only for the shards that did not commit.

The callable appends every call to ``calls.log`` (dag, map index, shard, task number, try); the output is read
back with pyarrow row by row.
"""

from __future__ import annotations

import importlib
from collections import Counter

import pytest
from airflow.sdk import DAG

from airflow_commit_provider.decorators.commit_stage import commit_stage_task
from airflow_commit_provider.operators import CommitWriteOperator
from airflow_commit_provider.operators.identity import make_job_id
from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.protocol import InvalidOutputSpec, read_success_marker

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags
from ..protocol import scenario as sc

pytestmark = pytest.mark.airflow

INSTANCES, SHARDS, ROWS = 3, 4, 10


@pytest.fixture
def dags(airflow_db):
    return fresh_test_dags("shard_test_dags")


def calls(dag_id: str) -> Counter:
    """(task number, try) -> calls of the user code."""
    path = TEST_WORK / "calls.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((int(task), int(tr)) for d, _, _, task, tr in map(str.split, lines) if d == dag_id)


def states(dr) -> dict[str, tuple[str, int]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{ti.task_id}[{ti.map_index}]": (ti.state, ti.try_number)
                for ti in dr.get_task_instances(session=session)}


@pytest.mark.parametrize("dag_id", ["sh_operator", "sh_decorator"])
def test_a_retry_runs_only_the_shards_that_did_not_commit(dags, dag_id):
    for task in (1, 6):   # shard 1 of instance 0, shard 2 of instance 1: their first try fails
        (TEST_WORK / f"fail-{dag_id}-{task}-1").touch()
    dr = getattr(dags, dag_id).test()
    st = states(dr)
    assert dr.state == "success", st
    write = "write.write" if dag_id == "sh_operator" else "load.write"
    assert [st[f"{write}[{i}]"] for i in range(INSTANCES)] == [("success", 2), ("success", 2), ("success", 1)]
    assert calls(dag_id) == {**{(t, 1): 1 for t in range(INSTANCES * SHARDS)}, (1, 2): 1, (6, 2): 1}, \
        "the retries called the user code of the failed shards only"
    root = str(TEST_ROOT / dag_id)
    rows = sc.read_rows(root)
    sc.assert_exactly_once(rows, tasks=INSTANCES * SHARDS, per_task=ROWS)
    assert {(r["task"], r["attempt"]) for r in rows if r["attempt"] == 2} == {(1, 2), (6, 2)}
    assert {r["task"]: r["source_day"] for r in rows} == {t: t // SHARDS for t in range(INSTANCES * SHARDS)}
    manifest = read_success_marker(root, verify_files=True)
    assert manifest["totals"]["tasks"] == INSTANCES * SHARDS
    assert manifest["labels"]["shards_per_task"] == SHARDS
    # every shard's committer, classic or decorated, named the job as the one home of job ids does
    names = {"dag_id": dag_id, "job_key": dr.run_id, "job_name": write.split(".")[0]}
    assert manifest["names"] == names and manifest["job_id"] == make_job_id(**names)


def test_with_one_shard_per_task_instance_the_callable_gets_its_map_index_as_task_number(dags):
    dr = dags.sh_one.test()
    assert dr.state == "success", states(dr)
    assert calls("sh_one") == {(t, 1): 1 for t in range(INSTANCES)}
    rows = sc.read_rows(str(TEST_ROOT / "sh_one"))
    sc.assert_exactly_once(rows, tasks=INSTANCES, per_task=ROWS)
    assert {r["task"]: r["source_day"] for r in rows} == {t: t for t in range(INSTANCES)}


def test_a_callable_that_cannot_tell_its_shards_apart_is_refused_at_parse_time():
    def same_rows(day: int):
        return None

    with pytest.raises(InvalidOutputSpec, match=r"commit_stage\('s'\): shards_per_task=3 runs same_rows\(\) 3 "
                                                r"times per task instance, but it takes no shard_index"):
        commit_stage("s", target="/tmp/x", python_callable=same_rows, shards_per_task=3)
    with pytest.raises(InvalidOutputSpec, match="takes no shard_index"):
        commit_stage_task(target="/tmp/x", shards_per_task=2)(same_rows)
    with DAG("sh_parse", schedule=None), pytest.raises(InvalidOutputSpec, match="takes no shard_index"):
        CommitWriteOperator.partial(task_id="w", target="/tmp/x", python_callable=same_rows, shards_per_task=2)
    with DAG("sh_parse_ok", schedule=None):   # **kwargs receives the shard: fine
        commit_stage("ok", target="/tmp/x", python_callable=lambda **kw: None, shards_per_task=3)


@pytest.mark.parametrize("name, value", [("shards_per_task", 0), ("shards_per_task", "10"),
                                         ("shard_threads", 0), ("shard_threads", True)])
def test_bad_shard_parameters_are_refused_naming_them(name, value):
    def rows(shard_index: int):
        return None

    with pytest.raises(InvalidOutputSpec, match=rf"commit_stage\('s'\).*{name}={value!r}: give a positive"):
        commit_stage("s", target="/tmp/x", python_callable=rows, **{name: value})


def test_a_job_refuses_a_write_whose_shards_per_task_changed(dags):
    """Tasks are numbered by ``shards_per_task``: a run of the same job after the DAG changed it would recover
    other task instances' shards under its task numbers and commit the wrong tasks (without the check: 6 of the
    12 tasks' rows, and ``success``). The setup refuses it, before any user code runs, and nothing is committed."""
    for tr in (1, 2):   # task 6's both tries fail: the first run ends with 11 of 12 tasks committed, no job commit
        (TEST_WORK / f"fail-sh_rekeyed-6-{tr}").touch()
    first = dags.sh_rekeyed.test()
    assert first.state == "failed", states(first)
    assert sum(calls("sh_rekeyed").values()) == INSTANCES * SHARDS + 1
    (TEST_WORK / "calls.log").unlink()
    (TEST_WORK / "sh_rekeyed-shards").write_text("2")   # the DAG edited: its next parse has 2 shards per task
    second = importlib.reload(dags).sh_rekeyed.test()
    st = states(second)
    assert second.state == "failed", st
    assert st["write.setup[-1]"][0] == "failed" and st["write.setup[-1]"][1] == 1, \
        "a deterministic error: no retry"
    assert calls("sh_rekeyed") == {}, "no user code ran"
    apps = [p.name for p in (TEST_ROOT / "sh_rekeyed" / "_temporary").glob("*/*") if p.name.isdigit()]
    assert len(apps) == 1, f"refused before it opened an application attempt: {apps}"
    assert not (TEST_ROOT / "sh_rekeyed" / "_SUCCESS").exists()
    assert sc.read_rows(str(TEST_ROOT / "sh_rekeyed")) == []


def test_check_job_shards_names_both_values():
    from airflow_commit_provider.operators.shards import check_job_shards

    check_job_shards({}, 1, "j", "w")   # an unsharded (or earlier) job record has no label
    check_job_shards({"shards_per_task": 4}, 4, "j", "w")
    with pytest.raises(InvalidOutputSpec, match=r"w: job j was set up with shards_per_task=4, this stage has "
                                                r"shards_per_task=2"):
        check_job_shards({"shards_per_task": 4}, 2, "j", "w")
    with pytest.raises(InvalidOutputSpec, match=r"shards_per_task=1, this stage has shards_per_task=3"):
        check_job_shards({}, 3, "j", "w")


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_a_job_commit_refuses_a_shards_per_task_changed_since_the_setup(tmp_path, before, after):
    """The commit task counts the job's tasks as write task instances x ``shards_per_task``: a commit that runs
    after the DAG changed N (the setup and the writes ran before the edit, the commit after it: a retry, a queue)
    would commit the wrong tasks. From N=2 to 1 it committed half of them (the others' rows silently left out, and
    ``success``). It refuses, naming both values, with nothing committed; restored, the commit takes every row."""
    from datetime import datetime

    import pyarrow as pa

    from airflow_commit_provider.operators import CommitJobOperator, CommitSetupOperator
    from airflow_commit_provider.protocol import run_task_attempt

    root = str(tmp_path / "out")
    with DAG("sh_commit_rekeyed", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
        setup = CommitSetupOperator(task_id="setup", target=root, job_name="s", mode="append",
                                    shards_per_task=before)
        commits = {n: CommitJobOperator(task_id=f"commit{n}", target=root, job_name="s", mode="append",
                                        shards_per_task=n, expected_tasks=1) for n in {before, after}}
    context = {"dag": dag, "run_id": "r1"}
    committer = setup.committer(context)   # what the setup task sets up (its labels keep N)
    committer.setup_job()
    for task in range(before):   # the one write task instance's shards, as its write runs them
        assert run_task_attempt(committer, task, 1, lambda w, t=task: w.write(pa.table({"x": [t]}))).status \
            == "committed"
    from airflow_commit_provider.operators.failures import AirflowFailException  # the Task SDK's, or 3.1's

    with pytest.raises(AirflowFailException, match=rf"InvalidOutputSpec: CommitJobOperator 'commit{after}': job "
                       rf"\S+ was set up with shards_per_task={before}, this stage has shards_per_task={after}\."):
        commits[after].execute(context)
    assert not (tmp_path / "out" / "_SUCCESS").exists() and sc.read_rows(root) == []
    commits[before].execute(context)
    assert sorted(r["x"] for r in sc.read_rows(root)) == list(range(before))


def test_table_stages_with_shards_retry_a_shard_and_a_keyed_second_run_replaces_the_first(dags):
    """Delta and Iceberg stages with ``shards_per_task=3`` and ``job_key``: shard 1 of instance 0 and shard 2 of
    instance 1 fail their first try and the retries commit them; the tables read back (with their own readers)
    every row once, added by one transaction per job commit. A second run of the interval (another run id, the
    same job) replaces the first's rows in one more transaction: rows still once, from the second run."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    from datetime import datetime, timedelta, timezone

    import pyarrow as pa

    from ..protocol.test_tables import delta_table, iceberg_table, transactions

    tables = {"delta": {"format": "delta", "location": str(TEST_ROOT / "sh_tables" / "delta")},
              "iceberg": {"format": "iceberg", "location": str(TEST_ROOT / "sh_tables" / "iceberg"),
                          "table_name": "shards.events"}}

    def read(cfg: dict) -> pa.Table:
        return pa.table(delta_table(cfg).to_pyarrow_table()) if cfg["format"] == "delta" else \
            iceberg_table(cfg).scan().to_arrow()

    day, tasks = datetime(2024, 6, 1, tzinfo=timezone.utc), INSTANCES * 3
    for task in (1, 5):
        (TEST_WORK / f"fail-sh_tables-{task}-1").touch()
    for n, hours in enumerate((1, 2)):
        dr = dags.sh_tables.test(logical_date=day, run_after=day + timedelta(hours=hours))
        assert dr.state == "success", states(dr)
        if n == 0:
            assert {k: v for k, v in states(dr).items() if k.endswith(".write[0]") or k.endswith(".write[1]")} == \
                {f"{s}.write[{i}]": ("success", 2) for s in tables for i in (0, 1)}
            for task in (1, 5):
                (TEST_WORK / f"fail-sh_tables-{task}-1").unlink()
        for stage, cfg in tables.items():
            t = read(cfg)
            assert Counter(zip(t["task"].to_pylist(), t["row"].to_pylist())) == {
                (k, r): 1 for k in range(tasks) for r in range(ROWS)}, f"{stage}, run {n + 1}: rows once"
            attempts = dict(zip(t["task"].to_pylist(), t["attempt"].to_pylist()))
            assert attempts == {k: 2 if n == 0 and k in (1, 5) else 1 for k in range(tasks)}, (stage, n)
            assert transactions(cfg) == n + 1, f"{stage}: one transaction per job commit"
    assert calls("sh_tables") == {**{(k, 1): 4 for k in range(tasks)}, (1, 2): 2, (5, 2): 2}, \
        "per stage: every shard once per run, plus the failed shards' retries in the first run"


@pytest.mark.parametrize("dag_id", ["sh_operator", "sh_decorator"])
def test_a_sharded_run_that_failed_then_was_cleared_recovers_the_committed_shards(dags, dag_id):
    """Shard 2 of write instance 1 (task 6) fails both tries: instance 1 fails with shards 4, 5 and 7 committed,
    instances 0 and 2 succeed, the job commit does not run, the teardown keeps the committed shards and nothing
    is visible. The run is cleared (dag.test on the same logical date): every shard but task 6 is recovered (the
    user code is not called again for it), task 6 runs once more, and the job commits each row once."""
    from datetime import datetime, timezone

    when = datetime(2024, 5, 1, tzinfo=timezone.utc)
    failing = 1 * SHARDS + 2
    for tr in (1, 2):
        (TEST_WORK / f"fail-{dag_id}-{failing}-{tr}").touch()
    dr = getattr(dags, dag_id).test(logical_date=when, run_after=when)
    st = states(dr)
    write = "write" if dag_id == "sh_operator" else "load"
    assert dr.state == "failed", st
    assert [st[f"{write}.write[{i}]"][0] for i in range(INSTANCES)] == ["success", "failed", "success"], st
    assert st[f"{write}.commit[-1]"][0] == "upstream_failed" and st[f"{write}.abort[-1]"][0] == "success", st
    root = str(TEST_ROOT / dag_id)
    assert sc.read_rows(root) == [], "nothing of the failed job is visible"
    before = calls(dag_id)
    assert before == {**{(t, 1): 1 for t in range(INSTANCES * SHARDS)}, (failing, 2): 1}, \
        "the retry called the failed shard only"
    for tr in (1, 2):
        (TEST_WORK / f"fail-{dag_id}-{failing}-{tr}").unlink()

    dr = getattr(dags, dag_id).test(logical_date=when, run_after=when)   # the whole run cleared
    assert dr.state == "success", states(dr)
    after = calls(dag_id) - before
    assert sum(after.values()) == 1 and {task for task, _ in after} == {failing}, \
        f"after the clear only the shard that never committed ran; the others were recovered: {after}"
    rows = sc.read_rows(root)
    sc.assert_exactly_once(rows, tasks=INSTANCES * SHARDS, per_task=ROWS)
    (rerun_try,) = {tr for _, tr in after}
    assert {r["task"]: r["attempt"] for r in rows} == {t: rerun_try if t == failing else 1
                                                       for t in range(INSTANCES * SHARDS)}
    manifest = read_success_marker(root, verify_files=True)
    recovered = {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]}
    assert recovered == {t: None if t == failing else 0 for t in range(INSTANCES * SHARDS)}
    assert manifest["app_attempt"] == 1 and manifest["totals"]["tasks"] == INSTANCES * SHARDS
