"""The Commit status view's FastAPI app inside Airflow's api-server: the read model as typed JSON, and the React
app's bundle.

Every route needs Airflow's auth (plugin routes are anonymous by default): the run routes ``requires_access_dag
("GET")`` on the path's DAG, the bundle and ``/openapi.json`` a logged-in user. FastAPI's ``/docs`` and ``/redoc``
are not served: they load Swagger UI and ReDoc from a CDN, a blank page without internet.

A live page polls ``.../version`` (three aggregate queries and a few storage reads per stage, no task record, see
:func:`_storage_head`); the
summary and the task pages are built once per version and cut from a small cache, so paging a 1,000-task table
reads the storage once.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from airflow.api_fastapi.core_api.security import get_user, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import FileResponse

from ..operators.setup_context import REFUSED_KEY
from ..protocol import FileOutputCommitter
from ..protocol.audit.run import audit_status
from . import airflow_state
from .generations import run_generation
from .read_model import RunModel, StageModel
from .view_models import FilePage, RunStatus, TaskPage, TaskStatus, Version
from .task_order import TaskSort, sort_rows

log = logging.getLogger(__name__)

#: The built React app (``ui/``, built by Vite): shipped in the wheel as package data.
BUNDLE = Path(__file__).with_name("ui") / "dist" / "commit-status.js"
DAG_AUTH = [Depends(requires_access_dag("GET"))]
USER_AUTH = [Depends(get_user)]

app = FastAPI(title="Commit status", description="Commit protocol state of a DAG run's write stages",
              docs_url=None, redoc_url=None, openapi_url=None)


@app.get("/openapi.json", dependencies=USER_AUTH, include_in_schema=False)
def openapi_json() -> dict[str, Any]:
    return app.openapi()


@app.get("/static/commit-status.js", dependencies=USER_AUTH, include_in_schema=False)
def bundle() -> FileResponse:
    """The React app (a UMD module the UI imports); ``no-cache``: revalidated, so an upgrade shows at once."""
    if not BUNDLE.is_file():
        raise HTTPException(500, f"the Commit status bundle {BUNDLE.name} is missing from this installation")
    return FileResponse(BUNDLE, media_type="text/javascript", headers={"Cache-Control": "no-cache"})


# ------------------------------------------------------------------------------------------------ reading
def _committer(setup: dict[str, Any]) -> Any:
    """The stage's committer, rebuilt from its setup context."""
    from ..hooks.storage import CommitStorageHook
    from ..operators.setup_context import SetupContext

    ctx = SetupContext.from_xcom(setup)
    return CommitStorageHook(ctx.conn_id).make_committer(ctx.target, ctx.job_id, ctx.config())


