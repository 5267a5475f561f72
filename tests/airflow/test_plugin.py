"""The commit-status plugin without a deployment: every route behind Airflow's auth (FastAPI's CDN docs pages not
served), the React app registered on the DAG-run and task-instance pages, its bundle built from this source, and
the read model built from real jobs in real storage (the protocol's records) and Airflow's task instances: the
attempt that committed a recovered task, next steps, paging a 1,000-task stage, the job commit's stages, and when a
page stops polling. The real browser checks are in ``tests/deployment/test_ui.py``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from airflow_commit_provider.plugins import app as plugin_app
from airflow_commit_provider.plugins import commit_status as plugin
from airflow_commit_provider.plugins.airflow_state import RunSnapshot, TaskInstanceRow
from airflow_commit_provider.plugins.read_model import RunModel, StageModel
from airflow_commit_provider.protocol import FileOutputCommitter, JobIncomplete, read_success_marker, run_task_attempt

from ..protocol import scenario as sc

UI = Path(plugin.__file__).with_name("ui")


@pytest.fixture
def client():
    return TestClient(plugin_app.app)


@pytest.mark.parametrize("path", ["/openapi.json", "/static/commit-status.js", "/api/dags/d/runs/r",
                                  "/api/dags/d/runs/r/version", "/api/dags/d/runs/r/stages/stage.setup/tasks",
                                  "/api/dags/d/runs/r/stages/stage.setup/files"])
def test_every_route_needs_airflow_auth(client, path):
    assert client.get(path).status_code == 401, path


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_no_docs_page_that_needs_a_cdn(client, path):
    """FastAPI's docs pages load Swagger UI and ReDoc from a CDN: blank without internet; they are not served."""
    assert client.get(path).status_code == 404


def test_react_app_on_run_and_task_instance_pages_with_an_absolute_bundle_url():
    apps = {a["destination"]: a for a in plugin.CommitStatusPlugin.react_apps}
    assert set(apps) == {"dag_run", "task_instance"}
    assert apps["dag_run"]["url_route"] == "commit-status" and apps["task_instance"]["url_route"] == "commit-status-ti"
    # Airflow 3.1 imports bundle_url as it is (3.3 resolves it against the page's base): absolute, under base_url
    assert apps["dag_run"]["bundle_url"].startswith("/commit-status/static/commit-status.js?v=")
    assert not getattr(plugin.CommitStatusPlugin, "external_views", []), "the iframe page is gone"
    assert plugin_app.BUNDLE.is_file() and plugin_app.BUNDLE.stat().st_size > 100_000


