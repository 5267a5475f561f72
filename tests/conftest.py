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


# ---------------------------------------------------------------------------------------------------- test tiers
#: Every test belongs to one tier, assigned here and nowhere else: by directory, and within tests/protocol by module
#: for those that run real worker processes, table formats or long schedules. A plain ``pytest`` runs the ``unit``
#: tier (in-process, seconds); ``pytest --tier all -n 2`` runs every tier (what CI runs); ``--tier s3,airflow`` some.
#: Paths or node ids named on the command line run whatever tier they are in.
TIERS = ("unit", "heavy", "s3", "airflow", "system")
_TIER_OF_DIR = {"s3": "s3", "clouds": "s3", "airflow": "airflow", "deployment": "system", "compat": "system",
                "packaging": "system", "powercut": "system"}
_HEAVY_PROTOCOL_MODULES = {
    "test_tables", "test_marker_reads", "test_lifecycle_schedules", "test_crash_matrix", "test_shards",
    "test_compaction_tables", "test_lifecycle_seams", "test_lifecycle_processes", "test_races", "test_error_claim",
    "test_dedup", "test_recover_valid", "test_maintenance_tables", "test_partition_values",
    "test_compaction_markers", "test_compaction", "test_packaging", "test_audit_faults", "test_audit_tables",
}


def tier_of(path: Path) -> str:
    rel = path.resolve().relative_to(REPO / "tests").parts
    if rel[0] in _TIER_OF_DIR:
        return _TIER_OF_DIR[rel[0]]
    if rel[0] == "protocol" and path.stem in _HEAVY_PROTOCOL_MODULES:
        return "heavy"
    return "unit"


def pytest_addoption(parser):
    parser.addoption("--tier", default=None, help=f"comma-separated tiers to run, of {', '.join(TIERS)}, or 'all' "
                     "(default: unit, when no test path is named)")


def pytest_configure(config):
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: test tier '{tier}' (assigned by directory in tests/conftest.py)")


def pytest_collection_modifyitems(config, items):
    chosen = config.getoption("--tier")
    if chosen is None:
        named = config.args_source != pytest.Config.ArgsSource.TESTPATHS
        chosen = "all" if named else "unit"
    wanted = set(TIERS) if chosen == "all" else {t.strip() for t in chosen.split(",")}
    unknown = wanted - set(TIERS)
    if unknown:
        raise pytest.UsageError(f"--tier {chosen}: unknown tier(s) {sorted(unknown)}; use {', '.join(TIERS)} or all")
    keep, drop = [], []
    for item in items:
        tier = tier_of(Path(str(item.fspath)))
        item.add_marker(tier)
        (keep if tier in wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = sorted(keep, key=lambda item: _rank(work_unit(item.nodeid)))


# ------------------------------------------------------------------------------------------------- parallel runs
#: Under pytest-xdist (CI's ``-n 2``) a unit of work is one test module: its module-scoped fixtures are set up once
#: and its tests keep their order. The modules driving the one session-scoped LocalExecutor deployment
#: (``tests/deployment/conftest.py``) are one unit, so that a single worker starts it (85 s and 0.75 GiB each).
#: Every other test may run beside any other: each worker imports this conftest, so has its own SESSION_DIR
#: (Airflow home, SQLite DB, DAGs folder, outputs), and servers (moto, PostgreSQL, api-servers) take free ports.
_SHARED_DEPLOYMENT = {"tests/deployment/test_real_deployment.py", "tests/deployment/test_taskflow_deployment.py",
                      "tests/deployment/test_ui.py"}
#: Units are handed out longest first, so that no long one starts last while the other worker idles: the system
#: tier's, in this order (the Airflow 3.1 venv and its suite, then the deployments, ...), then tier by tier.
_LONGEST_FIRST = ("tests/compat/", "deployment", "tests/deployment/", "tests/powercut/", "tests/packaging/")
_TIER_ORDER = ("system", "heavy", "airflow", "s3", "unit")


def work_unit(nodeid: str) -> str:
    """The xdist work unit of the test *nodeid*: its module, or ``deployment`` for the modules sharing one."""
    module = nodeid.split("::", 1)[0]
    return "deployment" if module in _SHARED_DEPLOYMENT else module


def _rank(unit: str) -> tuple[int, int]:
    first = next((i for i, prefix in enumerate(_LONGEST_FIRST) if unit.startswith(prefix)), len(_LONGEST_FIRST))
    path = REPO / "tests/deployment/test_ui.py" if unit == "deployment" else REPO / unit
    return first, _TIER_ORDER.index(tier_of(path))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling over :func:`work_unit`, in the collection's (longest-first) order."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the order above, not "most tests first"
    return WorkUnitScheduling(config, log)
