"""The oldest supported Airflow (3.1.8): a second virtualenv, installed from its own constraints file
(``constraints-airflow-3.1.txt``), with this package installed from the checkout as a wheel (not editable); there
the ``dag.test()`` suite and the plugin tests (``tests/airflow``) run as a subprocess, and the plugin is checked in
Airflow 3.1's own api-server app (its routes mounted, behind auth) and in ``airflow plugins``.

The virtualenv is kept between runs under ``COMMIT_COMPAT_VENV`` (default: ``~/.cache/airflow-commit-provider``),
keyed by the constraints file's hash, so a CI machine with a warm cache pays only for the suite; a cold one also
for the install (pip's wheel cache makes it a few minutes)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO

pytestmark = [pytest.mark.compat, pytest.mark.slow]

AIRFLOW = "3.1.8"
CONSTRAINTS = REPO / "constraints-airflow-3.1.txt"
#: what tests/airflow needs besides the package
TEST_DEPS = ["pytest", "pytest-timeout", "moto[server]", "hypothesis", "duckdb", "build"]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}: {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc


def _clean_env() -> dict[str, str]:
    """The parent session's Airflow settings must not leak into the child (it prepares its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "COMMIT_", "PYTEST_"))}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    key = hashlib.sha256(CONSTRAINTS.read_bytes()).hexdigest()[:12]
    base = Path(os.environ.get("COMMIT_COMPAT_VENV", Path.home() / ".cache" / "airflow-commit-provider"))
    venv = base / f"airflow-{AIRFLOW}-{key}"
    python = venv / "bin" / "python"
    t0 = time.monotonic()
    if not (venv / ".complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", venv], timeout=300)
        _run([python, "-m", "pip", "install", "-q", "-U", "pip"], timeout=600)
        _run([python, "-m", "pip", "install", "-q", "--no-compile", "-c", CONSTRAINTS, f"apache-airflow=={AIRFLOW}",
              "apache-airflow-providers-amazon[s3fs]", "s3fs", "pyarrow", *TEST_DEPS], timeout=2400)
        (venv / ".complete").touch()
    # this checkout's package, as a wheel (rebuilt every run: the code under test changes, the venv does not)
    dist = tmp_path_factory.mktemp("compat-dist")
    _run([python, "-m", "build", "--wheel", "--outdir", dist, REPO], timeout=600)
    [wheel] = dist.glob("*.whl")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel], timeout=600)
    version = _run([python, "-c", "import airflow; print(airflow.__version__)"]).stdout.strip()
    assert version == AIRFLOW, version
    print(f"Airflow {AIRFLOW} venv ready in {time.monotonic() - t0:.0f} s ({venv})")
    return venv


@pytest.mark.timeout(3600)
def test_dag_test_suite_and_plugin_tests_on_the_oldest_airflow(venv):
    t0 = time.monotonic()
    proc = subprocess.run([venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/airflow"], cwd=REPO, env=_clean_env(), capture_output=True, text=True,
                          timeout=3600)
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, f"tests/airflow on Airflow {AIRFLOW}:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    assert " passed" in proc.stdout and " skipped" not in proc.stdout.splitlines()[-1]
    print(f"tests/airflow on Airflow {AIRFLOW}: {time.monotonic() - t0:.0f} s")


PLUGIN_CHECK = r"""
import json, os, sys, tempfile
home = tempfile.mkdtemp()
os.environ.update(AIRFLOW_HOME=home, AIRFLOW__CORE__LOAD_EXAMPLES="False",
                  AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db")
from airflow.api_fastapi.app import create_app
from fastapi.testclient import TestClient
client = TestClient(create_app())
out = {p: client.get(p).status_code for p in ("/commit-status/docs", "/commit-status/redoc",
       "/commit-status/openapi.json", "/commit-status/dags/d/runs/r?task_id=t&map_index={MAP_INDEX}",
       "/commit-status/api/dags/d/runs/r")}
print(json.dumps(out))
"""


@pytest.mark.timeout(3600)
def test_plugin_in_the_oldest_airflows_api_server(venv):
    """The plugin's app is mounted by Airflow 3.1's api-server, and every route of it needs a login there too."""
    out = _run([venv / "bin" / "python", "-c", PLUGIN_CHECK], env=_clean_env(), timeout=600).stdout
    codes = json.loads(out.strip().splitlines()[-1])
    assert set(codes.values()) == {401}, codes
    plugins = _run([venv / "bin" / "airflow", "plugins", "-o", "json"], env={
        **_clean_env(), "AIRFLOW_HOME": str(venv / "airflow-home")}, timeout=600).stdout
    [plugin] = [p for p in json.loads(plugins) if p["name"] == "commit_status"]
    assert "Commit status" in json.dumps(plugin)