def test_bundle_url_follows_the_base_url_path(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://proxy.example/airflow/")
    assert plugin.bundle_url().startswith("/airflow/commit-status/static/commit-status.js?v=")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_shipped_bundle_is_what_this_source_builds(tmp_path):
    """The wheel ships ``ui/dist/commit-status.js`` (installing needs no node); this rebuilds it from ``ui/`` with
    the locked dependencies (``npm ci``, then ``npm run build``: type check and Vite) and compares the bytes, so
    a source change without its build, or a build nobody can reproduce, fails here."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is not installed: the Commit status bundle cannot be rebuilt from source (install node and "
                    "npm: apt-get install -y nodejs npm)")
    work = tmp_path / "ui"
    shutil.copytree(UI, work, ignore=shutil.ignore_patterns("node_modules", "dist"))
    for cmd in ([npm, "ci", "--no-audit", "--no-fund"], [npm, "run", "build"]):
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=800)
        assert proc.returncode == 0, f"{cmd}: {proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    built = (work / "dist" / "commit-status.js").read_bytes()
    assert built == plugin_app.BUNDLE.read_bytes(), (
        "ui/dist/commit-status.js is not what ui/ builds: run `npm ci && npm run build` in "
        "airflow_commit_provider/plugins/ui and commit the result")


# ------------------------------------------------------------------------------------------------ the read model
def _committer(root, **kw):
    kw.setdefault("mode", "append")
    kw.setdefault("partition_by", ["day"])
    return FileOutputCommitter(str(root), "job", **kw)


def _produce(task, attempt):
    return lambda w: w.write(sc.task_table(task, attempt))


def test_the_plugin_is_registered_once_when_providers_load_eagerly():
    """Registered through the ``airflow.plugins`` entry point only: listed in the provider info as well, it was
    loaded twice wherever Airflow discovers providers eagerly, which logged "Plugin 'commit_status' already
    registered, skipping" and reported it as a plugin import error."""
    import os
    import subprocess
    import sys

    from ..conftest import REPO

    code = ("from airflow import plugins_manager as pm\n"
            "if hasattr(pm, '_get_plugins'):\n"          # Airflow 3.3
            "    plugins, errors = pm._get_plugins()\n"
            "else:\n"                                     # 3.1, 3.2
            "    pm.ensure_plugins_loaded()\n"
            "    plugins, errors = pm.plugins, pm.import_errors\n"
            "print('LOADED', [p.name for p in plugins].count('commit_status'), 'ERRORS', sorted(errors))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False"})
    line = next((x for x in proc.stdout.splitlines() if x.startswith("LOADED")), proc.stdout + proc.stderr[-2000:])
    assert line.startswith("LOADED 1 ERRORS") and "commit_status" not in line, line
    assert "'commit_status' already registered" not in proc.stdout + proc.stderr


def _writes(states, try_number=1):
    return tuple(TaskInstanceRow("stage.write", n, s, try_number, "CommitWriteOperator") for n, s in enumerate(states))


def _stage(c, tis=(), summary=None, run_state="running"):
    return StageModel("stage.setup", "stage", c.status(), RunSnapshot(run_state, tuple(tis)), summary)


def test_recovered_task_names_the_attempt_that_committed(tmp_path):
    """Task 0 committed as try 1 in application attempt 0, adopted by attempts 1 and 2; task 1 committed as try 2
    in application attempt 1, adopted by 2. The view showed "2.1" and "2.2" (the adopter's application attempt with
    the original try);
    the JSON, the view and ``_SUCCESS`` now say "0.1" and "1.2"."""
    c = _committer(tmp_path / "out")
    c.setup_job()
    run_task_attempt(c, 0, 1, _produce(0, 1))
    assert c.setup_job().app_attempt == 1
    assert run_task_attempt(c, 0, 2, _produce(0, 2)).status == "recovered"
    run_task_attempt(c, 1, 2, _produce(1, 2))
    assert c.setup_job().app_attempt == 2
    for task in (0, 1):  # the write tasks of the cleared run: recovered, their code not called
        assert run_task_attempt(c, task, 3, _produce(task, 3)).status == "recovered"
    rows = {r.task: r for r in _stage(c, _writes(["success", "success"], 3)).rows}
    assert (rows[0].status, rows[0].committed_attempt) == ("recovered", "0.1")
    assert (rows[1].status, rows[1].committed_attempt) == ("recovered", "1.2")
    assert "attempt 0.1 committed in application attempt 0" in rows[0].why
    c.commit_job(2)
    manifest = read_success_marker(str(tmp_path / "out"), verify_files=True)
    assert {t["task"]: t["committed_attempt"] for t in manifest["tasks"]} == {0: "0.1", 1: "1.2"}
    committed = {r.task: r for r in _stage(c, _writes(["success", "success"], 3), run_state="success").rows}
    assert committed[0].committed_attempt == "0.1" and committed[1].committed_attempt == "1.2"
    assert committed[0].rows == sc.ROWS and committed[0].files >= 1 and committed[0].bytes > 0


