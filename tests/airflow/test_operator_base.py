"""The operators' shared base (``CommitBaseOperator``) and the setup task's typed XCom (``SetupContext``).

- a bad shared parameter fails where the DAG is defined, naming the operator, the parameter and the value, for a
  plain operator, for ``commit_stage``, and for ``.partial(...)`` of a mapped write (whose constructor Airflow runs
  only when each mapped task runs): a DAG file holding one is an import error of the DAG bag;
- a stage built by hand with a mapped write (``.partial(shared params).expand(op_kwargs=...)``, templated target)
  runs end to end under ``dag.test()``, the rows are read back, and the Commit status view (the real read path,
  through the metadata database) reads the setup task's XCom as a ``SetupContext``;
- ``SetupContext`` round-trips, reads the exact dict the setup task wrote before the context was typed (and its
  JSON text), and refuses a malformed or newer one naming what is wrong.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import textwrap
from pathlib import Path
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from airflow.sdk import DAG

from airflow_commit_provider.operators import (
    CommitAbortOperator,
    CommitBaseOperator,
    CommitJobOperator,
    CommitSetupOperator,
    CommitWriteOperator,
)
from airflow_commit_provider.operators.setup_context import (
    SETUP_MARKER,
    VERSION,
    VERSION_KEY,
    InvalidSetupContext,
    SetupContext,
    setup_xcom,
)
from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.protocol import InvalidOutputSpec, read_success_marker

from ..conftest import DAGS_FOLDER, TEST_ROOT
from ..protocol import scenario as sc

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
SHARDS = 3
ROWS = 5


def load_shard(shard: int, ti) -> pa.Table:
    """The user callable of the mapped write: ROWS rows of its shard, two days."""
    return pa.table({"shard": pa.array([shard] * ROWS, pa.int32()), "row": pa.array(range(ROWS), pa.int32()),
                     "try": pa.array([ti.try_number] * ROWS, pa.int32()),
                     "day": [f"d{r % 2}" for r in range(ROWS)]})


#: Each operator with the arguments of its own it needs.
OPERATORS = {CommitSetupOperator: {}, CommitWriteOperator: {"python_callable": load_shard},
             CommitJobOperator: {"expected_tasks": 1}, CommitAbortOperator: {}}

BAD_SHARED = [
    ("algorithm", 3, "unknown committer algorithm 3"),
    ("algorithm", "v3", "unknown committer algorithm 'v3'"),
    ("mode", "upsert", "unknown output mode 'upsert'"),
    ("partition_by", ["../day"], "cannot be a directory name"),
    ("partition_by", 7, "give a partition column name or a list of them"),
    ("partition_by", ["day", "day"], "partition columns repeat"),
    ("commit_threads", 0, "commit_threads must be a positive integer"),
    ("commit_threads", "4", "commit_threads must be a positive integer"),
    ("target", "", "target is required"),
    ("target", None, "target is required"),
    ("durable", "yes", "give True (the default"),
    ("target", "memory://events", "a memory:// file system lives inside one process"),
]


def _dag(dag_id: str, **kwargs) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda op: op.__name__)
@pytest.mark.parametrize("name,value,why", BAD_SHARED, ids=[f"{n}={v!r}" for n, v, _ in BAD_SHARED])
def test_a_bad_shared_parameter_fails_at_construction_naming_it(operator, name, value, why):
    with _dag("opbase_bad") as dag, pytest.raises(InvalidOutputSpec) as raised:
        operator(task_id="op", **{"target": "/data/events", **OPERATORS[operator], name: value})
    message = str(raised.value)
    assert f"{operator.__name__}(task_id='op')" in message and f"{name}={value!r}" in message and why in message
    assert dag.task_ids == [], "a refused operator is not left half-built in the DAG"


def test_durable_reaches_the_local_store(tmp_path):
    """``durable=False`` (a scratch target) is the store's, not a global switch; the default fsyncs."""
    with _dag("opbase_durable") as dag:
        scratch = CommitSetupOperator(task_id="scratch", target=str(tmp_path), durable=False)
        table = CommitSetupOperator(task_id="table", target=f"file://{tmp_path}")
    context = {"dag": dag, "run_id": "r1"}
    assert scratch.committer(context).store.durable is False
    assert table.committer(context).store.durable is True


