"""The oldest supported Airflow (3.1.8): a second virtualenv, installed from its own constraints file
(``constraints-airflow-3.1.txt``), with this package installed from the checkout as a wheel (not editable); there
the ``dag.test()`` suite and the plugin tests (``tests/airflow``) run as a subprocess, and the plugin is checked in
Airflow 3.1's own api-server app (its routes mounted, behind auth), in ``airflow plugins``, and in 3.1's UI: the
React view of a committed stage in Chromium, light and dark.

The virtualenv is kept between runs under ``COMMIT_COMPAT_VENV`` (default: ``~/.cache/airflow-commit-provider``),
keyed by the Airflow version and the constraints file's hash, so a CI machine with a warm cache pays only for the
suite; a cold one also for the install (through uv: seconds; pip, where uv cannot install, takes minutes).

Another Airflow (e.g. 3.2, which CI does not run) through the environment; unset, CI's defaults apply:

- ``COMMIT_COMPAT_AIRFLOW``: the Airflow version (default ``3.1.8``);
- ``COMMIT_COMPAT_CONSTRAINTS``: a constraints file (relative paths: to the working directory, else to the checkout),
  or ``none`` for pip's own resolution with ``apache-airflow==<version>`` pinned (and ``UNCONSTRAINED_PINS``). Default:
  ``constraints-airflow-<major>.<minor>.txt`` of the checkout, which must exist (3.1 and 3.2 have one); a version
  without one needs the variable. An unconstrained venv keeps ``pip freeze`` of what it resolved in
  ``<venv>/resolved-constraints.txt``, ready to be passed back as ``COMMIT_COMPAT_CONSTRAINTS``.

    COMMIT_COMPAT_AIRFLOW=3.2.2 COMMIT_COMPAT_VENV=/tmp/commit-compat .venv/bin/python -m pytest tests/compat -q \
        -p no:cacheprovider"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO
from ..support import source_copy

pytestmark = [pytest.mark.compat, pytest.mark.slow]

AIRFLOW = os.environ.get("COMMIT_COMPAT_AIRFLOW", "").strip() or "3.1.8"


def _constraints() -> Path | None:
    """The constraints file of the compat venv; None: pip resolves on its own (``COMMIT_COMPAT_CONSTRAINTS=none``)."""
    value = os.environ.get("COMMIT_COMPAT_CONSTRAINTS", "").strip()
    if value.lower() == "none":
        return None
    if not value:
        return REPO / f"constraints-airflow-{'.'.join(AIRFLOW.split('.')[:2])}.txt"
    path = Path(value).expanduser()
    return path if path.is_absolute() or path.exists() else REPO / path


CONSTRAINTS = _constraints()
#: with COMMIT_COMPAT_CONSTRAINTS=none, still pinned: Airflow 3.2.2 caps none of them, and their newest releases break
#: Airflow itself (a plain DAG too), the environment's fault, not this package's: fastapi 0.165.0 / cadwyn 9.0.0 its
#: api-server at start-up ("PydanticUserError: Model 'TITerminalStatePayload' needs a discriminator field"), svcs
#: 26.2.0 its in-process execution API, so every dag.test() task ("'State' object has no attribute 'svcs_registry'")
UNCONSTRAINED_PINS = ["fastapi==0.136.3", "cadwyn==7.0.0", "svcs==25.1.0"]
#: Modules of tests/airflow that compose protocol features (overlapping runs, shards, zombies, table and keyed
#: consumers) under dag.test(): the Airflow calls they make (dag.test, retries, clears, mapped tasks, XCom, the task
#: state store's absence, triggers, the plugin's queries) are the ones the other modules already make here, and on
#: 3.1 every dag.test() costs 4-5 times what it costs on 3.3 (its in-process execution API, cadwyn: 93 s against
#: 21 s for test_taskflow.py), so they run on the main Airflow only, saving about 5 minutes of CI
COMPOSED_ONLY = ("test_overlap", "test_shards", "test_zombie_under_airflow", "test_table_consumers",
                 "test_decorated_tables", "test_keyed_consumers", "test_watcher_dynamic",
                 # sensors on decorated, sharded and keyed stages: the sensor's Airflow calls are test_dag_test's
                 "test_sensor_stages",
                 # changed mapped inputs under clears, and the view against Airflow's states: the clears, mapped
                 # tasks and plugin queries of test_dag_test, test_taskflow and test_plugin (CI's time budget)
                 "test_task_inputs", "test_view_truth")
#: Tests of tests/airflow whose protocol variants (every mode x algorithm, every mode of a clear, keyed runs, job ids
#: that read alike) add no Airflow call the kept variant does not make: on 3.1 they run once, the rest on the main
#: Airflow only (each dag.test() of them costs 9-24 s there: about 3 minutes of CI's time budget)
MAIN_AIRFLOW_ONLY = (
    *(f"test_dag_test.py::test_output_modes[{m}-{a}]" for m, a in (("error", 1), ("error", 2), ("append", 1),
                                                                     ("overwrite", 1), ("overwrite", 2),
                                                                     ("dynamic", 2))),   # kept: dynamic-1, append-2
    "test_dag_test.py::test_clear_after_commit_recomputes_without_duplicates[append]",   # kept: [overwrite]
    "test_dag_test.py::test_clear_after_commit_recomputes_without_duplicates[dynamic]",
    # the keyed run's Airflow calls (a templated job key, two runs of one interval): test_job_key_makes_two_runs_...
    "test_taskflow.py::test_a_keyed_run_after_a_failed_one_recovers_what_it_committed_then_a_third_replaces",
    "test_taskflow.py::test_a_keyed_rerun_under_algorithm_1_shows_the_last_runs_rows_once_until_its_job_commit",
    "test_job_identity.py::test_two_keys_that_read_alike_keep_their_rows_in_one_append_target",
)
#: what tests/airflow needs besides the package
TEST_DEPS = ["pytest", "pytest-timeout", "pytest-xdist", "moto[server]", "hypothesis", "duckdb", "build"]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}: {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc


def _clean_env() -> dict[str, str]:
    """The parent session's Airflow settings must not leak into the child (it prepares its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "COMMIT_", "PYTEST_"))}