def test_failed_v1_stage_says_what_a_clear_does(tmp_path):
    c = _committer(tmp_path / "out")
    c.setup_job()
    for t in (0, 1, 3):
        run_task_attempt(c, t, 1, _produce(t, 1))
    for attempt in (1, 2):
        with pytest.raises(RuntimeError):
            run_task_attempt(c, 2, attempt, lambda w: (_ for _ in ()).throw(RuntimeError("user code failed")))
    c.abort_job(keep_committed=True)
    stage = _stage(c, _writes(["success", "success", "failed", "success"], 2), run_state="failed")
    assert stage.summary.state == "failed"
    assert stage.summary.next_steps == [
        "Clear the DAG run (or the stage's setup task with its downstream tasks): setup opens application attempt "
        "1; tasks 0, 1 and 3 will be recovered (your code is not called), task 2 will run."]
    assert {r.task: r.status for r in stage.rows} == {0: "kept", 1: "kept", 2: "failed", 3: "kept"}
    assert stage.rows[2].failed_attempts == ["0.1", "0.2"]
    assert stage.summary.aborted is not None and stage.summary.aborted.kept_tasks == [0, 1, 3]
    assert stage.summary.counts == {"kept": 3, "failed": 1}


def test_1000_tasks_filtered_and_paged(tmp_path):
    c = _committer(tmp_path / "out", partition_by=[])
    c.setup_job()
    for t in range(1000):
        ta = c.setup_task(t, 1)
        if t < 600:
            run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1).drop_columns(["day"])))
        del ta
    stage = _stage(c, _writes(["success"] * 600 + ["running"] * 400))
    s = stage.summary
    assert (s.tasks_total, s.tasks_done, s.counts) == (1000, 600, {"committed": 600, "running": 400})
    page = stage.page("v", None, 0, 50, None)
    assert (page.total, len(page.items), page.items[0].task) == (1000, 50, 0)
    running = stage.page("v", "running", 50, 50, None)
    assert (running.total, running.items[0].task, running.items[-1].task) == (400, 650, 699)
    assert stage.page("v", None, 0, 50, 777).items[0].unfinished_attempts == ["0.1"]
    assert stage.page("v", None, 0, 10_000, None).limit == 500  # never the whole stage in one response
    assert len(s.model_dump_json()) < 5_000  # the summary does not grow with the tasks


def test_job_commit_stages_include_markers_and_cleanup(tmp_path):
    """``_SUCCESS`` holds the stages up to its own writing; the commit task's summary (XCom) adds the markers and
    the cleanup after ``_SUCCESS``, which the view left out."""
    c = _committer(tmp_path / "out")
    c.setup_job()
    run_task_attempt(c, 0, 1, _produce(0, 1))
    summary = c.commit_job(1)
    assert "markers" not in read_success_marker(str(tmp_path / "out"))["durations"]
    names = [t.name for t in _stage(c, _writes(["success"]), summary, "success").summary.timeline]
    assert names[-2:] == ["markers", "cleanup_after_success"] and names[0] == "recovery"
    other = {**summary, "job_uuid": "another generation"}
    assert "markers" not in [t.name for t in _stage(c, _writes(["success"]), other, "success").summary.timeline]


def test_live_only_while_the_run_can_change(tmp_path):
    c = _committer(tmp_path / "out")
    c.setup_job()
    setup = TaskInstanceRow("stage.setup", -1, "success", 1, "CommitSetupOperator")
    stage = _stage(c)
    assert RunModel("d", "r", "v", RunSnapshot("running", (setup,)), [stage]).live is True
    # a finished run's stage left "running" (no teardown ran) is not polled forever
    assert stage.summary.state == "running"
    assert RunModel("d", "r", "v", RunSnapshot("failed", (setup,)), [stage]).live is False
    plain = RunModel("d", "r", "v", RunSnapshot("running", (TaskInstanceRow("t", -1, "running", 1, "Python"),)), [])
    assert (plain.summary.has_stages, plain.live) == (False, False)
    waiting = RunModel("d", "r", "v", RunSnapshot("queued", (setup,)), [])
    assert (waiting.summary.has_stages, waiting.live) == (True, True)


