"""A real Airflow deployment for the tests: api-server, scheduler, dag-processor and triggerer, started on
127.0.0.1 with LocalExecutor and PostgreSQL (:mod:`.postgres`; ``--skip-serve-logs``, so nothing listens beyond
loopback), driven only through the REST API with a token from Airflow's own SimpleAuthManager."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from ..conftest import DAGS_FOLDER, SESSION_DIR
from ..support import free_port
from .postgres import Postgres

HOME = SESSION_DIR / "deploy-home"
ROOT = SESSION_DIR / "deploy-outputs"
WORK = SESSION_DIR / "deploy-work"
PG = SESSION_DIR / "deploy-pg"
#: seconds one REST call may take: generous, as CI runs two xdist workers on 2 cores (both maybe driving a
#: deployment) on a machine that may be loaded; a bound on waiting for an answer, never a pause
REST_TIMEOUT = 120


class Deployment:
    def __init__(self, port: int, env: dict[str, str], pg: Postgres) -> None:
        self.port = port
        self.pg = pg
        self.env = env
        self.base = f"http://127.0.0.1:{port}"
        self.procs: list[subprocess.Popen] = []
        self.session = requests.Session()
        self.root, self.work = ROOT, WORK

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.pg.start()
        airflow = str(Path(sys.executable).with_name("airflow"))
        subprocess.run([airflow, "db", "migrate"], env=self.env, check=True, capture_output=True)
        commands = {
            "api-server": [airflow, "api-server", "-H", "127.0.0.1", "-p", str(self.port)],
            "scheduler": [airflow, "scheduler", "--skip-serve-logs"],
            "dag-processor": [airflow, "dag-processor"],
            "triggerer": [airflow, "triggerer", "--skip-serve-logs"],
        }
        for name, cmd in commands.items():
            log = open(HOME / f"{name}.log", "w")
            self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))
        self._wait_healthy()
        self._login()

    def stop(self) -> None:
        """Every component's process group and PostgreSQL gone, within seconds and deaf to Ctrl-C: on a Ctrl-C under
        xdist, a worker gets a second SIGINT from execnet 5 s into its teardown and is killed 10 s in; either would
        leave the rest of a slower or interruptible stop running."""
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            for p in self.procs:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            self.pg.stop()
            deadline = time.time() + 5
            for p in self.procs:
                try:
                    p.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    pass
                try:  # whatever the leader did, no child (api-server workers, executor workers) outlives the suite
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)

    def _wait_healthy(self, timeout: float = 600) -> None:  # a bound for a loaded machine
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[1]} exited with {p.returncode}; see {HOME}")
            try:
                health = requests.get(f"{self.base}/api/v2/monitor/health", timeout=REST_TIMEOUT).json()
                last = health
                if all(health.get(k, {}).get("status") == "healthy"
                       for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                    return
            except (requests.RequestException, ValueError):
                pass
            time.sleep(2)
        raise RuntimeError(f"deployment not healthy after {timeout} s: {last}")

    def _login(self) -> None:
        passwords = json.loads((HOME / "simple_auth_manager_passwords.json.generated").read_text())
        token = requests.post(f"{self.base}/auth/token", json={"username": "admin", "password": passwords["admin"]},
                              timeout=REST_TIMEOUT).json()["access_token"]
        self.session.headers["Authorization"] = f"Bearer {token}"

    # ---------------------------------------------------------------- REST helpers
    def api(self, method: str, path: str, **kw) -> dict:
        resp = self.session.request(method, f"{self.base}/api/v2{path}", timeout=REST_TIMEOUT, **kw)
        assert resp.status_code < 300, f"{method} {path}: {resp.status_code} {resp.text}"
        return resp.json() if resp.content else {}

    def wait_dag(self, dag_id: str, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            resp = self.session.get(f"{self.base}/api/v2/dags/{dag_id}", timeout=REST_TIMEOUT)
            if resp.status_code == 200:
                if resp.json().get("is_paused"):
                    self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
                return
            time.sleep(2)
        raise RuntimeError(f"DAG {dag_id} never appeared")

    def trigger(self, dag_id: str, run_id: str) -> None:
        self.wait_dag(dag_id)
        self.api("POST", f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None})

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def wait_run(self, dag_id: str, run_id: str, states=("success", "failed"), timeout: float = 300) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in states:
                return state
            time.sleep(1)
        raise TimeoutError(f"{dag_id}/{run_id} still {state} after {timeout} s: {self.ti_states(dag_id, run_id)}")

    def ti_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {f"{t['task_id']}[{t['map_index']}]": t["state"] for t in tis}

    def wait_ti(self, dag_id: str, run_id: str, key: str, state: str, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ti_states(dag_id, run_id).get(key) == state:
                return
            time.sleep(1)
        raise TimeoutError(f"{key} never reached {state}: {self.ti_states(dag_id, run_id)}")

    def wait_for(self, condition, what: str, timeout: float = 300) -> None:
        """Poll *condition* (every 0.5 s) until it holds; a timeout is a failure, never a pass."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if condition():
                return
            time.sleep(0.5)
        raise TimeoutError(f"not reached after {timeout} s: {what}")

    def pause(self, dag_id: str, paused: bool) -> None:
        """Pause or unpause a DAG: the scheduler neither examines nor queues the tasks of a paused DAG's runs (a
        TI stays ``up_for_reschedule`` / ``scheduled``), but still processes its executor events."""
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": paused})
        assert self.api("GET", f"/dags/{dag_id}")["is_paused"] is paused

    def executor_event_processed(self, dag_id: str, run_id: str, task_id: str, ti_state: str) -> bool:
        """Whether the scheduler has processed ("TaskInstance Finished") the executor's event for a try of the
        task while the task instance was in *ti_state*: after that line the try's event can no longer race
        anything (apache/airflow#71172, #71580 are that event drained after the next try was queued)."""
        log = (HOME / "scheduler.log").read_text(errors="replace")
        head = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id}, "
        return any(head in line and f", state={ti_state}, " in line for line in log.splitlines())

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The task log of one try (the api-server reads the log files; nothing is served by the workers)."""
        resp = self.session.get(f"{self.base}/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/"
                                f"{try_number}", params={"full_content": "true"},
                                headers={"Accept": "application/json"}, timeout=REST_TIMEOUT)
        assert resp.status_code == 200, resp.text
        return json.dumps(resp.json())

    def openlineage_events(self) -> list[dict]:
        """Every OpenLineage event the deployment's components emitted (the file transport: one file each)."""
        return [json.loads(p.read_text()) for p in sorted((HOME / "openlineage").iterdir())]

    def clear(self, dag_id: str, run_id: str, only_failed: bool) -> None:
        self.api("POST", f"/dags/{dag_id}/clearTaskInstances",
                 json={"dag_run_id": run_id, "only_failed": only_failed, "dry_run": False, "reset_dag_runs": True})