def test_dynamic_mode_needs_partition_by_at_construction():
    with _dag("opbase_dynamic"), pytest.raises(InvalidOutputSpec, match=r"partition_by=\(\): mode='dynamic'"):
        CommitSetupOperator(task_id="setup", target="/data/events", mode="dynamic")


@pytest.mark.parametrize("name,value,why", BAD_SHARED[:4], ids=[f"{n}={v!r}" for n, v, _ in BAD_SHARED[:4]])
def test_commit_stage_names_itself_and_the_parameter(name, value, why):
    with _dag("opbase_stage"), pytest.raises(InvalidOutputSpec) as raised:
        commit_stage("events", **{"target": "/data/events", "python_callable": load_shard, name: value})
    assert str(raised.value).startswith(f"commit_stage('events'): {name}={value!r}: ") and why in str(raised.value)


def _memory_targets() -> list:
    from airflow.sdk import ObjectStoragePath
    return ["memory://events", "MEMORY://events", ObjectStoragePath("memory://events")]


@pytest.mark.parametrize("build", ["commit_stage", "decorator", "operators"])
def test_the_magic_committer_off_s3_is_refused_where_the_dag_is_parsed(build, tmp_path):
    """Found from outside: ``algorithm="magic"`` with a local target built and parsed, and failed only when its
    setup ran (the committer is made then). A target that is a plain string (or an ObjectStoragePath) tells its
    file system at parse time: refused there, naming algorithms 1 and 2; a template is checked when it renders;
    an S3 target and the advised algorithms build."""
    from airflow.sdk import ObjectStoragePath

    from airflow_commit_provider.decorators.commit_stage import commit_stage_task
    from airflow_commit_provider.operators import CommitSetupOperator

    def make(target, algorithm="magic"):
        if build == "decorator":
            commit_stage_task(target=target, algorithm=algorithm)(load_shard).expand(shard=[0, 1])
        elif build == "operators":
            CommitSetupOperator(task_id="setup", target=target, algorithm=algorithm)
        else:
            commit_stage("events", target=target, python_callable=load_shard, algorithm=algorithm)

    for target in (str(tmp_path / "events"), f"file://{tmp_path}/events", ObjectStoragePath(f"file://{tmp_path}")):
        with _dag("opbase_magic") as dag, pytest.raises(InvalidOutputSpec, match=r"algorithm='magic': the magic "
                                                        r"committer stages files under their final names.*use algorithm 1 or 2"):
            make(target)
        assert dag.task_ids == []
    for target, algorithm in (("s3://bucket/events", "magic"), ("abfs://box/events", "magic"),
                              ("{{ var.value.events }}", "magic"),
                              (str(tmp_path / "events"), 1), (str(tmp_path / "events"), 2)):
        with _dag("opbase_magic_ok") as dag:
            make(target, algorithm)
        assert dag.task_ids


@pytest.mark.parametrize("build", ["commit_stage", "decorator", "iceberg_catalog"])
def test_a_memory_target_is_refused_where_the_dag_is_parsed_and_a_local_one_builds(build, tmp_path):
    """``memory://`` lives in one process; Airflow runs setup, writes and commit in different ones: refused where
    the DAG is parsed (as a string or an ObjectStoragePath, or as an Iceberg catalog's warehouse), naming the way
    out; the advised local path builds the same stage (which then runs end to end as in the tests above)."""
    from airflow_commit_provider.decorators.commit_stage import commit_stage_task

    def make(target, **extra):
        if build == "decorator":
            commit_stage_task(target=target, **extra)(load_shard).expand(shard=[0, 1])
        else:
            commit_stage("events", target=target, python_callable=load_shard, **extra)

    if build == "iceberg_catalog":
        refused = [(str(tmp_path / "wh"), {"table_format": "iceberg", "table_name": "ns.events",
                                           "catalog": {"type": "sql", "uri": "sqlite:///x.db",
                                                       "warehouse": "memory://wh"}})]
    else:
        refused = [(target, {}) for target in _memory_targets()]
    for target, extra in refused:
        with _dag("opbase_memory") as dag, pytest.raises(InvalidOutputSpec) as raised:
            make(target, **extra)
        message = str(raised.value)
        assert "memory://" in message and "inside one process" in message and \
            ("local path" in message or "local or s3://" in message), message
        assert dag.task_ids == []
    with _dag("opbase_memory_advice") as dag:
        make(str(tmp_path / "events"))
    assert dag.task_ids


