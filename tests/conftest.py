"""Shared fixtures. Tests run from the repository root; worker processes import ``tests.*`` from there.

Airflow reads its configuration when first imported, and test modules import it at collection time, so the
session's Airflow home (SQLite metadata DB, DAGs folder holding the example DAGs and the test DAGs) is prepared
here, at import, before any test module is collected. The DB itself is migrated lazily by the ``airflow_db``
fixture, so protocol-only runs never pay for it.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _forget_the_checkouts_egg_info() -> None:
    """``pip install -e .`` leaves ``airflow_commit_provider.egg-info`` in the checkout, and the checkout is on
    ``sys.path`` here (and in every worker process): importlib.metadata then finds the distribution twice, Airflow
    loads its plugin twice, and the Task SDK stops registering plugins at that duplicate (OpenLineage's listener
    among them). The installed ``.dist-info`` holds the same metadata; the editable install needs nothing else."""
    egg_info = REPO / "airflow_commit_provider.egg-info"
    if egg_info.is_dir():
        from importlib.metadata import distributions

        installed = [d for d in distributions() if (d.metadata["Name"] or "").lower() == "airflow-commit-provider"
                     and ".dist-info" in str(getattr(d, "_path", ""))]
        if installed:
            shutil.rmtree(egg_info, ignore_errors=True)


_forget_the_checkouts_egg_info()

SESSION_DIR = Path(tempfile.mkdtemp(prefix="commit-provider-tests-"))
AIRFLOW_HOME = SESSION_DIR / "airflow-home"
DAGS_FOLDER = AIRFLOW_HOME / "dags"
TEST_ROOT = SESSION_DIR / "outputs"
TEST_WORK = SESSION_DIR / "work"


def _prepare_airflow_home() -> None:
    DAGS_FOLDER.mkdir(parents=True)
    TEST_ROOT.mkdir()
    TEST_WORK.mkdir()
    for src in list((REPO / "dags_examples").glob("*.py")) + list((REPO / "tests/airflow/dags").glob("*.py")):
        shutil.copy(src, DAGS_FOLDER / src.name)
    os.environ.update({
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
        "COMMIT_DEMO_ROOT": str(TEST_ROOT / "demo"),
        "COMMIT_DEMO_CALLS": str(TEST_WORK / "demo-calls.log"),
        "COMMIT_TEST_ROOT": str(TEST_ROOT),
        "COMMIT_TEST_WORK": str(TEST_WORK),
    })


_prepare_airflow_home()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata database for this session (``airflow db migrate``, ~10 s)."""
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, env=os.environ.copy())
    return AIRFLOW_HOME


def fresh_test_dags(module: str) -> ModuleType:
    """The test DAG module *module* (from the session's DAGs folder), with the outputs and the control files of
    earlier tests removed: what a ``dags`` fixture of an Airflow test module returns."""
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.insert(0, str(DAGS_FOLDER))
    for path in list(TEST_WORK.iterdir()) + list(TEST_ROOT.iterdir()):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return importlib.import_module(module)


@pytest.fixture(autouse=True)
def _no_faults_leak() -> None:
    """A fault armed by one test must never fire in another."""
    from airflow_commit_provider.protocol import faults

    os.environ.pop(faults.ENV_VAR, None)
    faults.disarm()
    yield
    os.environ.pop(faults.ENV_VAR, None)
    faults.disarm()
