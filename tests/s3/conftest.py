"""S3 for the tests: moto's server on 127.0.0.1 on a free port, reached over HTTP.

Credentials and the endpoint reach boto through the environment (``AWS_ENDPOINT_URL_S3``), so worker processes
spawned by a test find the same server; Airflow reaches it through the connection ``commit_s3`` defined by
``AIRFLOW_CONN_COMMIT_S3`` (endpoint in its extra), as a deployment would.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from ..conftest import TEST_WORK
from ..support import forget_s3_clients, start_moto

_SERVER: dict[str, object] = {}
MOTO_LOG = TEST_WORK / "moto-s3-suite.log"


@pytest.fixture(scope="session")
def moto_server():
    env: dict[str, str] = {}
    MOTO_LOG.parent.mkdir(parents=True, exist_ok=True)
    proc, url = start_moto(env, log=MOTO_LOG)
    _SERVER["proc"] = proc
    env.update({"AIRFLOW_CONN_COMMIT_S3": json.dumps({
               "conn_type": "aws", "login": "testing", "password": "testing-secret-do-not-log",
               "extra": {"endpoint_url": url, "region_name": "us-east-1"}})})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    forget_s3_clients()
    yield url
    forget_s3_clients()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _SERVER.clear()
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _moto_still_serves():
    """The whole module shares one server: if a test ends with it gone, that test is the one to blame (every later
    test would fail with a refused connection); its exit status and the end of its log say how it went."""
    yield
    proc = _SERVER.get("proc")
    if proc is not None and proc.poll() is not None:   # type: ignore[attr-defined]
        tail = MOTO_LOG.read_text(errors="replace")[-3000:] if MOTO_LOG.exists() else ""
        pytest.fail(f"moto's server exited with status {proc.returncode} during this test; its log ends:\n{tail}")


@pytest.fixture
def bucket(moto_server) -> str:
    import boto3

    name = f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3fs_fs(moto_server):
    import s3fs

    return s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)


@pytest.fixture
def fault_proxy(moto_server):
    """A :class:`~.faultproxy.FaultProxy` in front of the session's moto server, with no fault armed yet."""
    from .faultproxy import FaultProxy, retrying_throttles

    with FaultProxy(moto_server, lifetime=300) as proxy, retrying_throttles():
        yield proxy