def test_a_target_template_rendered_to_memory_is_refused_before_the_committer_is_made(tmp_path):
    """A template renders where the task runs: the rendered target is checked there, before anything is made."""
    with _dag("opbase_memory_template") as dag:
        setup = CommitSetupOperator(task_id="setup", target="{{ params.root }}")
    for root, refused in (("memory://events", True), (str(tmp_path / "events"), False)):
        context = {"dag": dag, "run_id": "r1", "params": {"root": root}}
        setup.target = "{{ params.root }}"
        setup.render_template_fields(context)
        if refused:
            with pytest.raises(InvalidOutputSpec, match=r"CommitSetupOperator\(task_id='setup'\): "
                                                        r"target='memory://events': a memory:// file system"):
                setup.committer(context)
        else:
            assert setup.committer(context).store.url().endswith("events")


@pytest.mark.parametrize("name,value,why", BAD_SHARED, ids=[f"{n}={v!r}" for n, v, _ in BAD_SHARED])
def test_partial_of_a_mapped_write_checks_the_shared_parameters(name, value, why):
    """Airflow runs a mapped operator's constructor only when a mapped task runs: ``.partial`` checks instead."""
    with _dag("opbase_partial") as dag, pytest.raises(InvalidOutputSpec) as raised:
        CommitWriteOperator.partial(task_id="write", python_callable=load_shard,
                                    **{"target": "/data/events", name: value}).expand(op_kwargs=[{"shard": 0}])
    message = str(raised.value)
    assert f"CommitWriteOperator.partial(task_id='write'): {name}={value!r}" in message and why in message
    assert dag.task_ids == []


def test_a_dag_file_with_a_bad_algorithm_in_partial_is_an_import_error(tmp_path):
    """At DAG parse time, as the dag-processor parses: the file is an import error naming the parameter."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow < 3.2
        from airflow.models.dagbag import DagBag

    (tmp_path / "bad_partial.py").write_text(textwrap.dedent(f"""
        from datetime import datetime
        from airflow.sdk import DAG
        from airflow_commit_provider.operators import CommitWriteOperator

        with DAG("opbase_bad_file", schedule=None, start_date=datetime(2024, 1, 1)):
            CommitWriteOperator.partial(task_id="write", target={str(tmp_path / "out")!r}, algorithm="v3",
                                        python_callable=print).expand(op_kwargs=[{{}}, {{}}])
    """))
    bag = DagBag(dag_folder=str(tmp_path))
    assert "opbase_bad_file" not in bag.dags
    [error] = bag.import_errors.values()
    assert "CommitWriteOperator.partial(task_id='write'): algorithm='v3': unknown committer algorithm" in error


def test_shared_parameters_are_normalised_and_templated():
    with _dag("opbase_good"):
        ops = [op(task_id=op.__name__, target="{{ params.root }}/x", algorithm="v2", mode="dynamic",
                  partition_by="day", **OPERATORS[op]) for op in OPERATORS]
        mapped = CommitWriteOperator.partial(task_id="mapped", target="s3://bucket/x", python_callable=load_shard,
                                             algorithm="magic").expand(op_kwargs=[{"shard": 0}])
    for op in ops:
        assert isinstance(op, CommitBaseOperator)
        assert (op.algorithm, op.mode, op.partition_by) == (2, "dynamic", ["day"])
        assert tuple(op.template_fields[:3]) == ("target", "conn_id", "job_name")
    assert tuple(mapped.template_fields) == ("target", "conn_id", "job_name", "job_key", "table_name", "op_args",
                                            "op_kwargs")
    with pytest.raises(TypeError, match="only be called on Operator classes"):
        ops[1].partial(task_id="again")


# ------------------------------------------------------------------------------------------- dag.test() end to end
def hand_built_stage(dag_id: str, root: str) -> DAG:
    """setup >> mapped write >> commit, abort as the teardown, every operator given the shared parameters."""
    shared = {"target": "{{ params.root }}/events", "algorithm": "v2", "mode": "error", "partition_by": "day",
              "job_name": "events"}
    with _dag(dag_id, params={"root": root}) as dag:
        setup = CommitSetupOperator(task_id="setup", **shared)
        write = CommitWriteOperator.partial(task_id="write", python_callable=load_shard, **shared).expand(
            op_kwargs=[{"shard": n} for n in range(SHARDS)])
        commit = CommitJobOperator(task_id="commit", write_task_id="write", **shared)
        abort = CommitAbortOperator(task_id="abort", commit_task_id="commit", **shared)
        setup >> write >> commit >> abort.as_teardown(setups=setup)
    return dag


@pytest.fixture
def mapped_dag(airflow_db):
    """The DAG, from a file in the session's DAGs folder: ``dag.test()`` runs DAGs of a bundle only."""
    root = TEST_ROOT / "opbase_mapped"
    shutil.rmtree(root, ignore_errors=True)
    (DAGS_FOLDER / "opbase_test_dags.py").write_text(
        '"""The DAG of tests/airflow/test_operator_base.py."""\n'  # "DAG": the DAG bag's safe mode skips files without
        "from tests.airflow.test_operator_base import hand_built_stage\n\n"
        f"opbase_mapped = hand_built_stage('opbase_mapped', {str(root)!r})\n")
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.insert(0, str(DAGS_FOLDER))
    return importlib.import_module("opbase_test_dags").opbase_mapped, root