def _install(python: Path, args: list) -> None:
    """``pip install args`` into the venv of *python*, through uv: a cold install of Airflow and its 300
    dependencies takes pip minutes of CI's 2 cores, uv seconds (13.6 s in a fresh-clone run, caches empty). uv
    reads no pip configuration (indexes, find-links): where it cannot install, pip does, as before."""
    from uv import find_uv_bin

    try:
        _run([find_uv_bin(), "pip", "install", "-q", "--python", python, *args], timeout=1200)
    except AssertionError as exc:
        print(f"uv could not install, pip does: {str(exc)[-2000:]}")
        _run([python, "-m", "pip", "install", "-q", "--no-compile", *args], timeout=2400)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    if CONSTRAINTS is not None and not CONSTRAINTS.is_file():
        pytest.fail(f"no constraints file {CONSTRAINTS} for Airflow {AIRFLOW}: set COMMIT_COMPAT_CONSTRAINTS to one, "
                    "or to 'none' for pip's own resolution", pytrace=False)
    # the constraints and the test dependencies: a cached venv without one of them is another venv
    key = "unconstrained" if CONSTRAINTS is None else hashlib.sha256(
        CONSTRAINTS.read_bytes() + " ".join(TEST_DEPS).encode()).hexdigest()[:12]
    pins = UNCONSTRAINED_PINS if CONSTRAINTS is None else ["-c", CONSTRAINTS]
    base = Path(os.environ.get("COMMIT_COMPAT_VENV", Path.home() / ".cache" / "airflow-commit-provider"))
    venv = base / f"airflow-{AIRFLOW}-{key}"
    python = venv / "bin" / "python"
    t0 = time.monotonic()
    if not (venv / ".complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", venv], timeout=300)
        _install(python, [*pins, f"apache-airflow=={AIRFLOW}", "apache-airflow-providers-amazon[s3fs]", "s3fs",
                          "pyarrow", *TEST_DEPS])
        if CONSTRAINTS is None:  # what pip chose, to rerun with exactly it (COMMIT_COMPAT_CONSTRAINTS=<this file>)
            frozen = _run([python, "-m", "pip", "freeze", "--exclude-editable"], timeout=300).stdout
            (venv / "resolved-constraints.txt").write_text(frozen)
        (venv / ".complete").touch()
    # this checkout's package, as a wheel (rebuilt every run: the code under test changes, the venv does not), built
    # from a copy: the wheel test may be building the checkout on the other xdist worker
    dist = tmp_path_factory.mktemp("compat-dist")
    source = source_copy(tmp_path_factory.mktemp("compat-source") / "src")
    _run([python, "-m", "build", "--wheel", "--outdir", dist, source], timeout=600)
    [wheel] = dist.glob("*.whl")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel], timeout=600)
    version = _run([python, "-c", "import airflow; print(airflow.__version__)"]).stdout.strip()
    assert version == AIRFLOW, version
    print(f"Airflow {AIRFLOW} venv ready in {time.monotonic() - t0:.0f} s ({venv}; constraints: "
          f"{CONSTRAINTS or 'none, pip freeze in resolved-constraints.txt'})")
    return venv