def make_deployment(dags_folder: Path = DAGS_FOLDER, **env: str) -> Deployment:
    """A deployment (not started) on fresh directories, reading *dags_folder*, with *env* over the defaults (a
    benchmark raises ``AIRFLOW__CORE__PARALLELISM``)."""
    for d in (HOME, ROOT, WORK):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    (HOME / "openlineage").mkdir()
    shutil.rmtree(PG, ignore_errors=True)
    pg = Postgres(PG)
    port = free_port()
    defaults = {**os.environ,
                "AIRFLOW_HOME": str(HOME),
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg.url(),
                "AIRFLOW__API__EXPOSE_STACKTRACE": "True",  # a 500's body names its database error
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__API_AUTH__JWT_SECRET": "commit-provider-tests-only-" + os.urandom(8).hex(),
                "AIRFLOW__API__SECRET_KEY": "commit-provider-tests-only-" + os.urandom(8).hex(),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                # OpenLineage's file transport: one file per event (safe across the workers' processes)
                "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "append": False,
                                                               "log_file_path": str(HOME / "openlineage" / "event")}),
                "COMMIT_TEST_ROOT": str(ROOT),
                "COMMIT_TEST_WORK": str(WORK)}
    defaults.pop("COMMIT_PROVIDER_FAULTS", None)
    return Deployment(port, {**defaults, **env}, pg)


@pytest.fixture(scope="session")
def deployment():
    dep = make_deployment()
    try:
        dep.start()
        yield dep
    finally:
        dep.stop()
