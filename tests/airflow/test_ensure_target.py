"""The target exists before *every* try of a writer: ``pre_execute=ensure_target_before_each_try(...)``.

The seed failure (Spark ``INSERT OVERWRITE`` on S3): the writer deletes the table path, its application attempt
dies, and the retry fails with "Path does not exist". In Airflow the retry is a retry of the writer task, which
an upstream ``EnsureTargetOperator`` does not precede. Under ``dag.test()`` (real retries, try 1 -> 2), on the
local disk and on S3 (moto's server, reached through an Airflow connection), the guarded writer's retry succeeds
and the same DAG without the guard fails.
"""

from __future__ import annotations

import importlib
import json
import os
from collections import Counter

import pytest

from airflow_commit_provider.protocol import InvalidOutputSpec

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags
from ..support import forget_s3_clients, start_moto

pytestmark = pytest.mark.airflow

CONN_ID = "commit_s3_ensure"  # its own connection id: Airflow caches one file system per (protocol, conn_id)


@pytest.fixture
def dags(airflow_db):
    return fresh_test_dags("commit_test_dags")


@pytest.fixture(scope="module")
def s3_bucket():
    """moto's S3 server for this module, one bucket, and the Airflow connection ``commit_s3_ensure`` to it."""
    import boto3

    env: dict[str, str] = {}
    proc, url = start_moto(env)
    env["AIRFLOW_CONN_" + CONN_ID.upper()] = json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing-secret-do-not-log",
        "extra": {"endpoint_url": url, "region_name": "us-east-1"}})
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        boto3.client("s3", endpoint_url=url).create_bucket(Bucket="lake")
        forget_s3_clients()
        yield "lake"
    forget_s3_clients()
    proc.terminate()
    proc.wait(timeout=10)


def calls(dag_id: str) -> Counter:
    path = TEST_WORK / "calls.log"
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[1]) for line in path.read_text().splitlines() if line.split()[0] == dag_id)


def states(dr) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{ti.task_id}[{ti.map_index}]": (ti.state, ti.try_number) for ti in
                dr.get_task_instances(session=session)}


def s3fs():
    import s3fs as _s3fs

    return _s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "control-unguarded"])
def test_local_writer_retry_after_deleting_its_target(dags, guarded, capsys):
    dag_id = "ct_spark_guarded" if guarded else "ct_spark_unguarded"
    target = TEST_ROOT / dag_id
    target.mkdir()
    (target / "part-00000.txt").write_text("old data")
    (TEST_WORK / f"fail-{dag_id}-0-1").touch()   # try 1 dies right after deleting the target
    dr = getattr(dags, dag_id).test()
    assert calls(dag_id) == {0: 2}, "try 1 died, try 2 is Airflow's retry"
    if guarded:
        assert dr.state == "success", states(dr)
        assert (target / "part-00000.txt").read_text() == "written by try 2"
        out = capsys.readouterr().out
        assert f"ensure-target before try 1 of insert_overwrite: file://{target} exists" in out
        assert f"ensure-target before try 2 of insert_overwrite: file://{target} was missing: created it" in out
    else:  # the retry fails exactly as Spark's does: "Path does not exist"
        assert dr.state == "failed" and states(dr)["insert_overwrite[-1]"] == ("failed", 2)
        assert not target.exists()


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "control-unguarded"])
def test_s3_writer_retry_after_deleting_its_target(dags, s3_bucket, guarded, capsys):
    dag_id = "ct_spark_guarded" if guarded else "ct_spark_unguarded"
    path = f"{s3_bucket}/warehouse/{dag_id}"
    fs = s3fs()
    fs.pipe_file(f"{path}/part-00000.txt", b"old data")
    (TEST_WORK / f"fail-{dag_id}-0-1").touch()
    dr = getattr(dags, dag_id).test(run_conf={"target": f"s3://{path}", "conn_id": CONN_ID})
    assert calls(dag_id) == {0: 2}
    if guarded:
        assert dr.state == "success", states(dr)
        assert fs.cat_file(f"{path}/part-00000.txt") == b"written by try 2"
        assert (f"ensure-target before try 2 of insert_overwrite: s3://{path} was missing: created it"
                in capsys.readouterr().out)
    else:
        assert dr.state == "failed" and states(dr)["insert_overwrite[-1]"] == ("failed", 2)
        assert not fs.exists(path)


def test_guard_alone(tmp_path, capsys):
    """Creates a missing target, leaves an existing one and its content alone, renders templates, runs *then*,
    logs what it did, and refuses a file."""
    from datetime import datetime

    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from airflow_commit_provider.operators.ensure_target import ensure_target, ensure_target_before_each_try

    seen = []
    guard = ensure_target_before_each_try(str(tmp_path / "{{ params.table }}"), then=seen.append)
    with DAG("guard_alone", schedule=None, start_date=datetime(2024, 1, 1)):
        task = PythonOperator(task_id="writer", python_callable=print, pre_execute=guard)

    class TI:
        try_number = 3

    context = {"task": task, "ti": TI(), "params": {"table": "sales"}}
    guard(context)
    assert (tmp_path / "sales").is_dir() and seen == [context]
    assert f"ensure-target before try 3 of writer: file://{tmp_path}/sales was missing: created it" in \
        capsys.readouterr().out
    (tmp_path / "sales" / "part-0").write_text("kept")
    guard(context)
    assert (tmp_path / "sales" / "part-0").read_text() == "kept"
    assert "sales exists (left as it is)" in capsys.readouterr().out
    assert ensure_target(str(tmp_path / "sales")).created is False
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidOutputSpec, match="is a file"):
        ensure_target_before_each_try(str(tmp_path / "file"))(context)
    assert os.path.isfile(tmp_path / "file")


def test_example_overwrite_dag_retries_its_spark_like_writer(dags):
    """The shipped example: its Spark-like writer dies on try 1 after deleting its table, and the retry (guarded
    by ``pre_execute``) rebuilds it from the committed totals."""
    import pyarrow.parquet as pq

    calls_log = os.environ["COMMIT_DEMO_CALLS"]
    if os.path.exists(calls_log):
        os.unlink(calls_log)
    dr = importlib.import_module("example_overwrite").dag.test()
    assert dr.state == "success", states(dr)
    assert states(dr)["insert_overwrite_report[-1]"] == ("success", 2)
    report = pq.read_table(os.path.join(os.environ["COMMIT_DEMO_ROOT"], "daily_totals_report")).to_pydict()
    assert report == {"day": ["2024-01-01", "2024-01-02"], "cents": [123450.0, 98725.0]}
    with open(calls_log) as fh:
        tries = [line.split()[3] for line in fh if line.split()[1] == "insert_overwrite_report"]
    assert tries == ["1", "2"]


def test_a_file_where_the_target_should_be_fails_the_task_without_retry(tmp_path):
    """The same file is there on every try: the operator fails at once (AirflowFailException), same message."""
    from airflow_commit_provider.operators.ensure_target import EnsureTargetOperator
    from airflow_commit_provider.operators.failures import AirflowFailException

    (tmp_path / "file").write_text("x")
    operator = EnsureTargetOperator(task_id="ensure", target=str(tmp_path / "file"))
    with pytest.raises(AirflowFailException, match="InvalidOutputSpec: .*is a file") as raised:
        operator.execute({})
    assert isinstance(raised.value.__cause__, InvalidOutputSpec)
