"""Commit status in the Airflow UI, against the real deployment: the plugin's routes behind Airflow's auth, the
task state store, the extra links, and the view (a React app rendered inside Airflow's own page, no iframe) in a
real browser (Debian's Chromium driven by Playwright), in the UI's light and dark modes: a committed, a failed, a
v2-aborted, a running and a recovered stage, an audited stage (failed; waiting for its approval; approved), a mapped and an unmapped task instance, a stage of several shards
per task instance, a run without a stage, a run that does not exist, a 1,000-task stage (load time and bytes per
refresh measured; sorted, and a task found by number), column help by keyboard, axe-core's checks (contrast in
both modes), and the whole UI under an ``[api] base_url`` with a path.

The screenshots go to ``<session>/artifacts/ui``; with ``COMMIT_UI_SCREENSHOTS=<dir>`` they are copied there too
(``docs/ui`` holds the README's). Nothing waits on time: every step waits for an observable state (REST API,
storage, files the tasks write, the page's content); a timeout only fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import requests

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import SESSION_DIR
from ..support import apt_install, free_port
from .conftest import REST_TIMEOUT

pytestmark = pytest.mark.deployment

ARTIFACTS = SESSION_DIR / "artifacts"
SHOTS = ARTIFACTS / "ui"
DAG, RUN = "ct_append_v2", "ui-run"
TAB = f"dags/{DAG}/runs/{RUN}/plugin/commit-status"
API = "/commit-status/api"
BOUND = 300_000  # ms: a bound for a loaded machine, not a wait
ZONE = "Asia/Kolkata"  # a zone with a half-hour offset: a time shown in UTC or the browser's zone cannot match


@pytest.fixture(scope="module")
def committed_run(deployment):
    (deployment.work / f"fail-{DAG}-1-1").touch()  # a failed attempt, so the page has one to show
    deployment.trigger(DAG, RUN)
    assert deployment.wait_run(DAG, RUN) == "success", deployment.ti_states(DAG, RUN)
    return read_success_marker(str(deployment.root / DAG), verify_files=True)


def _api(dep, path: str, **params) -> dict:
    resp = dep.session.get(f"{dep.base}{API}/{path}", params=params, timeout=REST_TIMEOUT)
    assert resp.status_code == 200, f"{path}: {resp.status_code} {resp.text}"
    return resp.json()


def test_every_route_needs_airflow_auth_and_docs_are_not_a_blank_page(deployment, committed_run):
    run = f"dags/{DAG}/runs/{RUN}"
    routes = [f"{API}/{run}", f"{API}/{run}/version", f"{API}/{run}/stages/stage.setup/tasks",
              f"{API}/{run}/stages/stage.setup/files", "/commit-status/openapi.json",
              "/commit-status/static/commit-status.js"]
    for path in routes:
        assert requests.get(deployment.base + path, timeout=REST_TIMEOUT).status_code == 401, path
        bad = requests.get(deployment.base + path, headers={"Authorization": "Bearer not-a-token"}, timeout=REST_TIMEOUT)
        assert bad.status_code in (401, 403), path
        assert deployment.session.get(deployment.base + path, timeout=REST_TIMEOUT).status_code == 200, path
    # FastAPI's /docs and /redoc load Swagger UI / ReDoc from a CDN: blank without internet, so they are not served
    for docs in ("docs", "redoc"):
        assert deployment.session.get(f"{deployment.base}/commit-status/{docs}", timeout=REST_TIMEOUT).status_code == 404
    bundle = deployment.session.get(f"{deployment.base}/commit-status/static/commit-status.js", timeout=REST_TIMEOUT)
    assert bundle.headers["content-type"].startswith("text/javascript") and b"AirflowPlugin" in bundle.content
    status = _api(deployment, run)
    [stage] = status["stages"]
    assert stage["state"] == "committed" and stage["totals"] == committed_run["totals"]
    assert status["live"] is False and status["has_stages"] is True
    [task1] = _api(deployment, f"{run}/stages/stage.setup/tasks", task=1)["items"]
    assert task1["failed_attempts"] == ["0.1"] and task1["committed_attempt"] == "0.2"


def test_task_state_store_and_distinct_extra_links(deployment, committed_run):
    store = deployment.api("GET", f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/stage.write/state-store",
                           params={"map_index": 1})
    entries = {e["key"]: e["value"] for e in store["task_state_store"]}
    assert entries["commit"]["status"] == "committed" and entries["commit"]["committed_attempt"] == 2
    links = deployment.api("GET", f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/stage.commit/links")["extra_links"]
    assert links["Commit status"] == TAB            # the tab inside Airflow, relative to the UI's base URL
    assert links["Commit target"] == f"{TAB}?view=target"  # local target: the tab's target view, not the same page


# ------------------------------------------------------------------------------------------------ the browser
def _chromium() -> str:
    path = shutil.which("chromium")
    if path is None and apt_install("chromium"):
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


def _page(browser, deployment, theme: str, cookie_url: str | None = None, zone: str = ZONE):
    """A page logged in to the UI (the session cookie Airflow's login sets), in the UI's *theme* (what its
    colour-mode switch stores) and time zone (what its time-zone menu stores)."""
    token = deployment.session.headers["Authorization"].split()[1]
    context = browser.new_context(viewport={"width": 1440, "height": 1100}, color_scheme=theme)
    context.add_cookies([{"name": "_token", "value": token, "url": cookie_url or deployment.base}])
    context.add_init_script(f"try{{localStorage.setItem('theme','{theme}');"
                            f"localStorage.setItem('timezone', JSON.stringify('{zone}'))}}catch(e){{}}")
    context.set_default_timeout(BOUND)
    page = context.new_page()
    page.requests_seen = []  # type: ignore[attr-defined]
    page.on("request", lambda r: page.requests_seen.append(r.url))  # type: ignore[attr-defined]
    return page


#: The mean of R, G and B (0-255) of an element's text colour, whatever notation the theme uses (Airflow's is
#: oklch): the browser paints it on a canvas and reads the pixel back.
LIGHTNESS = """(sel) => {
  const color = getComputedStyle(document.querySelector(sel)).color;
  const ctx = Object.assign(document.createElement('canvas'), {width: 1, height: 1}).getContext('2d');
  ctx.fillStyle = color; ctx.fillRect(0, 0, 1, 1);
  const d = ctx.getImageData(0, 0, 1, 1).data;
  return (d[0] + d[1] + d[2]) / 3;
}"""
VIEW = "[data-testid=commit-status], [data-testid=no-stage]"


def _lightness(page, sel: str = VIEW) -> float:
    return page.evaluate(LIGHTNESS, sel)


def _view(page, url: str, testid: str = "commit-status"):
    """Open *url* and wait for the view's content, rendered in the page itself (no iframe)."""
    page.goto(url)
    try:
        page.wait_for_selector(f"[data-testid={testid}]")
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
        raise
    assert page.query_selector("iframe") is None, "the view is an iframe again"
    return page


def _check_theme(page, theme: str) -> None:
    """The view is drawn by Airflow's own Chakra system in the UI's colour mode: Airflow shares its system, the
    view's components are Chakra's (their classes), and the text follows the mode."""
    assert ("dark" in (page.evaluate("document.documentElement.className") or "")) == (theme == "dark")
    assert page.evaluate("!!globalThis.ChakraUISystem"), "Airflow 3.3 shares its Chakra system"
    assert page.query_selector("[data-testid=commit-status] .chakra-badge, [data-testid=no-stage]") is not None
    assert (_lightness(page) > 128) == (theme == "dark"), (theme, _lightness(page))
    text = page.inner_text(VIEW)
    for word in ("None", "null", "undefined", "NaN"):   # a value shown raw ("no nulls", a check's words, is fine)
        assert not re.search(rf"\b{word}\b", text), (word, text)


def _settled(page) -> None:
    """Wait until no finite CSS animation or transition runs (a popover fading in or out, an accordion opening):
    colours read in the middle of one are neither the start's nor the end's (axe measured a closing popover's text
    at 1.03:1 on a loaded machine), and a screenshot would catch it half drawn."""
    page.wait_for_function("document.getAnimations().every(a => a.playState !== 'running'"
                           " || a.effect?.getTiming().iterations === Infinity)")  # a spinner never ends


def _shoot(page, name: str, full: bool = False) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    _settled(page)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    if os.environ.get("COMMIT_UI_SCREENSHOTS"):
        dest = Path(os.environ["COMMIT_UI_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / path.name)
    return path


def _accessible(page, name: str, within: str = VIEW) -> None:
    """axe-core's checks on the view (Airflow's own page around it is not ours to judge): every text at least
    4.5:1 against its background (WCAG AA), names and roles of every control, ``aria-sort``; the report goes to
    the artifacts when a check fails."""
    from axe_playwright_python.sync_playwright import Axe

    _settled(page)
    results = Axe().run(page, context={"include": [[within]]},
                        options={"resultTypes": ["violations"], "runOnly": {"type": "tag", "values": [
                            "wcag2a", "wcag2aa", "wcag21aa", "best-practice"]}})
    if results.violations_count:
        ARTIFACTS.mkdir(exist_ok=True)
        results.save_to_file(ARTIFACTS / f"axe-{name}.json", violations_only=True)
    assert results.violations_count == 0, f"{name}: {results.generate_report()}"


def _open_tab(browser, deployment, theme: str, dag_id: str, run_id: str, suffix: str = "plugin/commit-status"):
    page = _page(browser, deployment, theme)
    _view(page, f"{deployment.base}/dags/{dag_id}/runs/{run_id}/{suffix}")
    _check_theme(page, theme)
    return page


def _row(page, task: int) -> str:
    return f"[data-testid=task-table] tr[data-task='{task}']"


def _trigger(dep, dag_id: str, run_id: str, conf: dict) -> None:
    dep.wait_dag(dag_id)
    dep.api("POST", f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None,
                                                     "conf": {**conf, "target": str(dep.root / f"{dag_id}-{run_id}")}})


def _stage(dep, dag_id: str, run_id: str) -> dict:
    stages = _api(dep, f"dags/{dag_id}/runs/{run_id}")["stages"]
    return stages[0] if stages else {}


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_committed_stage(browser, deployment, committed_run, theme):
    page = _open_tab(browser, deployment, theme, DAG, RUN)
    totals = committed_run["totals"]
    assert page.inner_text("[data-testid=stage-state]") == "committed"
    assert page.inner_text("[data-testid=total-rows]") == str(totals["rows"])
    assert page.inner_text("[data-testid=total-files]") == str(totals["files"])
    assert page.inner_text("[data-testid=total-tasks]") == str(totals["tasks"])
    assert "partial output" in page.inner_text("[data-testid=v2-warning]")
    assert page.inner_text(f"{_row(page, 1)} [data-testid=failed-attempts]") == "0.1"
    assert page.inner_text(f"{_row(page, 1)} [data-testid=committed-attempt]") == "0.2"
    assert "Nothing to do" in page.inner_text("[data-testid=next-steps]")
    # the job commit's stages, markers and the cleanup after _SUCCESS included (they were missing)
    for name in ("recovery", "plan", "moves", "commit_log", "markers", "cleanup_after_success"):
        assert page.query_selector(f"[data-testid=timeline-{name}]") is not None, name
    # the commit time in the UI's chosen time zone, as the rest of the UI shows times
    finished = datetime.fromisoformat(committed_run["finished"]).astimezone(ZoneInfo(ZONE))
    assert page.inner_text("[data-field=committed_at]") == finished.strftime("%Y-%m-%d %H:%M:%S")
    assert ZONE in page.inner_text("[data-testid=time-zone]")
    # terms explained once, in a panel (and behind each column's "?" button), not underlined everywhere
    assert page.evaluate("[...document.querySelectorAll('[data-testid=commit-status] *')].filter(e => "
                         "getComputedStyle(e).textDecorationStyle === 'dotted').length") == 0
    # the table is in task order, said to assistive technology; the other sortable columns say "none"
    table = "[data-testid=task-table]"
    assert page.get_attribute(f"{table} th[data-column=task]", "aria-sort") == "ascending"
    assert page.get_attribute(f"{table} th[data-column=bytes]", "aria-sort") == "none"
    assert page.get_attribute(f"{table} th[data-column='failed attempts']", "aria-sort") is None
    _accessible(page, f"committed-{theme}")
    _shoot(page, f"committed-{theme}")
    _column_help_by_keyboard(page)
    if theme == "light":
        _shoot(page, "column-help-light")
        page.keyboard.press("Escape")
    page.click("[data-testid=help] button")
    # the panel fades in: axe-core read its text mid-animation at 4.49:1 (light) and 1.22:1 (dark); wait it out
    page.wait_for_function("document.querySelector('[data-testid=help]').getAnimations({subtree: true}).length === 0")
    help_text = page.inner_text("[data-testid=help]")
    # the job commit stages the server lists (the protocol's one list), the table transaction included
    for term in ("attempt A.T", "failed attempts", "denied attempts", "unfinished attempts", "generation",
                 "cleanup_after_success", "table_commit"):
        assert term in help_text, term
    _accessible(page, f"committed-help-open-{theme}")
    page.context.close()


def _column_help_by_keyboard(page) -> None:
    """A column's help, reached with the keyboard alone: Tab to its "?" button, Enter opens the popover (what a
    tap does on a touch screen), Escape closes it and gives the focus back; a tap on another opens that one."""
    button = "[data-testid=task-table] th[data-column='committed attempt'] [data-testid=help-committed-attempt]"
    page.focus("[data-testid=task-table] [data-testid=sort-status]")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.testid") == "help-status", "Tab reaches the next help"
    page.keyboard.press("Tab")   # the committed attempt's sort button
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == 'What "committed attempt" means'
    page.keyboard.press("Enter")
    popover = page.wait_for_selector("[data-testid=help-popover]", state="visible")
    assert "A.T: application attempt A" in popover.inner_text()
    assert page.get_attribute(button, "aria-expanded") == "true"
    page.keyboard.press("Escape")
    page.wait_for_selector("[data-testid=help-popover]", state="detached")
    assert page.evaluate("document.activeElement.dataset.testid") == "help-committed-attempt"
    page.click("[data-testid=task-table] [data-testid=help-bytes]")
    assert "bytes in the committed attempt's files" in page.inner_text("[data-testid=help-popover]")


@pytest.fixture(scope="module")
def failed_commit(deployment, committed_run):
    """A v1 stage whose job commit fails in its plan: while task 3 is held, a copy of one of task 0's committed
    files is put at its final name in the target, so the commit (mode append) refuses to replace it."""
    dep = deployment
    hold = dep.work / "hold-ui_v1-badcommit-3"
    hold.touch()
    _trigger(dep, "ui_v1", "badcommit", {})
    dep.wait_for(lambda: (dep.work / "holding-ui_v1-badcommit-3").exists(), "task 3 of the run holds")
    dep.wait_for(lambda: _stage(dep, "ui_v1", "badcommit").get("tasks_done") == 3, "tasks 0, 1 and 2 committed")
    target = dep.root / "ui_v1-badcommit"
    committed = sorted(target.glob("_temporary/*/*/_committed/*/part-00000-*"))
    assert committed, sorted(str(p) for p in target.rglob("*"))
    rel = committed[0].relative_to(committed[0].parents[1])
    (target / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(committed[0], target / rel)
    hold.unlink()
    assert dep.wait_run("ui_v1", "badcommit") == "failed", dep.ti_states("ui_v1", "badcommit")
    yield {"file": str(rel)}


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_failed_job_commit_names_its_stage_and_error(browser, deployment, failed_commit, theme):
    """The summary a failed job commit leaves beside the job's records, where a person sees it (issue 21)."""
    page = _open_tab(browser, deployment, theme, "ui_v1", "badcommit")
    text = page.inner_text("[data-testid=commit-failure]")
    assert "in its plan stage: InvalidOutputSpec" in text, text
    assert "would replace existing file" in text and failed_commit["file"] in text, text
    # every try fails the same way: the view says so (it said "the next commit resumes"), and gives the command
    # that drops the job as code, whole and without the backticks of the API's sentence
    assert "every try fails the same way" in text and "resumes" not in text, text
    [command] = page.locator("[data-testid=next-steps] [data-testid=command]").all_inner_texts()
    stage = _stage(deployment, "ui_v1", "badcommit")
    assert command == next(w.split("`")[1] for w in stage["next_steps"] if "`" in w), command
    assert command.startswith("airflow-commit abort ") and "`" not in page.inner_text("[data-testid=next-steps]")
    # its options are never broken at their hyphens (the trial's screenshot showed '--' at a line's end and 'purge'
    # on the next), in a box too narrow for the whole command
    page.set_viewport_size({"width": 700, "height": 1100})
    options = page.evaluate("""() => [...document.querySelectorAll('[data-testid=next-steps] [data-testid=command] span')]
        .filter(s => s.textContent.startsWith('-')).map(s => [s.textContent, s.getClientRects().length])""")
    assert page.locator("[data-testid=next-steps] [data-testid=command]").inner_text() == command  # unchanged
    assert ["--purge", 1] in options and all(lines == 1 for _, lines in options), options
    page.set_viewport_size({"width": 1440, "height": 1100})
    _accessible(page, f"commit-failure-{theme}")
    _shoot(page, f"commit-failure-{theme}")
    page.context.close()


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
    dep.wait_for(lambda: _stage(dep, "ui_v1", "live").get("tasks_done") == 3,
                 "tasks 0, 1 and 2 of the live run committed")
    yield {"hold": hold}
    hold.unlink(missing_ok=True)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_failed_stage_says_what_a_clear_does(browser, deployment, stages, theme):
    page = _open_tab(browser, deployment, theme, "ui_v1", "failed")
    assert page.inner_text("[data-testid=stage-state]") == "failed"
    assert page.inner_text("[data-testid=next-steps]").endswith(
        "tasks 0, 1 and 3 will be recovered (your code is not called), task 2 will run.")
    assert "kept tasks 0, 1 and 3" in page.inner_text("[data-testid=abort]")
    statuses = [page.inner_text(f"{_row(page, n)} [data-testid=task-status]") for n in range(4)]
    assert statuses == ["kept", "kept", "failed", "kept"]
    assert page.inner_text(f"{_row(page, 2)} [data-testid=failed-attempts]") == "0.1, 0.2"
    _shoot(page, f"failed-{theme}")
    page.context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_v2_aborted_stage(browser, deployment, stages, theme):
    page = _open_tab(browser, deployment, theme, "ui_v2", "aborted")
    assert page.inner_text("[data-testid=stage-state]") == "failed"
    # tasks whose Airflow tasks are green were withdrawn by the abort: not "denied", not plain "failed"
    statuses = [page.inner_text(f"{_row(page, n)} [data-testid=task-status]") for n in range(4)]
    assert statuses == ["withdrawn", "withdrawn", "withdrawn", "failed"]
    for n in range(4):
        assert page.inner_text(f"{_row(page, n)} [data-testid=denied-attempts]").strip() == "—"
    abort = page.inner_text("[data-testid=abort]")
    assert "kept no task" in abort and "visible files" in abort
    assert "every task runs again" in page.inner_text("[data-testid=next-steps]")
    _shoot(page, f"v2-aborted-{theme}")
    page.context.close()


def _sizes(page, part: str) -> list[int]:
    """Bytes of each response the page received whose URL contains *part* (recorded by ``_record``)."""
    return [n for url, n in page.responses_seen if part in url]  # type: ignore[attr-defined]


def _record(page) -> None:
    page.responses_seen = []  # type: ignore[attr-defined]

    def seen(resp):
        if "/commit-status/api/" in resp.url:
            try:
                page.responses_seen.append((resp.url, len(resp.body())))  # type: ignore[attr-defined]
            except Exception:  # a response of a closed page
                pass
    page.on("response", seen)


def test_running_stage_live_and_theme_switch(browser, deployment, stages):
    """Light and dark screenshots of the running stage; then the stage finishes and the open page shows it
    committed without a reload, having polled only the run's small version document; switching the UI's colour
    mode restyles the open view."""
    pages = {}
    for theme in ("light", "dark"):
        page = _page(browser, deployment, theme)
        _record(page)
        _view(page, f"{deployment.base}/dags/ui_v1/runs/live/plugin/commit-status")
        _check_theme(page, theme)
        assert page.inner_text("[data-testid=stage-state]") == "running"
        assert page.inner_text(f"{_row(page, 3)} [data-testid=task-status]") == "running"
        assert page.inner_text(f"{_row(page, 3)} [data-testid=unfinished-attempts]") == "0.1"
        assert "3 of 4 task(s) committed" in page.inner_text("[data-testid=progress]")
        assert page.get_attribute("[data-testid=commit-status]", "data-live") == "1"
        _shoot(page, f"running-{theme}")
        pages[theme] = page
    page = pages["light"]
    page.evaluate("window.__not_reloaded = true")
    stages["hold"].unlink()
    page.wait_for_function("document.querySelector('[data-testid=stage-state]').innerText === 'committed'")
    assert page.evaluate("window.__not_reloaded") is True, "the view reloaded instead of refreshing itself"
    assert deployment.wait_run("ui_v1", "live") == "success"
    page.wait_for_function("document.querySelector('[data-testid=commit-status]').dataset.live === '0'")
    versions = _sizes(page, "/version")
    assert versions and max(versions) < 200, versions      # a live page polls a few dozen bytes
    # the UI's colour-mode switch sets the class on its page: the open view follows it (Chakra's variables)
    assert _lightness(page) < 128
    page.evaluate("document.documentElement.classList.remove('light'); document.documentElement.classList.add('dark')")
    page.wait_for_function(f"({LIGHTNESS})('{VIEW}') > 128")
    for p in pages.values():
        p.context.close()


@pytest.fixture(scope="module")
def unmapped_run(deployment):
    _trigger(deployment, "ui_unmapped", "one", {})
    assert deployment.wait_run("ui_unmapped", "one") == "success", deployment.ti_states("ui_unmapped", "one")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_task_instance_tab_shows_its_own_task(browser, deployment, committed_run, unmapped_run, theme):
    """On a task instance's tab the view shows that task first and highlights its row: a mapped write by its map
    index, an unmapped write as task 0 (the UI passes no map index there; ``{MAP_INDEX}`` was left literal)."""
    page = _open_tab(browser, deployment, theme, "ui_unmapped", "one", "tasks/stage.write/plugin/commit-status-ti")
    assert "task 0" in page.inner_text("[data-testid=my-task]")
    assert page.get_attribute(_row(page, 0), "data-mine") == "true"
    assert page.inner_text("[data-testid=my-task] [data-testid=task-status]") == "committed"
    _shoot(page, f"unmapped-task-instance-{theme}")
    _view(page, f"{deployment.base}/dags/{DAG}/runs/{RUN}/tasks/stage.write/mapped/2/plugin/commit-status-ti")
    page.wait_for_selector("[data-testid=my-task]")
    assert "task 2" in page.inner_text("[data-testid=my-task]")
    assert page.get_attribute(_row(page, 2), "data-mine") == "true"
    assert page.get_attribute(_row(page, 1), "data-mine") is None
    _shoot(page, f"mapped-task-instance-{theme}")
    # a task instance that is not a write (the commit task): the stage, no row of its own
    _view(page, f"{deployment.base}/dags/{DAG}/runs/{RUN}/tasks/stage.commit/plugin/commit-status-ti")
    assert page.inner_text("[data-testid=stage-state]") == "committed"
    assert page.query_selector("[data-testid=my-task]") is None
    page.context.close()


@pytest.fixture(scope="module")
def audited_runs(deployment):
    """Two runs of ``ui_audit`` (4 tasks, a per-task row check and a not-null check, then a person's approval):
    ``short``, whose task 2 writes half its rows (its audit fails blaming task 2, nothing is published, nobody is
    asked), and ``review``, whose checks pass and which then waits in its ``approve`` task."""
    dep = deployment
    _trigger(dep, "ui_audit", "short", {"short": [2]})
    _trigger(dep, "ui_audit", "review", {})
    assert dep.wait_run("ui_audit", "short") == "failed", dep.ti_states("ui_audit", "short")
    dep.wait_for(lambda: ((_stage(dep, "ui_audit", "review").get("audit") or {}).get("approval") or {}).get("state")
                 == "waiting", "the review run's approval is asked")
    return dep


def _audit_check(page, label: str) -> str:
    return f"[data-testid=audit-checks] tr[data-check^='{label}']"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_an_audited_stage_shows_its_verdict_the_blamed_task_and_the_approval_it_waits_for(
        browser, deployment, audited_runs, theme):
    """Issue 35's view: a failed audit says nothing was published, which check failed with what it observed, and
    which task a clear runs again; a passed one waiting for its approval says until when, in the UI's time zone."""
    page = _open_tab(browser, deployment, theme, "ui_audit", "short")
    page.wait_for_selector("[data-testid=audit]")
    assert page.inner_text("[data-testid=audit-state]") == "failed"
    failure = page.inner_text("[data-testid=audit-failure]")
    assert "Nothing was published" in failure and "task 2:" in failure, failure
    assert page.get_attribute(_audit_check(page, "Rows"), "data-passed") == "0"
    assert page.get_attribute(_audit_check(page, "NotNull"), "data-passed") == "1"
    assert page.get_attribute("[data-testid=audit-approval]", "data-approval").startswith("not asked"), \
        "a failed audit asks nobody"
    assert page.inner_text(f"{_row(page, 2)} [data-testid=task-status]") == "refused"
    _accessible(page, f"audit-failed-{theme}")
    _shoot(page, f"audit-failed-{theme}", full=True)
    page.context.close()

    approval = _stage(deployment, "ui_audit", "review")["audit"]["approval"]
    page = _open_tab(browser, deployment, theme, "ui_audit", "review")
    page.wait_for_selector("[data-testid=audit-approval]")
    assert page.inner_text("[data-testid=audit-state]") == "passed"
    assert page.get_attribute("[data-testid=audit-approval]", "data-approval") == "waiting"
    deadline = datetime.fromisoformat(approval["deadline"]).astimezone(ZoneInfo(ZONE))
    assert f"waits until {deadline.strftime('%Y-%m-%d %H:%M:%S')}" in page.inner_text("[data-testid=audit-approval]")
    assert page.query_selector("[data-testid=audit-failure]") is None
    assert "waits for a person's approval" in page.inner_text("[data-testid=next-steps]")
    _accessible(page, f"audit-waiting-{theme}")
    _shoot(page, f"audit-waiting-{theme}", full=True)
    page.context.close()


def test_an_approval_answered_through_the_rest_api_shows_who_approved(browser, deployment, audited_runs):
    """The review run answered as the "Required actions" page answers it: the commit runs, and the view says who
    approved and when."""
    dep = deployment
    dep.wait_for(lambda: dep.ti_states("ui_audit", "review").get("stage.approve[-1]") in ("deferred", "awaiting_input"),
                 "the approve task waits for its answer")
    dep.api("PATCH", "/dags/ui_audit/dagRuns/review/taskInstances/stage.approve/-1/hitlDetails",
            json={"chosen_options": ["Approve"], "params_input": {}})
    assert dep.wait_run("ui_audit", "review") == "success", dep.ti_states("ui_audit", "review")
    page = _open_tab(browser, deployment, "light", "ui_audit", "review")
    page.wait_for_selector("[data-testid=audit-approval][data-approval=approved]")
    assert page.inner_text("[data-testid=stage-state]") == "committed"
    assert "by admin" in page.inner_text("[data-testid=audit-approval]")
    _shoot(page, "audit-approved-light", full=True)
    page.context.close()


@pytest.fixture(scope="module")
def sharded_run(deployment):
    """2 write task instances x 3 shards; task 4 (shard 1 of task instance 1) fails at every try."""
    _trigger(deployment, "ui_sharded", "sharded", {"fail": [4]})
    assert deployment.wait_run("ui_sharded", "sharded") == "failed", deployment.ti_states("ui_sharded", "sharded")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_sharded_stage_shows_each_task_instances_shards(browser, deployment, sharded_run, theme):
    """Every task row names its task instance and shard; the failed task instance's tab lists its three shards,
    two committed (a retry would not run them) and the failing one."""
    page = _open_tab(browser, deployment, theme, "ui_sharded", "sharded")
    assert page.inner_text("[data-testid=shards]") == "3 shards per task instance"
    assert [page.inner_text(f"{_row(page, t)} [data-testid=task-shard]") for t in range(6)] == [
        "[0] · 0", "[0] · 1", "[0] · 2", "[1] · 0", "[1] · 1", "[1] · 2"]
    assert page.inner_text(f"{_row(page, 4)} [data-testid=task-status]") == "failed"
    assert page.inner_text(f"{_row(page, 5)} [data-testid=task-status]") == "kept"
    _view(page, f"{deployment.base}/dags/ui_sharded/runs/sharded/tasks/stage.write/mapped/1/plugin/commit-status-ti")
    page.wait_for_selector("[data-testid=my-task]")
    assert "3 shards, tasks 3–5" in page.inner_text("[data-testid=my-task]")
    assert [page.get_attribute(_row(page, t), "data-mine") for t in range(6)] == [None] * 3 + ["true"] * 3
    statuses = page.locator("[data-testid=my-task] [data-testid=task-status]").all_inner_texts()
    assert statuses == ["kept", "failed", "kept"]
    _shoot(page, f"sharded-task-instance-{theme}")
    page.context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_run_without_a_stage_says_so_and_never_polls(browser, deployment, theme):
    run_id = f"plain-{theme}"
    deployment.trigger("ui_plain", run_id)
    assert deployment.wait_run("ui_plain", run_id) == "success"
    status = _api(deployment, f"dags/ui_plain/runs/{run_id}")
    assert status["has_stages"] is False and status["live"] is False and status["stages"] == []
    page = _page(browser, deployment, theme)
    _view(page, f"{deployment.base}/dags/ui_plain/runs/{run_id}/plugin/commit-status", "no-stage")
    _check_theme(page, theme)
    assert "No write stage" in page.inner_text("[data-testid=no-stage]")
    assert page.get_attribute("[data-testid=no-stage]", "data-live") == "0"
    _shoot(page, f"no-stage-{theme}")
    # the old page polled every 3 s forever here: this one never asked for a version
    assert not [u for u in page.requests_seen if "/commit-status/api/" in u and "/version" in u], \
        page.requests_seen  # type: ignore[attr-defined]
    page.context.close()


def test_extra_links_open_distinct_views_inside_airflow(browser, deployment, committed_run):
    page = _page(browser, deployment, "light")
    page.goto(f"{deployment.base}/dags/{DAG}/runs/{RUN}/tasks/stage.commit/details")  # where 3.3 shows them
    status = page.wait_for_selector(f"a[href='{TAB}']:has-text('Commit status')")
    target = page.wait_for_selector(f"a[href='{TAB}?view=target']:has-text('Commit target')")
    assert status.get_attribute("target") == "_self" and target.get_attribute("target") == "_self"
    target.click()
    page.wait_for_url(f"{deployment.base}/{TAB}?view=target")
    page.wait_for_selector("[data-testid=commit-status][data-view=target] [data-testid=files-table]")
    assert page.inner_text("[data-testid=target]") == committed_run["output"]
    # the table is drawn before its page of files arrives; the page's rows are drawn at once, with the first
    page.wait_for_selector("[data-testid=file-row]")
    files = page.locator("[data-testid=file-row]")
    assert files.count() == min(50, committed_run["totals"]["files"])
    assert {files.nth(i).locator("td").first.inner_text() for i in range(files.count())} <= {
        f["path"] for f in committed_run["files"]}
    _shoot(page, "target-view-light")
    page.go_back()
    page.wait_for_selector(f"a[href='{TAB}']:has-text('Commit status')").click()
    page.wait_for_url(f"{deployment.base}/{TAB}")
    page.wait_for_selector("[data-testid=commit-status][data-view=status] [data-testid=task-table]")
    page.context.close()


@pytest.fixture(scope="module")
def recovered_run(deployment):
    """A v1 run whose task 2 fails in the first run (the teardown keeps tasks 0, 1 and 3), then the whole run
    cleared: application attempt 1 recovers tasks 0, 1 and 3 and runs task 2 again."""
    dep = deployment
    _trigger(dep, "ui_v1", "recover", {"fail_first_run": [2]})
    assert dep.wait_run("ui_v1", "recover") == "failed", dep.ti_states("ui_v1", "recover")
    dep.wait_for(lambda: _stage(dep, "ui_v1", "recover").get("aborted") is not None, "the teardown ran")
    dep.clear("ui_v1", "recover", only_failed=False)
    assert dep.wait_run("ui_v1", "recover") == "success", dep.ti_states("ui_v1", "recover")
    return read_success_marker(str(dep.root / "ui_v1-recover"), verify_files=True)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_recovered_task_shows_the_attempt_that_committed(browser, deployment, recovered_run, theme):
    """A task recovered in application attempt 1 committed as attempt 0.1: ``_SUCCESS``, the JSON and the view
    say 0.1 (the view said 1.1, and ``_SUCCESS`` carried only the adopter's application attempt)."""
    manifest = recovered_run
    assert manifest["app_attempt"] == 1
    by_task = {t["task"]: t for t in manifest["tasks"]}
    assert {n: by_task[n]["committed_attempt"] for n in (0, 1, 3)} == {0: "0.1", 1: "0.1", 3: "0.1"}
    assert by_task[2]["committed_attempt"].startswith("1.")
    rows = {r["task"]: r for r in _api(deployment, "dags/ui_v1/runs/recover/stages/stage.setup/tasks")["items"]}
    assert {n: (rows[n]["status"], rows[n]["committed_attempt"]) for n in (0, 1, 3)} == {
        n: ("recovered", "0.1") for n in (0, 1, 3)}
    assert rows[2]["committed_attempt"] == by_task[2]["committed_attempt"]
    page = _open_tab(browser, deployment, theme, "ui_v1", "recover")
    assert page.inner_text(f"{_row(page, 0)} [data-testid=committed-attempt]") == "0.1"
    assert page.inner_text(f"{_row(page, 0)} [data-testid=task-status]") == "recovered"
    assert page.inner_text(f"{_row(page, 2)} [data-testid=committed-attempt]") == by_task[2]["committed_attempt"]
    _shoot(page, f"recovered-{theme}")
    page.context.close()


@pytest.fixture(scope="module")
def big_run(deployment):
    """A stage of 1,000 tasks, held after 500 committed (the other 500 set up and writing)."""
    dep = deployment
    hold = dep.work / "hold-ui_big-big"
    hold.touch()
    _trigger(dep, "ui_big", "big", {})
    dep.wait_for(lambda: (dep.work / "holding-ui_big-big").exists(), "500 of the 1,000 tasks committed")
    yield hold
    hold.unlink(missing_ok=True)


RESOURCES = """() => performance.getEntriesByType('resource').filter(e => e.name.includes('/commit-status/'))
  .map(e => ({name: e.name, start: e.startTime, end: e.responseEnd}))"""


def test_1000_tasks_summary_first_paged_and_cheap_to_keep_live(browser, deployment, big_run):
    figures = {}
    pages = {}
    for theme in ("light", "dark"):
        page = _page(browser, deployment, theme)
        _record(page)
        _view(page, f"{deployment.base}/dags/ui_big/runs/big/plugin/commit-status")
        page.wait_for_selector("[data-testid=task-table] tr[data-task]")
        # ms since navigation start: the whole page, and the view's own part (from its bundle's request to the
        # first page of tasks shown), and the summary request (the first one builds the model: 1,000 records)
        ready = page.evaluate("performance.now()")
        timings = page.evaluate(RESOURCES)
        bundle = next(t for t in timings if "/static/commit-status.js" in t["name"])
        summary = next(t for t in timings if t["name"].split("?")[0].endswith("/runs/big"))
        figures[f"page_ready_ms_{theme}"] = round(ready)
        figures[f"view_ms_{theme}"] = round(ready - bundle["start"])
        figures[f"summary_request_ms_{theme}"] = round(summary["end"] - summary["start"])
        _check_theme(page, theme)
        assert page.inner_text("[data-testid=stage-state]") == "running"
        assert page.inner_text("[data-testid=count-committed]") == "committed 500"
        assert page.inner_text("[data-testid=count-running]") == "running 500"
        assert "500 of 1,000 task(s) committed" in page.inner_text("[data-testid=progress]")
        assert page.locator("[data-testid=task-table] tr[data-task]").count() == 50
        assert page.inner_text("[data-testid=task-table] [data-testid=pager-range]") == "1–50 of 1,000"
        _accessible(page, f"big-running-{theme}")
        _shoot(page, f"big-running-{theme}")
        pages[theme] = page
    page = pages["light"]
    # the held stage changes nothing (its writer only heartbeats): polls see the same version, so no refetch
    page.wait_for_function("+document.querySelector('[data-testid=version]').dataset.polls >= 2")
    assert len([u for u, _ in page.responses_seen  # type: ignore[attr-defined]
                if u.split("?")[0].endswith("/runs/big")]) == 1
    figures["summary_bytes"] = max(n for url, n in page.responses_seen  # type: ignore[attr-defined]
                                   if url.split("?")[0].endswith("/runs/big"))
    figures["task_page_bytes"] = max(_sizes(page, "/tasks"))
    page.click("[data-testid=filter-running]")
    page.wait_for_function("document.querySelector('[data-testid=task-table] [data-testid=pager-range]').innerText"
                           " === '1–50 of 500'")
    assert page.inner_text("[data-testid=task-table] tr[data-task] >> nth=0").startswith("500")
    page.click("[data-testid=task-table] [data-testid=page-next]")
    page.wait_for_function("document.querySelector('[data-testid=task-table] [data-testid=pager-range]').innerText"
                           " === '51–100 of 500'")
    assert page.get_attribute("[data-testid=task-table] tr[data-task] >> nth=0", "data-task") == "550"
    _sort_and_find(pages["dark"])
    big_run.unlink()
    page.wait_for_function("document.querySelector('[data-testid=stage-state]').innerText === 'committed'")
    assert deployment.wait_run("ui_big", "big") == "success"
    page.wait_for_function("document.querySelector('[data-testid=commit-status]').dataset.live === '0'")
    versions = _sizes(page, "/version")
    figures["version_bytes"] = max(versions)
    figures["version_polls"] = len(versions)
    figures["summary_fetches"] = len([u for u, _ in page.responses_seen if u.split("?")[0].endswith("/runs/big")])
    assert figures["version_bytes"] < 200 and figures["summary_bytes"] < 20_000, figures
    assert page.inner_text("[data-testid=total-tasks]") == "1,000"
    page.click("[data-testid=filter-all]")
    page.wait_for_function("document.querySelector('[data-testid=task-table] [data-testid=pager-range]').innerText"
                           " === '1–50 of 1,000'")
    _shoot(page, "big-committed-light")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "ui-1000-tasks.json").write_text(json.dumps(figures, indent=1))
    print("1,000-task view:", figures)
    for p in pages.values():
        p.context.close()


def _first_task(page) -> str:
    return page.get_attribute("[data-testid=task-table] tr[data-task] >> nth=0", "data-task") or ""


def _sort_and_find(page) -> None:
    """Sorted on the server across all 1,000 tasks (not within the page shown), announced by ``aria-sort``; a
    task found by number wherever it is, and a number the stage has not, said so."""
    table = "[data-testid=task-table]"

    def sort(column: str, testid: str, direction: str) -> None:
        page.click(f"{table} [data-testid=sort-{testid}]")
        page.wait_for_function(f"document.querySelector(\"{table} th[data-column='{column}']\")"
                               f".getAttribute('aria-sort') === '{direction}'")

    sort("task", "task", "descending")
    page.wait_for_function(f"document.querySelector('{table} tr[data-task]').dataset.task === '999'")
    assert page.get_attribute(f"{table} th[data-column=status]", "aria-sort") == "none"
    sort("status", "status", "ascending")   # committed before running; ties in task order
    page.wait_for_function(f"document.querySelector('{table} tr[data-task]').dataset.task === '0'")
    sort("status", "status", "descending")
    page.wait_for_function(f"document.querySelector('{table} tr[data-task]').dataset.task === '500'")
    assert page.inner_text(f"{table} tr[data-task] >> nth=0 >> [data-testid=task-status]") == "running"
    sort("rows", "rows", "ascending")   # the 500 running tasks have no rows yet: last, after every committed one
    # aria-sort moves when the header is clicked, the rows when the server's page arrives: wait for the rows
    page.wait_for_function(f"+document.querySelector('{table} tr[data-task]').dataset.task < 500")
    page.click(f"{table} [data-testid=page-next]")
    page.wait_for_function(f"document.querySelector('{table} [data-testid=pager-range]').innerText === "
                           "'51–100 of 1,000'")
    page.fill(f"{table} [data-testid=find-task]", "777")
    page.press(f"{table} [data-testid=find-task]", "Enter")
    page.wait_for_function(f"document.querySelector('{table} [data-testid=pager-range]').innerText === '1–1 of 1'")
    assert _first_task(page) == "777" and page.locator(f"{table} tr[data-task]").count() == 1
    _shoot(page, "find-task-dark")
    page.fill(f"{table} [data-testid=find-task]", "5000")
    page.press(f"{table} [data-testid=find-task]", "Enter")
    assert "No task 5000 in this stage (it has 1,000 tasks)" in page.inner_text(
        f"{table} [data-testid=find-task-none]")
    page.fill(f"{table} [data-testid=find-task]", "x1")
    page.press(f"{table} [data-testid=find-task]", "Enter")
    assert "is no task number" in page.inner_text(f"{table} [data-testid=find-task-error]")
    page.click(f"{table} [data-testid=find-task-clear]")
    page.wait_for_function(f"document.querySelector('{table} [data-testid=pager-range]').innerText === "
                           "'1–50 of 1,000'")
    _accessible(page, "big-sorted-dark")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_run_or_dag_that_does_not_exist_says_not_found(browser, deployment, committed_run, theme):
    """The API answers 404 for a DAG or run Airflow does not have; the view says so, naming them, instead of an
    empty view, and does not poll."""
    for dag_id, run_id in ((DAG, "no-such-run"), ("no_such_dag", "no-such-run")):
        resp = deployment.session.get(f"{deployment.base}{API}/dags/{dag_id}/runs/{run_id}", timeout=60)
        assert resp.status_code == 404, (dag_id, resp.status_code, resp.text)
        page = _page(browser, deployment, theme)
        _view(page, f"{deployment.base}/dags/{dag_id}/runs/{run_id}/plugin/commit-status", "not-found")
        text = page.inner_text("[data-testid=not-found]")
        assert f"Not found: DAG {dag_id}, run {run_id}" in text, text
        _accessible(page, f"not-found-{theme}", "[data-testid=not-found]")
        if dag_id == DAG:
            _shoot(page, f"not-found-{theme}")
        assert not [u for u in page.requests_seen  # type: ignore[attr-defined]
                    if "/commit-status/api/" in u and "/version" in u], page.requests_seen  # type: ignore[attr-defined]
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
        return requests.get(url, timeout=REST_TIMEOUT).status_code == 200
    except requests.RequestException:
        return False


def test_ui_under_a_base_url_path(browser, deployment, committed_run, api_server_under_a_path):
    base = api_server_under_a_path
    page = _page(browser, deployment, "dark", cookie_url=base + "/")
    _view(page, f"{base}/dags/{DAG}/runs/{RUN}/plugin/commit-status")
    assert page.inner_text("[data-testid=stage-state]") == "committed"
    assert any("/airflow/commit-status/static/commit-status.js" in u for u in page.requests_seen)  # type: ignore
    page.goto(f"{base}/dags/{DAG}/runs/{RUN}/tasks/stage.commit/details")
    page.wait_for_selector(f"a[href='{TAB}']:has-text('Commit status')").click()
    page.wait_for_url(f"{base}/{TAB}")
    page.wait_for_selector("[data-testid=commit-status] [data-testid=stage-state]")
    page.context.close()