def test_one_model_build_per_run_at_a_time(tmp_path):
    """While a run's model is being built (slow on S3: one read per task record), another request gets the run's
    latest model instead of starting a second build; with no model yet it waits for the one being built."""
    import threading

    from airflow_commit_provider.plugins.app import ModelCache

    versions = iter(["v1", "v2", "v2", "v3"])
    started, release = threading.Event(), threading.Event()
    builds = []

    def build(dag_id, run_id, version):
        builds.append(version)
        if version == "v2":
            started.set()
            assert release.wait(60), "never released"
        return RunModel(dag_id, run_id, version, RunSnapshot("running", ()), [])

    cache = ModelCache(build=build, version=lambda d, r: next(versions))
    assert cache.get("d", "r").summary.version == "v1"
    slow = {}
    worker = threading.Thread(target=lambda: slow.setdefault("model", cache.get("d", "r")))
    worker.start()
    assert started.wait(60)
    assert cache.get("d", "r").summary.version == "v1"       # v2 is being built: the latest model, no 2nd build
    release.set()
    worker.join(60)
    assert slow["model"].summary.version == "v2"
    assert cache.get("d", "r", "v2").summary.version == "v2"   # a page's follow-up request: cached, no version read
    assert cache.get("d", "r").summary.version == "v3"
    assert builds == ["v1", "v2", "v3"]


def test_the_view_shows_the_shards_of_each_task_instance(tmp_path):
    """Three shards per task instance: every task row names its task instance and shard (task = map index x 3 +
    shard); a task instance whose try failed after two shards committed shows those committed and the third
    failed; its page lists its three shards."""
    from airflow_commit_provider.operators.shards import ShardsFailed, run_shards

    c = _committer(tmp_path / "out", labels={"shards_per_task": 3})
    c.setup_job()

    def produce(shard, task, writer):
        if task == 5:
            raise RuntimeError("shard 2 of task instance 1 fails")
        writer.write(sc.task_table(task, 1))

    run_shards(lambda: c, 0, 3, 1, produce, threads=1)
    with pytest.raises(ShardsFailed):
        run_shards(lambda: c, 1, 3, 1, produce, threads=1)
    stage = _stage(c, _writes(["success", "failed"]), run_state="failed")
    assert stage.summary.shards_per_task == 3 and stage.summary.tasks_total == 6
    assert [(r.task, r.map_index, r.shard, r.status) for r in stage.rows] == [
        (0, 0, 0, "committed"), (1, 0, 1, "committed"), (2, 0, 2, "committed"),
        (3, 1, 0, "committed"), (4, 1, 1, "committed"), (5, 1, 2, "failed")]
    assert "no attempt of this shard committed" in stage.rows[5].why
    # the advice names the task instance to clear too: Airflow's grid shows map indexes, not shard numbers
    assert stage.summary.next_steps[0].startswith("Task 5 (write task instance [1]) failed with no try left"), \
        stage.summary.next_steps
    mine = stage.page("v", None, 0, 50, None, map_index=1)
    assert [r.task for r in mine.items] == [3, 4, 5]
    plain = _committer(tmp_path / "plain")
    plain.setup_job()
    unsharded = _stage(plain)
    assert unsharded.summary.shards_per_task == 1


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_stage_shows_the_version_its_commit_produced(tmp_path, fmt):
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[fmt])
    from airflow_commit_provider.protocol.tables import table_target

    table = table_target(fmt, str(tmp_path / "events"), table_name="ns.events" if fmt == "iceberg" else None)
    c = FileOutputCommitter(table.data_root, "job", mode="append", partition_by=["day"], table=table)
    for generation in (0, 1):   # the run, then a clear after success: the view names the newest version
        c.setup_job()
        run_task_attempt(c, 0, 1, _produce(0, 1))
        assert _stage(c, _writes(["success"])).summary.table is None   # not committed yet: no version to show
        c.commit_job(1)
        shown = _stage(c, _writes(["success"]), run_state="success").summary.table
        if fmt == "delta":
            assert shown == f"delta {tmp_path / 'events'} version {generation}"
        else:   # the snapshot the table's own reader has as current
            current = table.catalog.load_table("ns.events").current_snapshot().snapshot_id
            assert shown == f"iceberg ns.events snapshot {current}"