def _xcom(dag_id: str, run_id: str, task_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        [row] = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id,
                                                   key="return_value").all()
        return XComModel.deserialize_value(row)


@pytest.mark.airflow
def test_mapped_write_with_shared_parameters_runs_end_to_end(mapped_dag):
    from airflow_commit_provider.plugins import app as plugin_app

    dag, root = mapped_dag
    dr = dag.test()
    assert dr.state == "success"
    target = str(root / "events")  # the templated target, rendered for every task, mapped ones included
    rows = sc.read_rows(target)
    assert sorted((r["shard"], r["row"]) for r in rows) == [(s, r) for s in range(SHARDS) for r in range(ROWS)]
    assert {r["day"] for r in rows} == {"d0", "d1"} and {r["try"] for r in rows} == {1}
    manifest = read_success_marker(target, verify_files=True)
    assert manifest["totals"]["tasks"] == SHARDS and manifest["totals"]["rows"] == SHARDS * ROWS

    value = _xcom("opbase_mapped", dr.run_id, "setup")
    ctx = SetupContext.from_xcom(value)
    assert (ctx.job_id, ctx.job_name, ctx.algorithm, ctx.algorithm_value) == (manifest["job_id"], "events", "v2", 2)
    assert ctx.target.rstrip("/").endswith(target) and ctx.partition_by == ("day",) and ctx.mode == "error"
    assert (ctx.job_uuid, ctx.generation, ctx.app_attempt, ctx.state) == (manifest["job_uuid"], 0, 0, "running")
    assert ctx.setup_try == 1 and value[VERSION_KEY] == VERSION

    model = plugin_app.build_model("opbase_mapped", dr.run_id, "v")  # the view's own read: the metadata DB
    [stage] = model.summary.stages
    assert (stage.stage, stage.setup_task_id, stage.job_id, stage.state) == ("events", "setup", ctx.job_id,
                                                                             "committed")
    assert {r.task: r.status for r in model.stages["setup"].rows} == {n: "committed" for n in range(SHARDS)}


# ------------------------------------------------------------------------------------------------- SetupContext
#: What the setup task returned before the context was typed (every key, in its order; no version key).
MAIN_SHAPE = {
    "job_id": "events__manual__2024-01-01T00_00_00_00_00__write_events-1f2e3d4c5b", "job_uuid": "0f1e2d3c4b5a",
    "generation": 1, "app_attempt": 2, "first_app_attempt": 1, "state": "running", SETUP_MARKER: True,
    "job_name": "write_events", "target": "file:///data/events", "conn_id": None, "algorithm": "v1",
    "algorithm_value": 1, "mode": "dynamic", "partition_by": ["day", "hour"], "clear_number": 1, "setup_try": 2,
}


