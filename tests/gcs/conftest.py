"""Google Cloud Storage for the tests: fake-gcs-server (the JSON API, in memory) on 127.0.0.1 on a free port,
reached over HTTP.

The endpoint and anonymous credentials reach gcsfs through the environment (``STORAGE_EMULATOR_HOST``,
``FSSPEC_GS_TOKEN``), so worker processes spawned by a test find the same server; Airflow reaches it through the
connection ``commit_gcs`` (``AIRFLOW_CONN_COMMIT_GCS``: endpoint, project and token in its extra), as a deployment
would.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from ..conftest import TEST_WORK
from ..support import start_fake_gcs

# before anything imports gcsfs: fsspec's gs:// class must be gcsfs's core one here (see tests/support.py)
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
_SERVER: dict[str, object] = {}
LOG = TEST_WORK / "fake-gcs-suite.log"


@pytest.fixture(scope="session")
def gcs_server():
    env: dict[str, str] = {}
    LOG.parent.mkdir(parents=True, exist_ok=True)
    proc, url = start_fake_gcs(env, log=LOG)
    _SERVER["proc"] = proc
    env["AIRFLOW_CONN_COMMIT_GCS"] = json.dumps({"conn_type": "google_cloud_platform", "extra": {
        "endpoint_url": url, "project": "test", "token": "anon"}})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield url
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _SERVER.clear()
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _server_still_serves():
    """The module shares one server: the test during which it died is the one to blame."""
    yield
    proc = _SERVER.get("proc")
    if proc is not None and proc.poll() is not None:   # type: ignore[attr-defined]
        tail = LOG.read_text(errors="replace")[-3000:] if LOG.exists() else ""
        pytest.fail(f"fake-gcs-server exited with status {proc.returncode} during this test; its log ends:\n{tail}")


@pytest.fixture
def gcs_bucket(gcs_server) -> str:
    """A new, empty bucket."""
    from airflow_commit_provider.protocol.stores.gcs import gcs_filesystem

    name = f"b-{uuid.uuid4().hex[:12]}"
    gcs_filesystem().mkdir(name)
    return name