def test_a_failed_job_commit_shows_its_stage_and_error(tmp_path):
    """A job commit that fails leaves its summary beside the job's records; the view names the stage and the error
    until a commit succeeds (issue 21)."""
    c = _committer(tmp_path / "out")
    c.setup_job()
    run_task_attempt(c, 0, 1, _produce(0, 1))
    with pytest.raises(JobIncomplete):
        c.commit_job(2)
    failure = _stage(c, _writes(["success", "failed"])).summary.commit_failure
    assert failure is not None and failure.stage == "recovery" and failure.error == "JobIncomplete"
    assert "1 of 2 expected task(s)" in failure.message
    run_task_attempt(c, 1, 1, _produce(1, 1))
    c.commit_job(2)
    assert _stage(c, _writes(["success", "success"]), run_state="success").summary.commit_failure is None


def test_a_generation_replaced_while_the_next_one_writes_is_shown_as_committed_and_a_purged_one_as_purged(tmp_path):
    """The rule of ``plugins/generations.py`` at each state of the next generation: while it is being written
    (its job record current) and once it committed, the replaced generation is its own commit log summary,
    ``committed``, with no task rows; a generation no record keeps (the job purged since) is ``purged``. Both say
    what replaced them; while the next generation writes, that the target still holds this one's rows (it said
    "the target holds that run's rows now" of a run that then failed: seen in a deployment)."""
    from airflow_commit_provider.plugins.generations import run_generation

    c = _committer(tmp_path / "out")
    first = c.setup_job()
    run_task_attempt(c, 0, 1, _produce(0, 1))
    c.commit_job(1)
    second = c.setup_job()   # a clear after success, or the key's next run: generation 1, writing
    assert second.generation == 1 and second.job_uuid != first.job_uuid

    def seen(job_uuid: str, generation: int, state: str = "running") -> StageModel:
        job = run_generation(c.status(), job_uuid, generation, c.commit_log)
        return StageModel("stage.setup", "stage", job, RunSnapshot(state, _writes(["success"])), None)

    for step in ("writing", "committed"):
        if step == "committed":
            run_task_attempt(c, 0, 1, _produce(0, 1))
            c.commit_job(1)
        old = seen(first.job_uuid, 0, "success").summary
        assert (old.state, old.job_uuid, old.generation, old.replaced_by) == ("committed", first.job_uuid, 0,
                                                                             "generation 1"), step
        assert old.totals is not None and old.totals.rows == sc.ROWS and old.tasks_total == 0, step
        if step == "writing":
            assert "has started the job's next generation (running). Until that one commits, the target holds " \
                   "this run's rows" in old.next_steps[0], old.next_steps
        else:
            assert "replaced by generation 1 (the same job_key): the target holds that run's rows now" in \
                old.next_steps[0], old.next_steps
        assert seen(second.job_uuid, 1).summary.replaced_by is None, "the current generation is shown as it is"
    gone = seen("no-such-generation", 0, "success").summary
    assert (gone.state, gone.replaced_by, gone.tasks_total) == ("purged", "generation 1", 0)
    assert "was purged" in gone.next_steps[0]