def test_setup_context_reads_the_shape_written_before_it_existed():
    for value in (MAIN_SHAPE, json.dumps(MAIN_SHAPE)):  # a dict, or its JSON text (a JSON-only XCom backend)
        assert setup_xcom(value) == MAIN_SHAPE
        ctx = SetupContext.from_xcom(value)
        assert (ctx.job_id, ctx.job_uuid, ctx.generation, ctx.app_attempt, ctx.first_app_attempt, ctx.state) == (
            MAIN_SHAPE["job_id"], "0f1e2d3c4b5a", 1, 2, 1, "running")
        assert (ctx.target, ctx.conn_id, ctx.algorithm, ctx.algorithm_value, ctx.mode, ctx.partition_by) == (
            "file:///data/events", None, "v1", 1, "dynamic", ("day", "hour"))
        assert (ctx.job_name, ctx.clear_number, ctx.setup_try) == ("write_events", 1, 2)
    # and writes the same keys, in the same order, with the version added
    assert SetupContext.from_xcom(MAIN_SHAPE).to_xcom() == {**MAIN_SHAPE, VERSION_KEY: VERSION}
    assert list(SetupContext.from_xcom(MAIN_SHAPE).to_xcom()) == [*MAIN_SHAPE, VERSION_KEY]


def test_setup_context_round_trip():
    ctx = SetupContext(job_id="j", target="s3://bucket/events", conn_id="aws_lake", algorithm="magic",
                       algorithm_value="MAGIC", mode="overwrite", partition_by=["day"], job_name="stage",
                       job_uuid="u", generation=0, app_attempt=0, first_app_attempt=0, state="committing",
                       clear_number=0, setup_try=1)
    assert ctx.algorithm_value == "magic" and ctx.partition_by == ("day",)
    assert SetupContext.from_xcom(ctx.to_xcom()) == ctx
    assert SetupContext.from_xcom(json.loads(json.dumps(ctx.to_xcom()))) == ctx
    sharded = SetupContext.from_xcom({**ctx.to_xcom(), "shards_per_task": 10})
    assert sharded.shards_per_task == 10 and SetupContext.from_xcom(sharded.to_xcom()) == sharded
    assert ctx.shards_per_task == 1 and "shards_per_task" not in ctx.to_xcom()
    with pytest.raises(AttributeError):
        ctx.mode = "append"  # type: ignore[misc]


def test_setup_context_tolerates_what_it_does_not_need():
    """Unknown keys (a reader's own, a later minor addition) are ignored; without ``algorithm_value`` the label
    says it; only what rebuilding the committer needs is required."""
    ctx = SetupContext.from_xcom({"job_id": "j", "target": "/x", "algorithm": "v2", "mode": "append",
                                  "setup_task_id": "stage.setup", "partition_by": None})
    assert (ctx.algorithm_value, ctx.partition_by, ctx.job_uuid) == (2, (), None)


@pytest.mark.parametrize("change,why", [
    ({VERSION_KEY: VERSION + 1}, f"version {VERSION + 1} was written by a newer provider"),
    ({VERSION_KEY: "1"}, f"{VERSION_KEY} must be a positive integer"),
    ({"mode": "upsert"}, "unknown output mode 'upsert'"),
    ({"algorithm_value": 9}, "unknown committer algorithm 9"),
    ({"partition_by": ["../day"]}, "cannot be a directory name"),
    ({"target": ""}, "target must be a non-empty URL"),
    ({"job_id": None}, "job_id must be a non-empty string"),
    ({"generation": -1}, "generation must be a non-negative integer or None"),
    ({"setup_try": True}, "setup_try must be a non-negative integer or None"),
    ({"conn_id": 5}, "conn_id must be a string or None"),
    ({"shards_per_task": 0}, "shards_per_task must be a positive integer"),
])
def test_setup_context_refuses_a_bad_value_naming_it(change, why):
    with pytest.raises(InvalidSetupContext, match="setup context") as raised:
        SetupContext.from_xcom({**MAIN_SHAPE, **change})
    assert why in str(raised.value)


@pytest.mark.parametrize("value", [None, [1], "not json", '"text"', {"job_id": "j"}, {**MAIN_SHAPE, SETUP_MARKER: False}])
def test_other_xcoms_are_not_setup_contexts(value):
    assert setup_xcom(value) is None


