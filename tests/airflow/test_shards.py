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


def fail_tries(dag_id: str, task: int, tries: tuple[int, ...]) -> None:
    """Make those tries of shard (protocol task number) *task* of *dag_id* fail (``shard_test_dags``)."""
    for tr in tries:
        (TEST_WORK / f"fail-{dag_id}-{task}-{tr}").touch()


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

    check_job_shards({}, 1, "each", "j", "w")   # an unsharded (or earlier) job record has no label
    check_job_shards({}, 1, "together", "j", "w")   # one shard: the same task either way
    check_job_shards({"shards_per_task": 4}, 4, "each", "j", "w")
    check_job_shards({"shards_in_task": 4}, 4, "together", "j", "w")
    with pytest.raises(InvalidOutputSpec, match=r"w: job j was set up with shards_per_task=4, shard_commit='each', "
                                                r"this stage has shards_per_task=2, shard_commit='each'"):
        check_job_shards({"shards_per_task": 4}, 2, "each", "j", "w")
    with pytest.raises(InvalidOutputSpec, match=r"shards_per_task=1, this stage has shards_per_task=3, "):
        check_job_shards({}, 3, "each", "j", "w")
    # the same N, shards committed the other way: task numbers mean other task instances
    with pytest.raises(InvalidOutputSpec, match=r"set up with shards_per_task=4, shard_commit='each', this stage "
                                                r"has shards_per_task=4, shard_commit='together'"):
        check_job_shards({"shards_per_task": 4}, 4, "together", "j", "w")
    # shards committed together whose number changed: a recovered task instance would pass for all of them
    with pytest.raises(InvalidOutputSpec, match=r"shards_per_task=1, this stage has shards_per_task=4, "
                                                r"shard_commit='together'"):
        check_job_shards({}, 4, "together", "j", "w")


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2), ((2, "each"), (2, "together")),
                                          ((2, "together"), (2, "each")), ((2, "together"), 1)],
                         ids=["2-1", "1-2", "each-together", "together-each", "together-1"])
