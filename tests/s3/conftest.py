"""S3 for the tests: moto's server on 127.0.0.1 on a free port, reached over HTTP.

Credentials and the endpoint reach boto through the environment (``AWS_ENDPOINT_URL_S3``), so worker processes
spawned by a test find the same server; Airflow reaches it through the connection ``commit_s3`` defined by
``AIRFLOW_CONN_COMMIT_S3`` (endpoint in its extra), as a deployment would.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_server():
    port = _free_port()
    moto = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import requests

    for _ in range(100):
        try:
            requests.get(url, timeout=1)
            break
        except requests.RequestException:
            time.sleep(0.1)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-log",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": url,
           "AIRFLOW_CONN_COMMIT_S3": json.dumps({
               "conn_type": "aws", "login": "testing", "password": "testing-secret-do-not-log",
               "extra": {"endpoint_url": url, "region_name": "us-east-1"}})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield url
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    proc.terminate()
    proc.wait(timeout=10)


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
