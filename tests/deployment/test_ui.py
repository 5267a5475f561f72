"""Commit status in the Airflow UI, against the real deployment: the plugin's routes behind Airflow's auth, the
task state store, the extra links, and the view in a real browser (Debian's Chromium driven by Playwright)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import requests

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import SESSION_DIR

pytestmark = pytest.mark.deployment

ARTIFACTS = SESSION_DIR / "artifacts"
DAG, RUN = "ct_append_v2", "ui-run"


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
    resp = deployment.session.get(deployment.base + path, timeout=30)
    assert resp.status_code == 200
    job = resp.json()["jobs"][0]
    assert job["state"] == "committed" and job["totals"] == committed_run["totals"]
    assert {t["task"]: t["failed_attempts"] for t in job["tasks"]}[1] == ["0.1"]


def test_task_state_store_and_extra_links(deployment, committed_run):
    store = deployment.api("GET", f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/stage.write/state-store",
                           params={"map_index": 1})
    entries = {e["key"]: e["value"] for e in store["task_state_store"]}
    assert entries["commit"]["status"] == "committed" and entries["commit"]["committed_attempt"] == 2
    links = deployment.api("GET", f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/stage.commit/links")["extra_links"]
    assert links["Commit status"] == f"/commit-status/dags/{DAG}/runs/{RUN}"
    assert links["Commit target"].startswith("file://")


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


def test_commit_status_tab_in_a_real_browser(deployment, committed_run):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    token = deployment.session.headers["Authorization"].split()[1]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"])
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_cookies([{"name": "_token", "value": token, "url": deployment.base}])
        context.set_default_timeout(300_000)  # a bound for a loaded machine, not a wait: nothing races here
        page = context.new_page()
        t0 = time.monotonic()
        page.goto(f"{deployment.base}/dags/{DAG}/runs/{RUN}/plugin/commit-status")
        frame = None
        deadline = t0 + 300
        while time.monotonic() < deadline:  # the tab embeds the plugin page in an iframe
            frame = next((f for f in page.frames if "/commit-status/dags/" in f.url), None)
            if frame is not None and frame.query_selector("[data-testid=total-rows]"):
                break
            page.wait_for_timeout(500)
        if frame is None:
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
        assert frame is not None, (page.url, [f.url for f in page.frames])
        frame.wait_for_selector("[data-testid=total-rows]")
        loaded = time.monotonic() - t0
        totals = committed_run["totals"]
        assert frame.inner_text("[data-testid=state]") == "committed"
        assert frame.inner_text("[data-testid=total-rows]") == str(totals["rows"])
        assert frame.inner_text("[data-testid=total-files]") == str(totals["files"])
        assert frame.inner_text("[data-testid=total-tasks]") == str(totals["tasks"])
        assert "partial output" in frame.inner_text("[data-testid=v2-warning]")
        assert frame.inner_text("tr[data-task='1'] td:nth-child(6)") == "0.1"
        page.screenshot(path=str(ARTIFACTS / "commit-status-tab.png"), full_page=True)
        browser.close()
    print(f"commit-status tab loaded in {loaded:.2f} s; screenshot {ARTIFACTS / 'commit-status-tab.png'}")