def _stage_job(setup: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A stage's name and its job state read from its storage, as of the generation this run set up
    (:func:`~.generations.run_generation`; ``unreadable`` with the error instead of failing the page)."""
    from ..operators.setup_context import SetupContext

    ctx = None
    try:
        ctx = SetupContext.from_xcom(setup)
        committer = _committer(setup)
        job = run_generation(committer.status(), ctx.job_uuid, ctx.generation, committer.commit_log)
        if job.get("state") not in ("committed", "absent") and "audit" not in job:   # committed: _SUCCESS's
            job["audit"] = audit_status(committer.job, job.get("job_uuid"))
        return ctx.job_name or "", job
    except Exception as exc:
        return ((ctx.job_name if ctx else None) or "", {"state": "unreadable", "error": f"{type(exc).__name__}: {exc}",
                "job_id": ctx.job_id if ctx else setup.get("job_id"),
                "output": ctx.target if ctx else setup.get("target")})


def _storage_head(setup: dict[str, Any]) -> tuple[Any, ...]:
    """:func:`storage_head` of the stage's committer; ``unreadable`` with the error's type when it fails."""
    try:
        return storage_head(_committer(setup))
    except Exception as exc:
        return ("unreadable", type(exc).__name__)


def storage_head(c: FileOutputCommitter) -> tuple[Any, ...]:
    """A few reads that change when a stage's job changes state (set up, a task attempt claimed, failed or
    committed, a shard committed, committing, a commit failed, aborted, committed): the job record, one listing of
    the job's directory (the plan, the commit failure, the application attempts), one of the current application
    attempt's (its abort record), and the listings of its commit records and attempt claims. On S3: 3 requests
    plus one ListObjectsV2 per 1,000 task records and per 1,000 attempt traces (two per attempt there); a file's
    existence would cost two (HeadObject, then a listing for a directory of that name)."""
    job = c.job_record()
    if job is None:
        committed = c.commit_log()
        return ("log", committed.job_uuid if committed else None)
    names = sorted(c.store.list_dir(c.layout.job_dir))
    current = c.job.current_app_attempts(job, names)[0]
    aborted = c.layout.abort_record(current, job.job_uuid).rsplit("/", 1)[-1] in c.store.list_dir(
        c.layout.app_dir(current))
    return ("job", job.job_uuid, current, _digest(names), aborted,
            _digest(c.store.list_dir(c.layout.commits_dir(current))),
            _digest(c.store.list_dir(c.layout.attempts_dir(current))))


def _digest(names: list[str]) -> str:
    """A short fingerprint of a listing (its names only: a record is created once, never rewritten in place)."""
    return hashlib.sha1("\n".join(sorted(names)).encode()).hexdigest()[:12]


def version_of(dag_id: str, run_id: str) -> Version:
    """The run's version (Airflow's fingerprint of the run and each stage's storage head) and whether it is live
    (it has write stages and is queued or running), without reading any task's records. A run (or DAG) that does
    not exist is a 404."""
    finger = airflow_state.run_fingerprint(dag_id, run_id)
    if finger.run is None:
        raise HTTPException(404, airflow_state.missing_run(dag_id, run_id))
    has_stages, setups = SETUPS.get(dag_id, run_id, finger.xcoms)
    heads = [(k, _storage_head(v)) for k, v in sorted(setups.items())]
    return Version(version=hashlib.sha1(repr((finger, heads)).encode()).hexdigest()[:16],
                   live=has_stages and finger.active)


class SetupCache:
    """The setup contexts of the last few runs (and whether the run has setup tasks at all), by the run's XCom
    fingerprint: a version check deserializes them only when an XCom of the run changed."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._values: OrderedDict[tuple[str, str], tuple[Any, bool, dict[str, dict[str, Any]]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, dag_id: str, run_id: str, xcoms: Any) -> tuple[bool, dict[str, dict[str, Any]]]:
        key = (dag_id, run_id)
        with self._lock:
            hit = self._values.get(key)
            if hit is not None and hit[0] == xcoms:
                return hit[1], hit[2]
        ids = airflow_state.setup_task_ids(dag_id, run_id)
        setups = airflow_state.setup_contexts(dag_id, run_id, ids)
        with self._lock:
            self._values[key] = (xcoms, bool(ids), setups)
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return bool(ids), setups


SETUPS = SetupCache()


def build_model(dag_id: str, run_id: str, version: str) -> RunModel:
    """Read the run: Airflow's task instances and XComs, and each stage's storage."""
    snapshot = airflow_state.run_snapshot(dag_id, run_id)
    setups = airflow_state.setup_contexts(dag_id, run_id, snapshot.setup_task_ids)
    commit_ids = {sid: f"{sid.rsplit('.', 1)[0]}.commit" if "." in sid else "commit" for sid in setups}
    summaries = airflow_state.return_values(dag_id, run_id, commit_ids.values())
    refused = airflow_state.return_values(dag_id, run_id, set(snapshot.setup_task_ids) - set(setups), REFUSED_KEY)
    stages = [StageModel(sid, sid.rsplit(".", 1)[0] if "." in sid else sid, refused_job(refused[sid]), snapshot, None)
              for sid in sorted(refused) if isinstance(refused[sid], dict)]
    for setup_task_id in sorted(setups):
        name, job = _stage_job(setups[setup_task_id])
        summary = summaries.get(commit_ids[setup_task_id])
        stages.append(StageModel(setup_task_id, name or setup_task_id, job, snapshot,
                                 summary if isinstance(summary, dict) else None,
                                 setups[setup_task_id].get("conn_id")))
    return RunModel(dag_id, run_id, version, snapshot, sorted(stages, key=lambda s: s.summary.setup_task_id))


def refused_job(refusal: dict[str, Any]) -> dict[str, Any]:
    """A stage whose setup was refused for good, as the read model takes a job: no job, the setup's error."""
    return {"state": "refused", "error": f"{refusal.get('error')}: {refusal.get('message')}"}


