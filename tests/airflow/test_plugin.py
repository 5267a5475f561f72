"""The commit-status plugin without a deployment: every route (FastAPI's docs included) behind Airflow's auth, the
unmapped task-instance tab (``{MAP_INDEX}`` left literal by the UI), relative ``href``s, and what the page says
(no "None", attempt ids explained, abort details, next steps). The real browser checks are in
``tests/deployment/test_ui.py``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from airflow_commit_provider.plugins import commit_status as plugin


@pytest.fixture
def client():
    return TestClient(plugin.app)


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/api/dags/d/runs/r", "/dags/d/runs/r",
                                  "/dags/d/runs/r?task_id=t&map_index={MAP_INDEX}"])
def test_every_route_needs_airflow_auth(client, path):
    assert client.get(path).status_code == 401, path


def test_hrefs_are_relative():
    for view in plugin.CommitStatusPlugin.external_views:
        assert not view["href"].startswith(("/", "http")), view


def _jobs(monkeypatch, jobs, tis):
    monkeypatch.setattr(plugin, "_setup_contexts", lambda d, r: [
        {"setup_task_id": "stage.setup", "job_name": "stage", "job_id": j["job_id"], "target": "/x",
         "algorithm_value": 1, "mode": "append"} for j in jobs])
    states = iter(jobs)

    class FakeCommitter:
        def status(self):
            return next(states)

    import airflow_commit_provider.protocol as protocol

    monkeypatch.setattr(protocol, "make_committer", lambda *a, **k: FakeCommitter())
    monkeypatch.setattr(plugin, "_task_instances", lambda d, r: tis)


def _write_tis(states, try_number=2):
    return [{"task_id": "stage.write", "map_index": n, "state": s, "try_number": try_number}
            for n, s in enumerate(states)]


def test_unmapped_task_instance_tab_renders(monkeypatch):
    _jobs(monkeypatch, [{"job_id": "j", "state": "running", "tasks": [], "app_attempt": 0}], [])
    page = plugin.status_page("d", "r", task_id="stage.commit", map_index="{MAP_INDEX}")
    assert "Commit status" in page and "None" not in page


def test_failed_v1_stage_says_what_a_clear_does(monkeypatch):
    tasks = [{"task": n, "attempt": 1, "app_attempt": 0, "recovered_from_app": None, "files": 2,
              "failed_attempts": [], "denied_attempts": [], "unfinished_attempts": []} for n in (0, 1, 3)]
    tasks.insert(2, {"task": 2, "attempt": None, "app_attempt": None, "files": 0, "failed_attempts": ["0.1", "0.2"],
                     "denied_attempts": [], "unfinished_attempts": []})
    job = {"job_id": "j", "state": "failed", "algorithm": 1, "app_attempt": 0, "generation": 0, "tasks": tasks,
           "aborted": {"at": "2026-01-01T00:00:00Z", "kept_committed_tasks": [0, 1, 3], "visible_files_removed": 0}}
    _jobs(monkeypatch, [job], _write_tis(["success", "success", "failed", "success"]))
    [state] = plugin.job_states("d", "r")
    assert state["next_steps"] == ["Clear the DAG run (or the stage's setup task with its downstream tasks): setup "
                                   "opens application attempt 1; tasks 0, 1 and 3 will be recovered (your code is "
                                   "not called), task 2 will run."]
    assert {n: s["status"] for n, s in state["task_states"].items()} == {0: "kept", 1: "kept", 2: "failed",
                                                                         3: "kept"}
    page = plugin.render("d", "r", [state], None, None, 0.01)
    assert ">None<" not in page and "None" not in page
    assert "kept tasks 0, 1 and 3" in page
    assert "try 2 (app. attempt 0)" in page            # "0.2" explained where it is shown
    assert "application attempt A, Airflow try T" in page   # and in the glossary


def test_v2_abort_shows_withdrawn_tasks_not_denied(monkeypatch):
    tasks = [{"task": n, "attempt": None, "app_attempt": None, "files": 0, "failed_attempts": ["0.1"],
              "denied_attempts": [], "unfinished_attempts": []} for n in range(3)]
    tasks.append({"task": 3, "attempt": None, "app_attempt": None, "files": 0, "failed_attempts": ["0.1", "0.2"],
                  "denied_attempts": [], "unfinished_attempts": []})
    job = {"job_id": "j", "state": "failed", "algorithm": 2, "app_attempt": 0, "tasks": tasks,
           "aborted": {"at": "t", "kept_committed_tasks": [], "visible_files_removed": 6}}
    _jobs(monkeypatch, [job], _write_tis(["success", "success", "success", "failed"], try_number=1)[:3]
          + _write_tis([None, None, None, "failed"])[3:])
    [state] = plugin.job_states("d", "r")
    assert [state["task_states"][n]["status"] for n in range(4)] == ["withdrawn", "withdrawn", "withdrawn", "failed"]
    assert "removed this job's visible files (6)" in state["next_steps"][0]
    page = plugin.render("d", "r", [state], None, None, 0.01)
    assert "removed 6 visible files" in page and "v2" in page


def test_running_stage_refreshes_itself(monkeypatch):
    tasks = [{"task": 0, "attempt": 1, "app_attempt": 0, "files": 1, "failed_attempts": [], "denied_attempts": [],
              "unfinished_attempts": []},
             {"task": 1, "attempt": None, "app_attempt": None, "files": 0, "failed_attempts": [],
              "denied_attempts": [], "unfinished_attempts": ["0.1"]}]
    _jobs(monkeypatch, [{"job_id": "j", "state": "running", "algorithm": 1, "app_attempt": 0, "tasks": tasks}],
          _write_tis(["success", "running"], try_number=1))
    [state] = plugin.job_states("d", "r")
    assert state["task_states"][1]["status"] == "running"
    assert state["next_steps"] == ["Writing: 1 of 2 task(s) committed. The page refreshes by itself."]
    page = plugin.render("d", "r", [state], None, None, 0.01)
    assert "data-live='1'" in page and "fragment" in page
    assert plugin.render("d", "r", [state], None, None, 0.01, fragment=True).startswith("<div id='content'")


def test_the_plugin_is_registered_once_when_providers_load_eagerly():
    """Registered through the ``airflow.plugins`` entry point only: listed in the provider info as well, it was
    loaded twice wherever Airflow discovers providers eagerly, which logged "Plugin 'commit_status' already
    registered, skipping" and reported it as a plugin import error."""
    import os
    import subprocess
    import sys

    from ..conftest import REPO

    code = ("from airflow import plugins_manager\n"
            "plugins, errors = plugins_manager._get_plugins()\n"
            "print('LOADED', [p.name for p in plugins].count('commit_status'), 'ERRORS', sorted(errors))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False"})
    line = next((x for x in proc.stdout.splitlines() if x.startswith("LOADED")), proc.stdout + proc.stderr[-2000:])
    assert line.startswith("LOADED 1 ERRORS") and "commit_status" not in line, line
    assert "'commit_status' already registered" not in proc.stdout + proc.stderr