def test_a_job_commit_refuses_a_shards_per_task_changed_since_the_setup(tmp_path, before, after):
    """The commit task counts the job's tasks as write task instances x ``shards_per_task``: a commit that runs
    after the DAG changed N (the setup and the writes ran before the edit, the commit after it: a retry, a queue)
    would commit the wrong tasks. From N=2 to 1 it committed half of them (the others' rows silently left out, and
    ``success``). It refuses, naming both values, with nothing committed; restored, the commit takes every row. So
    does a change of ``shard_commit`` (the same N numbers the tasks otherwise), and a late try after the commit."""
    from datetime import datetime

    import pyarrow as pa

    from airflow_commit_provider.operators import CommitJobOperator, CommitSetupOperator
    from airflow_commit_provider.protocol import run_task_attempt

    from airflow_commit_provider.operators.shards import tasks_per_instance

    (n_before, how_before), (n_after, how_after) = ((x, "each") if isinstance(x, int) else x for x in (before, after))
    root = str(tmp_path / "out")
    with DAG("sh_commit_rekeyed", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
        setup = CommitSetupOperator(task_id="setup", target=root, job_name="s", mode="append",
                                    shards_per_task=n_before, shard_commit=how_before)
        commits = [CommitJobOperator(task_id=f"commit{i}", target=root, job_name="s", mode="append",
                                     shards_per_task=n, shard_commit=how, expected_tasks=1)
                   for i, (n, how) in enumerate(((n_before, how_before), (n_after, how_after)))]
    context = {"dag": dag, "run_id": "r1"}
    committer = setup.committer(context)   # what the setup task sets up (its labels keep N)
    committer.setup_job()
    written = tasks_per_instance(n_before, how_before)
    for task in range(written):   # the one write task instance's protocol tasks, as its write runs them
        assert run_task_attempt(committer, task, 1, lambda w, t=task: w.write(pa.table({"x": [t]}))).status \
            == "committed"
    from airflow_commit_provider.operators.failures import AirflowFailException  # the Task SDK's, or 3.1's

    with pytest.raises(AirflowFailException, match=rf"InvalidOutputSpec: CommitJobOperator 'commit1': job "
                       rf"\S+ was set up with shards_per_task={n_before}\b.*, this stage has "
                       rf"shards_per_task={n_after}\b"):
        commits[1].execute(context)
    assert not (tmp_path / "out" / "_SUCCESS").exists() and sc.read_rows(root) == []
    commits[0].execute(context)
    assert sorted(r["x"] for r in sc.read_rows(root)) == list(range(written))
    # a late try after the commit is held to the committed generation's shards too: it would report other task
    # instances' records under its task numbers
    with pytest.raises(AirflowFailException, match=rf"was set up with shards_per_task={n_before}\b.*this try comes "
                       r"after the job committed with them: restore them .*or run the DAG again"):
        commits[1].execute(context)


@pytest.mark.parametrize("dag_id", ["sh_tables", "sh_tables_together"])
def test_table_stages_with_shards_retry_a_shard_and_a_keyed_second_run_replaces_the_first(dags, dag_id):
    """Delta and Iceberg stages with ``shards_per_task=3`` and ``job_key``: shard 1 of instance 0 and shard 2 of
    instance 1 fail their first try and the retries commit them; the tables read back (with their own readers)
    every row once, added by one transaction per job commit. A second run of the interval (another run id, the
    same job) replaces the first's rows in one more transaction: rows still once, from the second run. With the
    shards committed together (``sh_tables_together``) the retries write every shard of instances 0 and 1 again."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    from datetime import datetime, timedelta, timezone

    import pyarrow as pa

    from ..protocol.test_tables import delta_table, iceberg_table, transactions

    tables = {"delta": {"format": "delta", "location": str(TEST_ROOT / dag_id / "delta")},
              "iceberg": {"format": "iceberg", "location": str(TEST_ROOT / dag_id / "iceberg"),
                          "table_name": "shards.events"}}

    def read(cfg: dict) -> pa.Table:
        return pa.table(delta_table(cfg).to_pyarrow_table()) if cfg["format"] == "delta" else \
            iceberg_table(cfg).scan().to_arrow()

    day, tasks = datetime(2024, 6, 1, tzinfo=timezone.utc), INSTANCES * 3
    retried = {1, 5} if dag_id == "sh_tables" else set(range(6))   # the failed shards, or their instances' all
    for task in (1, 5):
        (TEST_WORK / f"fail-{dag_id}-{task}-1").touch()
    for n, hours in enumerate((1, 2)):
        dr = getattr(dags, dag_id).test(logical_date=day, run_after=day + timedelta(hours=hours))
        assert dr.state == "success", states(dr)
        if n == 0:
            assert {k: v for k, v in states(dr).items() if k.endswith(".write[0]") or k.endswith(".write[1]")} == \
                {f"{s}.write[{i}]": ("success", 2) for s in tables for i in (0, 1)}
            for task in (1, 5):
                (TEST_WORK / f"fail-{dag_id}-{task}-1").unlink()
        for stage, cfg in tables.items():
            t = read(cfg)
            assert Counter(zip(t["task"].to_pylist(), t["row"].to_pylist())) == {
                (k, r): 1 for k in range(tasks) for r in range(ROWS)}, f"{stage}, run {n + 1}: rows once"
            attempts = dict(zip(t["task"].to_pylist(), t["attempt"].to_pylist()))
            assert attempts == {k: 2 if n == 0 and k in retried else 1 for k in range(tasks)}, (stage, n)
            assert transactions(cfg) == n + 1, f"{stage}: one transaction per job commit"
    first_tries = {(k, 1): 4 for k in range(tasks)}
    if dag_id == "sh_tables_together":   # one shard at a time: shard 1 failing stopped shard 2 (task 2) in try 1
        first_tries[(2, 1)] = 2
    assert calls(dag_id) == {**first_tries, **{(k, 2): 2 for k in retried}}, \
        "per stage: every shard once per run, plus the retries' shards in the first run"


@pytest.mark.parametrize("dag_id", ["sh_operator", "sh_decorator"])
def test_a_sharded_run_that_failed_then_was_cleared_recovers_the_committed_shards(dags, dag_id):
    """Shard 2 of write instance 1 (task 6) fails both tries: instance 1 fails with shards 4, 5 and 7 committed,
    instances 0 and 2 succeed, the job commit does not run, the teardown keeps the committed shards and nothing
    is visible. The run is cleared (dag.test on the same logical date): every shard but task 6 is recovered (the
    user code is not called again for it), task 6 runs once more, and the job commits each row once."""
    from datetime import datetime, timezone

    when = datetime(2024, 5, 1, tzinfo=timezone.utc)
    failing = 1 * SHARDS + 2
    fail_tries(dag_id, failing, (1, 2))
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


@pytest.mark.parametrize("dag_id", ["sh_together_operator", "sh_together_decorator"])
def test_shards_committed_together_retry_their_task_instance_whole_and_a_clear_recovers_it(dags, dag_id):
    """``shard_commit="together"``: shard 1 of instance 0 fails its first try, so that try commits nothing and its
    retry writes all four shards of instance 0 again; instance 2 fails both tries (shard 2, task 10) and the run
    fails with nothing visible. Cleared, the run recovers instances 0 and 1 whole (no shard of them runs again),
    instance 2 writes its four shards, and the job commits every shard's rows once: one protocol task per task
    instance, the shards named in the record's labels."""
    from datetime import datetime, timezone

    when = datetime(2024, 5, 2, tzinfo=timezone.utc)
    fail_tries(dag_id, 1, (1,))
    fail_tries(dag_id, 10, (1, 2))
    dr = getattr(dags, dag_id).test(logical_date=when, run_after=when)
    st = states(dr)
    write = "write.write" if dag_id == "sh_together_operator" else "load_together.write"
    assert dr.state == "failed", st
    assert [st[f"{write}[{i}]"] for i in range(INSTANCES)] == [("success", 2), ("success", 1), ("failed", 2)], st
    root = str(TEST_ROOT / dag_id)
    assert sc.read_rows(root) == [], "nothing of the failed job is visible"
    first = calls(dag_id)
    # a failed shard stops the shards of its try not started yet (which ones started depends on the threads)
    assert set(first.values()) == {1} and {(1, 1), (10, 1), (10, 2)} <= set(first)
    assert {(t, tr) for t, tr in first if t // SHARDS == 0 and tr == 2} == {(t, 2) for t in range(SHARDS)}, \
        "a failed shard's retry writes every shard of its task instance"
    assert {(t, tr) for t, tr in first if t // SHARDS == 1} == {(t, 1) for t in range(SHARDS, 2 * SHARDS)}
    for tr in (1, 2):
        (TEST_WORK / f"fail-{dag_id}-10-{tr}").unlink()

    dr = getattr(dags, dag_id).test(logical_date=when, run_after=when)   # the whole run cleared
    assert dr.state == "success", states(dr)
    after = calls(dag_id) - first
    assert {task for task, _ in after} == {8, 9, 10, 11} and sum(after.values()) == SHARDS, \
        f"instances 0 and 1 were recovered whole; instance 2 wrote its shards: {after}"
    rows = sc.read_rows(root)
    sc.assert_exactly_once(rows, tasks=INSTANCES * SHARDS, per_task=ROWS)
    manifest = read_success_marker(root, verify_files=True)
    assert manifest["totals"]["tasks"] == INSTANCES
    assert {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]} == {0: 0, 1: 0, 2: None}
    assert manifest["labels"]["shards_in_task"] == SHARDS and "shards_per_task" not in manifest["labels"]


def test_a_bad_shard_commit_is_refused_naming_it():
    def rows(shard_index: int):
        return None

    with pytest.raises(InvalidOutputSpec, match=r"commit_stage\('s'\): shard_commit='both': give 'each' .* or "
                                                r"'together'"):
        commit_stage("s", target="/tmp/x", python_callable=rows, shards_per_task=2, shard_commit="both")
    with pytest.raises(InvalidOutputSpec, match=r"shard_commit=None"):
        commit_stage_task(target="/tmp/x", shards_per_task=2, shard_commit=None)(rows)


def test_a_keyed_job_whose_shards_changed_is_refused_with_advice_that_works(tmp_path):
    """A job fixed by ``job_key`` fails with its shards committed together (the teardown keeps instance 0); the DAG
    is edited to commit them each alone. A new run is the same job, so the refusal's advice cannot be "a new run":
    it names the purge command. Followed as printed (the real command line), the next run's setup passes and its
    commit takes every row once."""
    import shlex
    import subprocess
    import sys
    from datetime import datetime

    import pyarrow as pa

    from airflow_commit_provider.operators import CommitAbortOperator, CommitJobOperator, CommitSetupOperator
    from airflow_commit_provider.protocol import run_task_attempt

    root = str(tmp_path / "out")

    def stage(how):
        common = {"target": root, "job_name": "s", "mode": "append", "job_key": "2024-01-01",
                  "shards_per_task": 2, "shard_commit": how}
        with DAG("sh_keyed", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
            ops = (CommitSetupOperator(task_id="setup", **common), CommitJobOperator(task_id="commit",
                   expected_tasks=1, **common), CommitAbortOperator(task_id="abort", **common))
        return dag, ops

    dag, (setup, _, abort) = stage("together")
    first = {"dag": dag, "run_id": "r1"}
    committer = setup.committer(first)
    committer.setup_job()
    run_task_attempt(committer, 0, 1, lambda w: w.write(pa.table({"x": [0, 1]})))
    assert abort.committer(first).abort_job(keep_committed=True)["kept_committed_tasks"] == [0]

    dag, (setup, commit, _) = stage("each")
    second = {"dag": dag, "run_id": "r2"}   # a new run: the same job
    with pytest.raises(InvalidOutputSpec, match=r"job_key '2024-01-01' makes every run of it this job\), or purge "
                                                r"this job.*: airflow-commit abort ") as refused:
        setup._check_shards(setup.committer(second), before_setup=True)
    command = shlex.split(str(refused.value).rsplit(": ", 1)[1])
    assert command[0] == "airflow-commit"
    done = subprocess.run([sys.executable, "-m", "airflow_commit_provider.cli", *command[1:]], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    setup._check_shards(setup.committer(second), before_setup=True)
    committer = setup.committer(second)
    committer.setup_job()
    for task in (0, 1):
        run_task_attempt(committer, task, 1, lambda w, t=task: w.write(pa.table({"x": [t]})))
    commit.execute(second)
    assert sorted(r["x"] for r in sc.read_rows(root)) == [0, 1], "the purged rows are gone, the new run's once"