class ModelCache:
    """The last few runs' models, by ``(dag_id, run_id, version)``: a page's summary and task pages of one version
    read the storage once, whatever the number of open tabs. One build per run at a time: while a run's model is
    being built (a 1,000-task stage on S3 reads 1,000 records), requests get the run's latest model instead of
    starting another build, and the page catches up at its next version check."""

    def __init__(self, size: int = 16, build: Callable[[str, str, str], RunModel] | None = None,
                 version: Callable[[str, str], str] | None = None) -> None:
        """*build* and *version* read the run (default: :func:`build_model`, :func:`version_of`)."""
        self.size = size
        self.build = build or build_model
        self.version = version or (lambda dag_id, run_id: version_of(dag_id, run_id).version)
        self._models: OrderedDict[tuple[str, str, str], RunModel] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[tuple[str, str], threading.Lock] = {}

    def _cached(self, key: tuple[str, str, str]) -> RunModel | None:
        model = self._models.get(key)
        if model is not None:
            self._models.move_to_end(key)
        return model

    def _latest(self, dag_id: str, run_id: str) -> RunModel | None:
        return next((m for (d, r, _), m in reversed(self._models.items()) if (d, r) == (dag_id, run_id)), None)

    def get(self, dag_id: str, run_id: str, version: str | None = None) -> RunModel:
        """The model at *version* if it is still cached (a page's next request), else at the current version (or,
        while another request builds that, the run's latest model)."""
        with self._lock:
            model = self._cached((dag_id, run_id, version)) if version is not None else None
        if model is not None:
            return model
        current = self.version(dag_id, run_id)
        key = (dag_id, run_id, current)
        with self._lock:
            model = self._cached(key)
            if model is not None:
                return model
            building = self._building.setdefault((dag_id, run_id), threading.Lock())
            latest = self._latest(dag_id, run_id)
        if not building.acquire(blocking=latest is None):
            return latest  # type: ignore[return-value]  # acquire fails only when there is a latest model
        try:
            with self._lock:
                model = self._cached(key)
            if model is None:
                model = self.build(dag_id, run_id, current)
                with self._lock:
                    self._models[key] = model
                    while len(self._models) > self.size:
                        self._models.popitem(last=False)
            return model
        finally:
            building.release()


CACHE = ModelCache()


def _stage(model: RunModel, setup_task_id: str) -> StageModel:
    stage = model.stages.get(setup_task_id)
    if stage is None:
        raise HTTPException(404, f"no write stage with setup task {setup_task_id!r} in this run (stages: "
                                 f"{', '.join(model.stages) or 'none'})")
    return stage


# ------------------------------------------------------------------------------------------------ routes
@app.get("/api/dags/{dag_id}/runs/{run_id}", dependencies=DAG_AUTH)
def run_status(dag_id: str, run_id: str) -> RunStatus:
    """The run's summary: every write stage's state, counts per task status, progress, job commit stages."""
    return CACHE.get(dag_id, run_id).summary


@app.get("/api/dags/{dag_id}/runs/{run_id}/version", dependencies=DAG_AUTH)
def run_version(dag_id: str, run_id: str) -> Version:
    """The cheap check a live page polls; the summary is fetched again only when ``version`` changed."""
    return version_of(dag_id, run_id)


@app.get("/api/dags/{dag_id}/runs/{run_id}/stages/{setup_task_id}/tasks", dependencies=DAG_AUTH)
def stage_tasks(dag_id: str, run_id: str, setup_task_id: str, status: TaskStatus | None = None,
                task: int | None = None, map_index: int | None = None, offset: int = Query(0, ge=0),
                limit: int = Query(50, ge=1, le=500), version: str | None = None, sort: TaskSort | None = None,
                desc: bool = False) -> TaskPage:
    """One page of a stage's task table, filtered by status (and to one task number with ``task``, to the
    shards of one write task instance with ``map_index``), sorted by ``sort`` (``desc``: descending)."""
    model = CACHE.get(dag_id, run_id, version)
    return _stage(model, setup_task_id).page(model.summary.version, status, offset, limit, task, map_index,
                                             order=partial(sort_rows, sort=sort, descending=desc))


@app.get("/api/dags/{dag_id}/runs/{run_id}/stages/{setup_task_id}/files", dependencies=DAG_AUTH)
def stage_files(dag_id: str, run_id: str, setup_task_id: str, offset: int = Query(0, ge=0),
                limit: int = Query(50, ge=1, le=500), version: str | None = None) -> FilePage:
    """One page of the files a committed stage published."""
    model = CACHE.get(dag_id, run_id, version)
    return _stage(model, setup_task_id).file_page(model.summary.version, offset, limit)
