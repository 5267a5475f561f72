"""The operators on Airflow's distributed engine: CeleryExecutor (Redis broker), PostgreSQL metadata database, two
Celery workers that share nothing but S3 (moto's server over HTTP, through the Airflow connection ``commit_s3``).

- mapped writes land on both workers (each try records its worker's name, TMPDIR and a file in its private
  scratch directory), magic committer; the commit-status view and the REST API on that deployment;
- a failed run (v1) is cleared after one worker is stopped: the tasks the stopped worker committed are recovered
  on the other worker, their code not run again;
- a worker SIGKILLed in the middle of a write: the scheduler fails the try when its heartbeats stop, the retry
  runs on the other worker and records the killed try failed; the data holds every row once;
- an Iceberg stage whose SQL catalog is a database of that PostgreSQL (warehouse on S3): the commit's worker is
  SIGKILLed right after the table transaction; the retry on the other worker adds nothing.

Nothing waits for a time: every step waits for an observable state (REST API, objects the tasks write in S3,
celery's "ready" line of a restarted worker); a timeout only fails. Run alone:
``.venv/bin/python -m pytest -m celery`` (about 4 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import SESSION_DIR
from ..protocol import scenario as sc
from ..support import forget_s3_clients
from .conftest import REST_TIMEOUT

pytestmark = [pytest.mark.celery, pytest.mark.timeout(900)]

TASKS, ROWS = 6, 10


@pytest.fixture(scope="module")
def celery_deployment():
    from .distributed import CeleryDeployment, start_deployment

    dep = start_deployment(lambda n: CeleryDeployment(SESSION_DIR / f"celery-{n}", workers=2, concurrency=2,
                                                      parallelism=8))
    try:
        yield dep
    finally:
        dep.stop()


def ctl(dep, dag_id: str, run_id: str) -> str:
    return f"{dep.bucket}/ctl/{dag_id}/{run_id}"


def records(dep, dag_id: str, run_id: str, kind: str) -> dict[tuple[int, int], dict]:
    """``{(map_index, try): record}`` of the tries (``tries``), callable calls (``calls``) or holds of a run."""
    fs, base = dep.s3(), f"{ctl(dep, dag_id, run_id)}/{kind}"
    if not fs.exists(base):
        return {}
    out = {}
    for path in fs.find(base):
        task, attempt = path.rsplit("/", 1)[1].removesuffix(".json").split("-")
        out[(int(task), int(attempt))] = json.loads(fs.cat_file(path))
    return out


def xcom(dep, dag_id: str, run_id: str, task_id: str) -> dict:
    value = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value")
    return value["value"] if isinstance(value["value"], dict) else json.loads(value["value"])


def check_output(dep, dag_id: str) -> dict:
    root = f"s3://{dep.bucket}/data/{dag_id}"
    with sc_env(dep):
        sc.assert_exactly_once(sc.read_rows(root), tasks=TASKS, per_task=ROWS, old=set())
        return read_success_marker(root, verify_files=True)


class sc_env:
    """The test process reads S3 like the workers do: credentials and endpoint from the environment."""

    def __init__(self, dep) -> None:
        self.env = dep.moto_env

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        forget_s3_clients()

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        forget_s3_clients()   # fsspec's cached client would outlive this deployment's moto server


def test_mapped_writes_land_on_both_workers_magic_status_view_and_rest(celery_deployment):
    dep, dag_id, run_id = celery_deployment, "cc_magic", "spread"
    dep.s3().pipe_file(f"{ctl(dep, dag_id, run_id)}/spread-0", b"")
    dep.trigger(dag_id, run_id)
    assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)

    calls = records(dep, dag_id, run_id, "calls")
    assert sorted(calls) == [(t, 1) for t in range(TASKS)], "every task ran once, on its first try"
    workers = {c["worker"] for c in calls.values()}
    assert workers == {"w1", "w2"}, f"the mapped writes ran on both workers: {calls}"
    for c in calls.values():  # each worker's TMPDIR and scratch are its own
        private = str(dep.worker_dir(c["worker"]))
        assert c["tmpdir"].startswith(private) and c["scratch"].startswith(private), c
        other = "w2" if c["worker"] == "w1" else "w1"
        assert not c["scratch"].startswith(str(dep.worker_dir(other)))

    manifest = check_output(dep, dag_id)
    assert manifest["totals"]["tasks"] == TASKS and manifest["totals"]["rows"] == TASKS * ROWS
    assert manifest["algorithm"] == "magic", manifest["algorithm"]

    # the commit-status view (plugin on the api-server, reading S3 through the connection) and the REST API
    status = dep.session.get(f"{dep.base}/commit-status/api/dags/{dag_id}/runs/{run_id}", timeout=REST_TIMEOUT)
    assert status.status_code == 200, status.text
    stage = status.json()["stages"][0]
    assert stage["state"] == "committed" and stage["totals"] == manifest["totals"]
    tasks = dep.session.get(f"{dep.base}/commit-status/api/dags/{dag_id}/runs/{run_id}/stages/"
                            f"{stage['setup_task_id']}/tasks", timeout=REST_TIMEOUT).json()
    assert tasks["total"] == TASKS and {t["status"] for t in tasks["items"]} == {"committed"}
    store = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/stage.write/state-store",
                    params={"map_index": 3})
    entries = {e["key"]: e["value"] for e in store["task_state_store"]}
    assert entries["commit"]["status"] == "committed" and entries["commit"]["committed_attempt"] == 1
    links = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/stage.commit/links")["extra_links"]
    assert "commit-status" in links["Commit status"] and f"dags/{dag_id}/runs/{run_id}" in links["Commit status"]
    summary = dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/stage.commit/xcomEntries/"
                             "return_value")["value"]
    summary = summary if isinstance(summary, dict) else json.loads(summary)
    assert {k: summary[k] for k in ("files", "rows", "bytes", "tasks")} == {
        k: manifest["totals"][k] for k in ("files", "rows", "bytes", "tasks")}, "the commit summary (CommitSummary)"
    abort = xcom(dep, dag_id, run_id, "stage.abort")
    assert abort["state"] == "committed" and abort["reason"] == "stage.commit succeeded in this run", abort


def test_failed_run_cleared_recovers_committed_tasks_on_the_other_worker_v1(celery_deployment):
    dep, dag_id, run_id = celery_deployment, "cc_v1", "clear"
    fs, base = dep.s3(), ctl(dep, dag_id, run_id)
    fs.pipe_file(f"{base}/spread-0", b"")
    fs.pipe_file(f"{base}/fail-{TASKS - 1}-always", b"")
    dep.trigger(dag_id, run_id)
    assert dep.wait_run(dag_id, run_id) == "failed"
    states = dep.ti_states(dag_id, run_id)
    assert states[f"stage.write[{TASKS - 1}]"] == "failed" and states["stage.abort[-1]"] == "success", states
    abort = xcom(dep, dag_id, run_id, "stage.abort")
    assert abort["aborted"] is True and "reason" not in abort, "the failed run's teardown looked at the storage"
    with sc_env(dep):
        assert sc.read_rows(f"s3://{dep.bucket}/data/{dag_id}") == [], "nothing of the failed run is visible"
    first = records(dep, dag_id, run_id, "calls")
    committed_by = {t: c["worker"] for (t, a), c in first.items() if t != TASKS - 1}
    assert set(committed_by.values()) == {"w1", "w2"}, first

    # w1 stops (warm shutdown: nothing of it runs); the clear runs everything on w2
    dep.kill_worker("w1", signal.SIGTERM)
    try:
        fs.rm(f"{base}/fail-{TASKS - 1}-always")
        dep.clear(dag_id, run_id, only_failed=False)  # setup runs again: application attempt 1
        assert dep.wait_run(dag_id, run_id) == "success", dep.ti_states(dag_id, run_id)
    finally:
        dep.restart_worker("w1")
    calls = records(dep, dag_id, run_id, "calls")
    assert sorted(calls) == sorted([*first, (TASKS - 1, 3)]), "committed tasks recovered, their code not re-run"
    tries = records(dep, dag_id, run_id, "tries")
    recovered_on = {t: r["worker"] for (t, a), r in tries.items() if r["clear_number"] == 1}
    assert set(recovered_on.values()) == {"w2"}
    assert {t for t, w in committed_by.items() if w == "w1"}, "w1 had committed tasks that w2 recovered"
    manifest = check_output(dep, dag_id)
    assert manifest["app_attempt"] == 1 and manifest["algorithm"] in (1, "v1")
    assert {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]} == {
        **{t: 0 for t in range(TASKS - 1)}, TASKS - 1: None}


def test_worker_sigkilled_mid_write_is_retried_on_the_other_worker(celery_deployment):
    dep, dag_id, run_id = celery_deployment, "cc_kill", "kill"
    fs, base = dep.s3(), ctl(dep, dag_id, run_id)
    fs.pipe_file(f"{base}/hold-2-1", b"")  # task 2's first try holds after half its rows
    dep.trigger(dag_id, run_id)
    dep.wait_for(lambda: (2, 1) in records(dep, dag_id, run_id, "holding"), "task 2 try 1 holding mid-write")
    victim = records(dep, dag_id, run_id, "holding")[(2, 1)]["worker"]
    survivor = "w2" if victim == "w1" else "w1"
    dep.kill_worker(victim, signal.SIGKILL)  # worker, pool, supervisor and task: gone at once
    try:
        assert dep.wait_run(dag_id, run_id, timeout=600) == "success", dep.ti_states(dag_id, run_id)
    finally:
        dep.restart_worker(victim)
    calls = records(dep, dag_id, run_id, "calls")
    assert (2, 2) in calls and calls[(2, 2)]["worker"] == survivor, calls
    assert dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/stage.write/2")["try_number"] == 2
    manifest = check_output(dep, dag_id)
    task2 = next(t for t in manifest["tasks"] if t["task"] == 2)
    assert task2["attempt"] == 2 and task2["failed_attempts"] == ["0.1"], task2
    tasks = dep.session.get(f"{dep.base}/commit-status/api/dags/{dag_id}/runs/{run_id}/stages/stage.setup/tasks",
                            timeout=REST_TIMEOUT).json()["items"]
    failed = {t["task"]: t["failed_attempts"] for t in tasks}
    assert failed[2] == ["0.1"], failed


def iceberg_catalog(dep):
    """The stage's Iceberg SQL catalog on the deployment's PostgreSQL (its own database), files on moto's S3."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("commit_provider", type="sql", uri=dep.iceberg_catalog_uri,
                        warehouse=f"s3://{dep.bucket}/warehouse", **{
                            "s3.endpoint": dep.s3_url, "s3.access-key-id": dep.moto_env["AWS_ACCESS_KEY_ID"],
                            "s3.secret-access-key": dep.moto_env["AWS_SECRET_ACCESS_KEY"], "s3.region": "us-east-1"})