@pytest.mark.parametrize("fmt", [None, "delta", "iceberg"])
def test_every_stage_the_protocol_times_is_one_the_view_lists(tmp_path, fmt):
    """The stage names have one home (:mod:`~airflow_commit_provider.protocol.jobcommit.names`): every stage
    class takes its name from it, every duration a real commit records (a table's ``table_commit`` included: 179
    of 297 ms of an Iceberg commit, once missing from the timeline) is a stage the API lists, and the timeline
    shows them all, in the listed order."""
    from airflow_commit_provider.protocol.jobcommit import names, stage, stages, table as table_stage

    assert stages and table_stage  # imported: their Stage subclasses are defined
    # the job commit's stages (the audit reuses the recovery under a name of its own: not a commit stage)
    classes = {cls.name for cls in _subclasses(stage.Stage) if cls.__module__.startswith(stage.__package__)}
    assert classes == set(names.COMMIT_STAGES), classes ^ set(names.COMMIT_STAGES)
    table = None
    if fmt is not None:
        pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[fmt])
        from airflow_commit_provider.protocol.tables import table_target

        table = table_target(fmt, str(tmp_path / "events"), table_name="ns.events" if fmt == "iceberg" else None)
    c = FileOutputCommitter(table.data_root if table else str(tmp_path / "out"), "job", mode="append",
                            partition_by=["day"], table=table)
    c.setup_job()
    run_task_attempt(c, 0, 1, _produce(0, 1))
    summary = c.commit_job(1)
    timed = set(summary["durations"]) - {"total", "client_start"}
    assert timed <= set(names.COMMIT_STAGES), timed - set(names.COMMIT_STAGES)
    assert (names.TABLE_COMMIT in timed) == (fmt is not None)
    model = RunModel("d", "r", "v", RunSnapshot("success", ()), [_stage(c, _writes(["success"]), summary, "success")])
    listed = [s.name for s in model.summary.commit_stages]
    assert listed == list(names.COMMIT_STAGES) and all(s.help for s in model.summary.commit_stages)
    shown = [t.name for t in model.summary.stages[0].timeline]
    assert shown == [n for n in listed if n in timed]


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_tasks_sorted_by_every_column_blanks_last_ties_in_task_order(tmp_path):
    """The server sorts the whole stage before it cuts a page: the largest tasks of the stage are on the first
    page sorted by rows, not the largest of the page shown; a task without the value (nothing committed, a task
    instance that has not run) comes last whichever the direction."""
    from functools import partial

    from airflow_commit_provider.plugins.task_order import SORT_KEYS, sort_rows

    c = _committer(tmp_path / "out", partition_by=[])
    c.setup_job()
    sizes = {t: (t * 37) % 11 + 1 for t in range(120) if t % 3}   # tasks 0, 3, 6, ...: nothing committed
    for t, n in sizes.items():
        run_task_attempt(c, t, 1, lambda w, t=t, n=n: w.write(sc.task_table(t, 1).drop_columns(["day"]).slice(0, n)))
    tis = tuple(TaskInstanceRow("stage.write", t, "success" if t in sizes else "running", 1, "CommitWriteOperator",
                                float(t % 7) if t in sizes else None) for t in range(120))
    stage = _stage(c, tis)

    def page(sort, desc=False, offset=0, status=None):
        return stage.page("v", status, offset, 50, None, order=partial(sort_rows, sort=sort, descending=desc))

    top = page("rows", desc=True).items
    assert [r.rows for r in top] == sorted((r.rows for r in stage.rows if r.committed_attempt), reverse=True)[:50]
    assert [r.task for r in top if r.rows == top[0].rows] == sorted(r.task for r in top if r.rows == top[0].rows)
    for sort in SORT_KEYS:
        for desc in (False, True):
            every = page(sort, desc).total
            rows = [r for off in range(0, every, 50) for r in page(sort, desc, off).items]
            assert sorted(r.task for r in rows) == list(range(120)), (sort, desc)
            key = SORT_KEYS[sort]
            values = [key(r) for r in rows]
            have = [v for v in values if v is not None]
            assert have == sorted(have, reverse=desc), (sort, desc)
            assert all(v is None for v in values[len(have):]), f"{sort}: a blank before a value"
    assert [r.task for r in page("bytes").items[:3]] != [0, 1, 2]
    assert page("duration", desc=True).items[0].duration == 6.0
    starting = page("status", status="running")   # a try running that has not set up an attempt yet
    assert (starting.total, {r.status for r in starting.items}) == (40, {"running"})
    with pytest.raises(ValueError, match="no task order 'size': the orders are task, status"):
        sort_rows(stage.rows, "size")