@pytest.mark.timeout(3600)
def test_dag_test_suite_and_plugin_tests_on_the_oldest_airflow(venv):
    t0 = time.monotonic()
    # two workers: the longest test of the suite, it is what CI waits for last once the others have ended
    proc = subprocess.run([venv / "bin" / "python", "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-n", "2",
                           # OpenLineage's events and the Delta/Iceberg stages are checked on the main Airflow
                           # (neither the openlineage provider nor deltalake/pyiceberg is in this venv's
                           # constraints)
                           "tests/airflow", "--ignore=tests/airflow/test_lineage.py",
                           "--ignore=tests/airflow/test_tables_s3.py", "--ignore=tests/airflow/test_recover_valid.py",
                           *(f"--ignore=tests/airflow/{m}.py" for m in COMPOSED_ONLY),
                           *(f"--deselect=tests/airflow/{t}" for t in MAIN_AIRFLOW_ONLY),
                           "--deselect=tests/airflow/test_dag_test.py::"
                           "test_example_tables_dag_commits_each_job_once_per_table",
                           "--deselect=tests/airflow/test_dag_test.py::"
                           "test_maintenance_operators_refuse_a_delta_table_without_a_retry",
                           "--deselect=tests/airflow/test_committed_output_trigger.py::"
                           "test_a_table_watcher_fires_once_per_table_transaction",
                           "--deselect=tests/airflow/test_plugin.py::"
                           "test_a_table_stage_shows_the_version_its_commit_produced",
                           "--deselect=tests/airflow/test_audit.py::test_hand_wired_sharded_and_keyed_stages_are_"
                           "audited_and_report_data_quality_to_openlineage",
                           # Airflow 3.1.8's dag.test() runs the approval's HITL trigger in its in-process
                           # supervisor, which does not serve the trigger's GetHITLDetailResponse (the triggerer of a
                           # deployment does): the trigger fails, "'NoneType' object has no attribute
                           # 'response_received'"; documented in docs/user-guide.md ("An approval")
                           "--deselect=tests/airflow/test_audit.py::"
                           "test_an_approval_holds_the_commit_until_answered_and_a_rejection_publishes_nothing",
                           # npm's rebuild of the view's bundle: the same bytes whatever the Airflow
                           "--deselect=tests/airflow/test_plugin.py::test_shipped_bundle_is_what_this_source_builds"],
                          cwd=REPO, env=_clean_env(), capture_output=True, text=True,
                          timeout=3600)
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, f"tests/airflow on Airflow {AIRFLOW}:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    assert " passed" in proc.stdout
    # the only skips allowed: the table libraries, which are not in this venv (their tests run on the main Airflow)
    reasons = re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", proc.stdout, re.M)
    assert all(re.fullmatch(r"could not import '(deltalake|pyiceberg)'.*", r) for r in reasons), reasons
    print(f"tests/airflow on Airflow {AIRFLOW}: {time.monotonic() - t0:.0f} s")


PLUGIN_CHECK = r"""
import json, os, sys, tempfile
home = tempfile.mkdtemp()
os.environ.update(AIRFLOW_HOME=home, AIRFLOW__CORE__LOAD_EXAMPLES="False",
                  AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db")
from airflow.api_fastapi.app import create_app
from fastapi.testclient import TestClient
client = TestClient(create_app())
out = {p: client.get(p).status_code for p in ("/commit-status/openapi.json", "/commit-status/static/commit-status.js",
       "/commit-status/api/dags/d/runs/r", "/commit-status/api/dags/d/runs/r/version",
       "/commit-status/api/dags/d/runs/r/stages/s.setup/tasks")}
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


RUN_STAGES = r"""
import os, runpy, sys
dags = runpy.run_path(sys.argv[1])
for dag_id in sys.argv[2:]:
    run_id = dags[dag_id].test().run_id
    sys.stdout.flush()
    os.write(1, f"RUN_ID {dag_id} {run_id}\n".encode())   # one write: a logging thread cannot split the line