def snapshots(catalog) -> list:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return list(catalog.load_table("celery.events").metadata.snapshots)
    except (NoSuchTableError, NoSuchNamespaceError):
        return []


def test_iceberg_catalog_on_postgresql_worker_killed_after_the_table_commit(celery_deployment):
    """An Iceberg stage whose SQL catalog is on the deployment's PostgreSQL: the commit's first try stops right
    after its table transaction and its worker is SIGKILLed there; the retry, on the other worker, finds the
    transaction in the table and adds nothing. The rows are there once."""
    pytest.importorskip("pyiceberg")
    dep, dag_id, run_id = celery_deployment, "cc_iceberg", "iceberg"
    fs, base = dep.s3(), ctl(dep, dag_id, run_id)
    fs.pipe_file(f"{base}/stop-commit-1", b"")
    catalog = iceberg_catalog(dep)
    dep.trigger(dag_id, run_id)
    dep.wait_for(lambda: len(snapshots(catalog)) == 1, "the first commit try's table transaction landed")
    victim = json.loads(fs.cat_file(f"{base}/commit/1.json"))["worker"]
    survivor = "w2" if victim == "w1" else "w1"
    dep.kill_worker(victim, signal.SIGKILL)   # the stopped try, its supervisor and its worker: gone at once
    try:
        assert dep.wait_run(dag_id, run_id, timeout=600) == "success", dep.ti_states(dag_id, run_id)
    finally:
        dep.restart_worker(victim)
    assert json.loads(fs.cat_file(f"{base}/commit/2.json"))["worker"] == survivor
    table = catalog.load_table("celery.events")
    assert len(table.metadata.snapshots) == 1, "the retry made a second snapshot"
    got = table.scan().to_arrow()
    pairs = sorted(zip(got["task"].to_pylist(), got["row"].to_pylist()))
    assert pairs == sorted((t, r) for t in range(TASKS) for r in range(ROWS)), "every row exactly once"
    summary = xcom(dep, dag_id, run_id, "stage.commit")
    assert summary["table"]["snapshot_id"] == table.current_snapshot().snapshot_id
    assert summary["table"]["already_committed"] is True, summary["table"]
    assert table.location().startswith(f"s3://{dep.bucket}/warehouse/")
