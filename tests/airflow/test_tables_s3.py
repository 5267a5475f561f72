"""A Delta table and an Iceberg table (SQL catalog, warehouse on S3) written by the operators under
``dag.test()`` into moto's S3 over HTTP, the endpoint and credentials given by one Airflow connection of type
``aws`` and nowhere else (no ``AWS_*`` variable in the environment): the stage's files go through it and so does
the table's log (delta-rs) or metadata and manifests (pyiceberg). The commit's first try fails right after its
table transaction; the retry adds nothing. Rows read back once by each format's reader; the secret key is in no
log line.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_commit_provider.protocol import faults

from ..conftest import TEST_ROOT, fresh_test_dags
from ..support import start_moto

pytestmark = pytest.mark.airflow

SECRET = "tables-secret-only-in-the-connection"
KEY = "tables-key"


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's server, a bucket, and the connection ``commit_s3_tables`` to it; the environment has no AWS
    variables, so only the connection can lead a client there."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    import boto3

    proc, url = start_moto()
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("AWS_"):
                mp.delenv(name)
        mp.setenv("AIRFLOW_CONN_COMMIT_S3_TABLES", json.dumps({
            "conn_type": "aws", "login": KEY, "password": SECRET,
            "extra": {"endpoint_url": url, "region_name": "us-east-1"}}))
        boto3.client("s3", endpoint_url=url, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                     region_name="us-east-1").create_bucket(Bucket="tables")
        yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def dags(airflow_db, s3_endpoint):
    yield fresh_test_dags("table_test_dags")
    faults.disarm()


def states(dr) -> dict[str, tuple[str, int]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{ti.task_id}[{ti.map_index}]": (ti.state, ti.try_number) for ti in
                dr.get_task_instances(session=session)}


def test_delta_and_iceberg_on_s3_through_the_connection_commit_once(dags, s3_endpoint, capsys, caplog):
    import deltalake
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    dr = dags.tbl_s3.test()
    assert dr.state == "success", states(dr)
    got = states(dr)
    assert got["delta.commit[-1]"] == got["iceberg.commit[-1]"] == ("success", 2), "try 1 failed after its table commit"

    delta = deltalake.DeltaTable("s3://tables/events_delta", storage_options={
        "AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"})
    catalog = load_catalog("commit_provider", type="sql", uri=f"sqlite:///{TEST_ROOT / 'tbl_s3.db'}",
                           warehouse="s3://tables/warehouse", **{
                               "s3.endpoint": s3_endpoint, "s3.access-key-id": KEY, "s3.secret-access-key": SECRET,
                               "s3.region": "us-east-1"})
    iceberg = catalog.load_table("lake.events")
    expected = sorted((s, r) for s in range(dags.SHARDS) for r in range(dags.ROWS))
    for name, table in (("delta", pa.table(delta.to_pyarrow_table())), ("iceberg", iceberg.scan().to_arrow())):
        assert sorted(zip(table["shard"].to_pylist(), table["row"].to_pylist())) == expected, name
    assert delta.version() == 0, "the retry made a second Delta transaction"
    assert len(iceberg.metadata.snapshots) == 1, "the retry made a second Iceberg snapshot"
    assert iceberg.location().startswith("s3://tables/warehouse/")

    out = capsys.readouterr()
    assert SECRET not in out.out + out.err + caplog.text, "the connection's secret key reached a log"