"""
#: the runs the 3.1 UI shows: a mapped stage, an unmapped one, a DAG without a stage, and 1,000 tasks
COMPAT_DAGS = ("ui_v1", "ui_unmapped", "ui_plain", "ui_big")


@pytest.mark.timeout(3600)
def test_view_in_the_oldest_airflows_ui(venv, tmp_path):
    """The React view inside Airflow 3.1.8's own UI, in a real browser, light and dark: a DAG run, a mapped and an
    unmapped task instance, a run without a stage and a 1,000-task stage. 3.1 shares React but not its Chakra theme,
    imports ``bundle_url`` as given (no base), and passes no map index on an unmapped task instance. The runs are
    made with ``dag.test()`` in the 3.1 venv; then only the api-server serves them."""
    from ..deployment.test_ui import LIGHTNESS, _chromium, _shoot
    from ..support import free_port

    home, dags = tmp_path / "home", tmp_path / "home" / "dags"
    dags.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "airflow" / "dags" / "ui_test_dags.py", dags)
    port = free_port()
    env = {**_clean_env(), "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/a.db",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin", "COMMIT_TEST_ROOT": str(tmp_path / "out"),
           "COMMIT_TEST_WORK": str(tmp_path), "AIRFLOW__API_AUTH__JWT_SECRET": "compat-tests-only-" + os.urandom(8).hex(),
           "AIRFLOW__API__SECRET_KEY": "compat-tests-only-" + os.urandom(8).hex(),
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/"}
    airflow = venv / "bin" / "airflow"
    _run([airflow, "db", "migrate"], env=env, cwd=tmp_path, timeout=600)
    _run([airflow, "dags", "reserialize"], env=env, cwd=tmp_path, timeout=600)
    out = _run([venv / "bin" / "python", "-c", RUN_STAGES, dags / "ui_test_dags.py", *COMPAT_DAGS], env=env,
               cwd=tmp_path, timeout=1800).stdout
    runs = {line.split()[1]: line.split()[2] for line in out.splitlines() if line.startswith("RUN_ID")}
    assert set(runs) == set(COMPAT_DAGS), out[-3000:]
    log = open(tmp_path / "api-server.log", "w")
    server = subprocess.Popen([airflow, "api-server", "-H", "127.0.0.1", "-p", str(port)], env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        import requests
        from playwright.sync_api import sync_playwright

        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, f"api-server exited: {(tmp_path / 'api-server.log').read_text()[-3000:]}"
            try:
                if requests.get(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the 3.1 api-server never answered"
            time.sleep(1)
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        token = requests.post(f"http://127.0.0.1:{port}/auth/token", json={"username": "admin", "password":
                              passwords["admin"]}, timeout=30).json()["access_token"]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
            for theme in ("light", "dark"):
                context = browser.new_context(viewport={"width": 1440, "height": 1000}, color_scheme=theme)
                context.add_cookies([{"name": "_token", "value": token, "url": f"http://127.0.0.1:{port}"}])
                context.add_init_script(f"try{{localStorage.setItem('theme','{theme}')}}catch(e){{}}")
                context.set_default_timeout(300_000)
                page = context.new_page()
                base = f"http://127.0.0.1:{port}/dags"

                def view(path: str, testid: str = "commit-status", name: str = ""):
                    page.goto(f"{base}/{path}")
                    page.wait_for_selector(f"[data-testid={testid}]")
                    assert page.query_selector("iframe") is None
                    assert not page.evaluate("!!globalThis.ChakraUISystem")  # 3.1: the view's own, scoped theme
                    lightness = page.evaluate(LIGHTNESS, f"[data-testid={testid}]")
                    assert (lightness > 128) == (theme == "dark"), (path, theme, lightness)
                    _shoot(page, f"airflow-3.1-{name}-{theme}")

                view(f"ui_v1/runs/{runs['ui_v1']}/plugin/commit-status", name="dag-run")
                assert page.inner_text("[data-testid=stage-state]") == "committed"
                assert page.locator("[data-testid=task-table] tr[data-task]").count() == 4
                view(f"ui_v1/runs/{runs['ui_v1']}/tasks/stage.write/mapped/2/plugin/commit-status-ti",
                     name="mapped-task-instance")
                page.wait_for_selector("[data-testid=my-task]")
                assert "task 2" in page.inner_text("[data-testid=my-task]")
                view(f"ui_unmapped/runs/{runs['ui_unmapped']}/tasks/stage.write/plugin/commit-status-ti",
                     name="unmapped-task-instance")
                page.wait_for_selector("[data-testid=my-task]")
                assert "task 0" in page.inner_text("[data-testid=my-task]")
                view(f"ui_plain/runs/{runs['ui_plain']}/plugin/commit-status", "no-stage", name="no-stage")
                assert "No write stage" in page.inner_text("[data-testid=no-stage]")
                view(f"ui_big/runs/{runs['ui_big']}/plugin/commit-status", name="1000-tasks")
                page.wait_for_selector("[data-testid=task-table] tr[data-task]")
                assert page.inner_text("[data-testid=count-committed]") == "committed 1,000"
                assert page.inner_text("[data-testid=task-table] [data-testid=pager-range]") == "1–50 of 1,000"
                context.close()
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