def test_a_setup_context_without_what_the_committer_needs_is_refused():
    with pytest.raises(InvalidSetupContext, match="missing target, mode, algorithm_value"):
        SetupContext.from_xcom({SETUP_MARKER: True, "job_id": "j"})
    with pytest.raises(InvalidSetupContext, match="expected a dict, got list"):
        SetupContext.from_xcom([MAIN_SHAPE])


def test_a_failed_runs_teardown_says_how_to_remove_what_it_kept(tmp_path):
    """Nothing committed: the teardown keeps the job's records for a clear of the run, and says how to remove
    them when the run will not be cleared; the command it gives works."""
    import shlex
    import subprocess

    from airflow_commit_provider.protocol import make_committer

    root = str(tmp_path / "events")
    with _dag("opbase_leftovers") as dag:
        abort = CommitAbortOperator(task_id="abort", target=root, job_name="stage")
    job_id = abort.job_id({"dag": dag, "run_id": "r1"})
    committer = make_committer(root, job_id)
    committer.setup_job()
    committer.setup_task(0, 1)   # a try that died before its commit
    result = abort.execute({"dag": dag, "run_id": "r1"})
    assert result["aborted"] and result["kept_committed_tasks"] == []
    hint = result["hint"]
    assert hint.startswith(f"nothing of job {job_id} was committed; its records stay under ") and "clear" in hint
    assert (tmp_path / "events" / "_temporary" / job_id).is_dir()
    command = shlex.split(hint[hint.index("with: ") + len("with: "):hint.index(" (purge_on_failure")])
    assert command[0] == "airflow-commit"
    # the console script as a person runs it: installed beside this Python, outside the checkout
    script = Path(sys.executable).with_name("airflow-commit")
    subprocess.run([str(script), *command[1:]], cwd=tmp_path, check=True, timeout=120)
    assert not (tmp_path / "events" / "_temporary").exists(), "the command removed the job's records"


BAD_TABLE = [
    ({"table_format": "hudi"}, "table_format='hudi'", "use one of delta, iceberg"),
    ({"table_format": "delta", "algorithm": 2}, "algorithm=2", "use algorithm 1"),
    ({"table_format": "iceberg", "table_name": "ns.t", "algorithm": 2}, "algorithm=2", "use algorithm 1"),
    # on S3, where the magic committer is otherwise allowed
    ({"table_format": "delta", "algorithm": "magic", "target": "s3://lake/events"}, "algorithm='magic'",
     "use algorithm 1"),
    ({"table_format": "iceberg", "table_name": "ns.t", "algorithm": "magic", "target": "s3://lake/wh"},
     "algorithm='magic'", "use algorithm 1"),
    ({"table_format": "delta", "table_name": "ns.t"}, "table_name='ns.t'", "is an Iceberg parameter"),
    ({"table_format": "iceberg", "table_name": "events"}, "table_name='events'", "table_name='namespace.table'"),
    ({"table_format": "iceberg", "table_name": "ns.t", "catalog": {"type": "sql"}, "catalog_conn_id": "c"},
     "catalog={'type': 'sql'}", "not both"),
    ({"table_name": "ns.t"}, "table_name='ns.t'", "give table_format='iceberg' too"),
]


@pytest.mark.parametrize("params,shown,why", BAD_TABLE,
                         ids=[f"{p.get('table_format')}-{shown}" for p, shown, _ in BAD_TABLE])
def test_a_bad_table_parameter_fails_at_construction_naming_it(params, shown, why):
    params = {"target": "/data/events", **params}
    with _dag("opbase_table") as dag, pytest.raises(InvalidOutputSpec) as raised:
        commit_stage("events", python_callable=load_shard, **params)
    assert str(raised.value).startswith(f"commit_stage('events'): {shown}: ") and why in str(raised.value)
    assert dag.task_ids == []


def test_an_iceberg_stage_with_a_catalog_needs_no_target():
    with _dag("opbase_iceberg"):
        group = commit_stage("events", target=None, python_callable=load_shard, table_format="iceberg",
                             table_name="ns.events", catalog={"type": "sql", "uri": "sqlite:///x.db"})
    assert sorted(t.task_id for t in group) == ["events.abort", "events.commit", "events.setup", "events.write"]
