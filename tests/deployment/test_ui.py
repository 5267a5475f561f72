"""Commit status in the Airflow UI, against the real deployment: the plugin's routes behind Airflow's auth, the
task state store, the extra links, and the view in a real browser (Debian's Chromium driven by Playwright), in the
UI's light and dark modes, for a committed, a failed, a v2-aborted and a running stage; and the whole UI under an
``[api] base_url`` with a path.

The screenshots go to ``<session>/artifacts/ui``; with ``COMMIT_UI_SCREENSHOTS=<dir>`` they are copied there too
(``docs/ui`` holds the README's). Nothing waits on time: every step waits for an observable state (REST API,
storage, files the tasks write, the page's content); a timeout only fails."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import SESSION_DIR
from ..support import free_port

pytestmark = pytest.mark.deployment

ARTIFACTS = SESSION_DIR / "artifacts"
SHOTS = ARTIFACTS / "ui"
DAG, RUN = "ct_append_v2", "ui-run"
TAB = f"dags/{DAG}/runs/{RUN}/plugin/commit-status"
BOUND = 300_000  # ms: a bound for a loaded machine, not a wait


@pytest.fixture(scope="module")
def committed_run(deployment):
    (deployment.work / f"fail-{DAG}-1-1").touch()  # a failed attempt, so the page has one to show
    deployment.trigger(DAG, RUN)
    assert deployment.wait_run(DAG, RUN) == "success", deployment.ti_states(DAG, RUN)
    return read_success_marker(str(deployment.root / DAG), verify_files=True)


def test_plugin_routes_need_airflow_auth(deployment, committed_run):
    path = f"/commit-status/api/dags/{DAG}/runs/{RUN}"
    assert requests.get(deployment.base + path, timeout=10).status_code == 401
    bad = requests.get(deployment.base + path, headers={"Authorization": "Bearer not-a-token"}, timeout=10)
    assert bad.status_code in (401, 403)
    assert requests.get(f"{deployment.base}/commit-status/dags/{DAG}/runs/{RUN}", timeout=10).status_code == 401
    for docs in ("docs", "redoc", "openapi.json"):  # FastAPI's own routes answered anonymously before
        assert requests.get(f"{deployment.base}/commit-status/{docs}", timeout=10).status_code == 401, docs
        assert deployment.session.get(f"{deployment.base}/commit-status/{docs}", timeout=30).status_code == 200
    resp = deployment.session.get(deployment.base + path, timeout=30)
    assert resp.status_code == 200
    job = resp.json()["jobs"][0]
    assert job["state"] == "committed" and job["totals"] == committed_run["totals"]
    assert {t["task"]: t["failed_attempts"] for t in job["tasks"]}[1] == ["0.1"]


def test_unmapped_task_instance_tab_answers(deployment, committed_run):
    """The UI leaves ``{MAP_INDEX}`` literal on an unmapped task instance: the route answered 422 there."""
    resp = deployment.session.get(f"{deployment.base}/commit-status/dags/{DAG}/runs/{RUN}",
                                  params={"task_id": "stage.commit", "map_index": "{MAP_INDEX}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    assert "data-testid='state'" in resp.text


def test_task_state_store_and_extra_links(deployment, committed_run):
    store = deployment.api("GET", f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/stage.write/state-store",
                           params={"map_index": 1})
    entries = {e["key"]: e["value"] for e in store["task_state_store"]}
    assert entries["commit"]["status"] == "committed" and entries["commit"]["committed_attempt"] == 2
    links = deployment.api("GET", f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/stage.commit/links")["extra_links"]
    assert links["Commit status"] == TAB           # the tab inside Airflow, relative to the UI's base URL
    assert links["Commit target"] == TAB           # local target: a file:// link would be dropped by the UI


# ------------------------------------------------------------------------------------------------ the browser
def _chromium() -> str:
    path = shutil.which("chromium")
    if path is None and shutil.which("apt-get") and os.geteuid() == 0:
        for cmd in (["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "chromium"]):
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            if subprocess.run(cmd, capture_output=True, env=env).returncode == 0 and cmd[1] == "install":
                break
        path = shutil.which("chromium")
    if path is None:  # a skipped browser test proves nothing: without a browser the suite fails
        pytest.fail("Debian's chromium is not installed and could not be installed (apt-get unavailable or "
                    "refused); the browser test needs it: install chromium, or run as root with apt-get")
    return path


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"])
        yield b
        b.close()


def _page(browser, deployment, theme: str, base: str | None = None, cookie_url: str | None = None):
    """A page logged in to the UI (the session cookie Airflow's login sets), in the UI's *theme* (what the UI's
    colour-mode switch stores)."""
    token = deployment.session.headers["Authorization"].split()[1]
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, color_scheme=theme)
    context.add_cookies([{"name": "_token", "value": token, "url": cookie_url or deployment.base}])
    context.add_init_script(f"try{{localStorage.setItem('theme','{theme}')}}catch(e){{}}")
    context.set_default_timeout(BOUND)
    return context.new_page()


def _frame(page, url_part: str = "/commit-status/dags/"):
    """The tab's iframe, once the view's content is in it."""
    page.wait_for_selector("iframe")
    deadline = time.monotonic() + BOUND / 1000
    while time.monotonic() < deadline:
        frame = next((f for f in page.frames if url_part in f.url), None)
        if frame is not None and frame.query_selector("[data-testid=state]"):
            return frame
        page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
    raise AssertionError(f"no commit-status content in {[f.url for f in page.frames]} (page {page.url})")


def _luminance(rgb: str) -> float:
    parts = [float(x) for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3]]
    return sum(parts) / 3


def _check_theme(page, frame, theme: str) -> None:
    assert ("dark" in (page.evaluate("document.documentElement.className") or "")) == (theme == "dark")
    assert frame.evaluate("document.documentElement.classList.contains('dark')") == (theme == "dark")
    text = frame.evaluate("getComputedStyle(document.body).color")
    assert (_luminance(text) > 160) == (theme == "dark"), (theme, text)
    # no white box inside dark Airflow: the view draws on the UI's own background
    assert frame.evaluate("getComputedStyle(document.body).backgroundColor") in ("rgba(0, 0, 0, 0)", "transparent")


def _shoot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    if os.environ.get("COMMIT_UI_SCREENSHOTS"):
        dest = Path(os.environ["COMMIT_UI_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / path.name)
    return path


def _open_tab(browser, deployment, theme: str, dag_id: str, run_id: str):
    page = _page(browser, deployment, theme)
    page.goto(f"{deployment.base}/dags/{dag_id}/runs/{run_id}/plugin/commit-status")
    frame = _frame(page)
    _check_theme(page, frame, theme)
    body = frame.inner_text("body")
    assert "None" not in body, body
    return page, frame


def _trigger(dep, dag_id: str, run_id: str, conf: dict) -> None:
    dep.wait_dag(dag_id)
    dep.api("POST", f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None,
                                                     "conf": {**conf, "target": str(dep.root / f"{dag_id}-{run_id}")}})


def _job(dep, dag_id: str, run_id: str) -> dict:
    jobs = dep.session.get(f"{dep.base}/commit-status/api/dags/{dag_id}/runs/{run_id}", timeout=60).json()["jobs"]
    return jobs[0] if jobs else {}


@pytest.fixture(scope="module")
def stages(deployment, committed_run):
    """A failed v1 stage (task 2 fails every try), a v2 stage aborted the same way (task 3), and a running one
    (task 3 held inside its callable until the test releases it), all started at once."""
    dep = deployment
    hold = dep.work / "hold-ui_v1-live-3"
    hold.touch()
    _trigger(dep, "ui_v1", "failed", {"fail": [2]})
    _trigger(dep, "ui_v2", "aborted", {"fail": [3]})
    _trigger(dep, "ui_v1", "live", {})
    for dag_id, run_id in (("ui_v1", "failed"), ("ui_v2", "aborted")):
        assert dep.wait_run(dag_id, run_id) == "failed", dep.ti_states(dag_id, run_id)
        assert dep.ti_states(dag_id, run_id)["stage.abort[-1]"] == "success"
    dep.wait_for(lambda: (dep.work / "holding-ui_v1-live-3").exists(), "task 3 of the live run holds")
    dep.wait_for(lambda: sum(t.get("attempt") is not None for t in _job(dep, "ui_v1", "live").get("tasks", [])) == 3,
                 "tasks 0, 1 and 2 of the live run committed")
    yield {"hold": hold}
    hold.unlink(missing_ok=True)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_committed_stage(browser, deployment, committed_run, theme):
    page, frame = _open_tab(browser, deployment, theme, DAG, RUN)
    totals = committed_run["totals"]
    assert frame.inner_text("[data-testid=state]") == "committed"
    assert frame.inner_text("[data-testid=total-rows]") == str(totals["rows"])
    assert frame.inner_text("[data-testid=total-files]") == str(totals["files"])
    assert frame.inner_text("[data-testid=total-tasks]") == str(totals["tasks"])
    assert "partial output" in frame.inner_text("[data-testid=v2-warning]")
    assert frame.inner_text("tr[data-task='1'] td:nth-child(6)") == "0.1"
    # "0.1" is explained where it stands, and every term in the glossary
    assert frame.get_attribute("tr[data-task='1'] td:nth-child(6) .aid", "title") == "try 1 (app. attempt 0)"
    frame.evaluate("document.querySelector('[data-testid=glossary]').open = true")
    glossary = frame.inner_text("[data-testid=glossary]")
    for term in ("application attempt", "failed attempts", "denied attempts", "unfinished attempts", "generation",
                 "recovered from", "A.T = application attempt A, Airflow try T"):
        assert term in glossary, term
    assert "Nothing to do" in frame.inner_text("[data-testid=next-steps]")
    frame.evaluate("document.querySelector('[data-testid=glossary]').open=false")
    _shoot(page, f"committed-{theme}")
    page.context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_failed_stage_says_what_a_clear_does(browser, deployment, stages, theme):
    page, frame = _open_tab(browser, deployment, theme, "ui_v1", "failed")
    assert frame.inner_text("[data-testid=state]") == "failed"
    assert frame.inner_text("[data-testid=next-steps]").endswith(
        "tasks 0, 1 and 3 will be recovered (your code is not called), task 2 will run.")
    assert "kept tasks 0, 1 and 3" in frame.inner_text("[data-testid=abort]")
    statuses = [frame.inner_text(f"tr[data-task='{n}'] [data-testid=task-status]") for n in range(4)]
    assert statuses == ["kept", "kept", "failed", "kept"]
    assert frame.inner_text("tr[data-task='2'] td:nth-child(6)") == "0.1, 0.2"
    _shoot(page, f"failed-{theme}")
    page.context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_v2_aborted_stage(browser, deployment, stages, theme):
    page, frame = _open_tab(browser, deployment, theme, "ui_v2", "aborted")
    assert frame.inner_text("[data-testid=state]") == "failed"
    # tasks whose Airflow tasks are green were withdrawn by the abort: not "denied", not plain "failed"
    statuses = [frame.inner_text(f"tr[data-task='{n}'] [data-testid=task-status]") for n in range(4)]
    assert statuses == ["withdrawn", "withdrawn", "withdrawn", "failed"]
    for n in range(4):
        assert frame.inner_text(f"tr[data-task='{n}'] td:nth-child(7)").strip() == "—"  # no denied attempt
    abort = frame.inner_text("[data-testid=abort]")
    assert "kept no task" in abort and "visible files" in abort
    assert "every task runs again" in frame.inner_text("[data-testid=next-steps]")
    _shoot(page, f"v2-aborted-{theme}")
    page.context.close()


def test_running_stage_live_and_theme_switch(browser, deployment, stages):
    """Light and dark screenshots of the running stage; then the stage finishes and the open page shows it
    committed without a reload; switching the UI's colour mode restyles the open view."""
    pages = {}
    for theme in ("light", "dark"):
        page, frame = _open_tab(browser, deployment, theme, "ui_v1", "live")
        assert frame.inner_text("[data-testid=state]") == "running"
        assert frame.inner_text("tr[data-task='3'] [data-testid=task-status]") == "running"
        assert frame.inner_text("tr[data-task='3'] td:nth-child(8)") == "0.1"   # unfinished attempt
        assert "3 of 4 task(s) committed" in frame.inner_text("body")
        assert frame.query_selector("[data-testid=progress]") is not None
        _shoot(page, f"running-{theme}")
        pages[theme] = (page, frame)
    page, frame = pages["light"]
    frame.evaluate("window.__not_reloaded = true")
    stages["hold"].unlink()
    frame.wait_for_function("document.querySelector('[data-testid=state]').innerText === 'committed'")
    assert frame.evaluate("window.__not_reloaded") is True, "the view reloaded instead of refreshing itself"
    assert deployment.wait_run("ui_v1", "live") == "success"
    # the UI's colour-mode switch sets the class on its page: the open view follows it
    page.evaluate("document.documentElement.classList.remove('light'); document.documentElement.classList.add('dark')")
    frame.wait_for_function("document.documentElement.classList.contains('dark')")
    for page, _ in pages.values():
        page.context.close()


def test_extra_link_and_unmapped_tab_stay_inside_airflow(browser, deployment, committed_run):
    page = _page(browser, deployment, "light")
    page.goto(f"{deployment.base}/dags/{DAG}/runs/{RUN}/tasks/stage.setup/plugin/commit-status-ti")
    frame = _frame(page)          # unmapped task instance: {MAP_INDEX} left literal; was a 422 JSON body
    assert frame.inner_text("[data-testid=state]") == "committed"
    page.goto(f"{deployment.base}/dags/{DAG}/runs/{RUN}/tasks/stage.commit/details")  # where 3.3 shows them
    link = page.wait_for_selector(f"a[href='{TAB}']:has-text('Commit status')")
    assert link.get_attribute("target") == "_self"
    assert page.query_selector(f"a[href='{TAB}']:has-text('Commit target')") is not None
    link.click()
    page.wait_for_url(f"{deployment.base}/{TAB}")
    assert _frame(page).inner_text("[data-testid=state]") == "committed"
    page.context.close()


@pytest.fixture
def api_server_under_a_path(deployment):
    """A second api-server of the same deployment with ``[api] base_url`` under ``/airflow/``."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/airflow"
    env = {**deployment.env, "AIRFLOW__API__BASE_URL": base + "/"}
    airflow = str(Path(sys.executable).with_name("airflow"))
    log = open(ARTIFACTS.parent / "api-server-base-url.log", "w")
    proc = subprocess.Popen([airflow, "api-server", "-H", "127.0.0.1", "-p", str(port)], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deployment.wait_for(lambda: proc.poll() is not None or _answers(f"{base}/api/v2/monitor/health"),
                            "api-server under /airflow answers", timeout=600)
        assert proc.poll() is None, f"api-server exited: see {log.name}"
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def test_ui_under_a_base_url_path(browser, deployment, committed_run, api_server_under_a_path):
    base = api_server_under_a_path
    page = _page(browser, deployment, "dark", cookie_url=base + "/")
    page.goto(f"{base}/dags/{DAG}/runs/{RUN}/plugin/commit-status")
    frame = _frame(page, "/airflow/commit-status/dags/")
    assert frame.inner_text("[data-testid=state]") == "committed"
    page.goto(f"{base}/dags/{DAG}/runs/{RUN}/tasks/stage.commit/details")
    page.wait_for_selector(f"a[href='{TAB}']:has-text('Commit status')").click()
    page.wait_for_url(f"{base}/{TAB}")
    _frame(page, "/airflow/commit-status/dags/")
    page.context.close()
