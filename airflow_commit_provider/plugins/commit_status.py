"""The commit-status view: a FastAPI app inside Airflow's api-server, shown as a tab on DAG-run and task-instance
pages. It reads the job state from the storage itself (job record, task commit records, attempt claims, abort
record, commit log / ``_SUCCESS``), found through the setup tasks' XCom of the run, and the run's task instances
from Airflow's database (to say what a clear or a retry would do).

The page is part of Airflow's UI: the tab embeds it in a same-origin iframe, so it reads the UI's colour mode (the
``dark`` class next-themes puts on the parent page), takes the page's font and text colour, draws on a transparent
background, follows a theme switch without a reload, and refreshes itself while a stage runs or commits.

Plugin routes are anonymous by default in Airflow 3; every route here, FastAPI's ``/docs``, ``/redoc`` and
``/openapi.json`` included, depends on ``requires_access_dag("GET")``: anonymous requests get 401.
"""

from __future__ import annotations

import html
import logging
import time
from typing import Any

from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

from ..links.commit_status import URL_PREFIX, CommitStatusLink, CommitTargetLink
from ..operators.setup_context import SETUP_MARKER, SetupContext, setup_xcom  # noqa: F401 (SETUP_MARKER: kept)

log = logging.getLogger(__name__)

#: States in which the page keeps refreshing itself.
LIVE_STATES = ("running", "committing", "absent")
REFRESH_SECONDS = 3

AUTH = [Depends(requires_access_dag("GET"))]
app = FastAPI(title="Commit status", description="Commit protocol state of a DAG run's write stages",
              docs_url=None, redoc_url=None, openapi_url=None)


@app.get("/openapi.json", dependencies=AUTH, include_in_schema=False)
def openapi_json() -> dict[str, Any]:
    return app.openapi()


@app.get("/docs", dependencies=AUTH, include_in_schema=False)
def docs() -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="openapi.json", title="Commit status API")  # relative: any base_url


@app.get("/redoc", dependencies=AUTH, include_in_schema=False)
def redoc() -> HTMLResponse:
    return get_redoc_html(openapi_url="openapi.json", title="Commit status API")


# ---------------------------------------------------------------------------------------------------- read model
def _setup_contexts(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The setup contexts the run's setup tasks published (one per write stage), as XCom dicts with the setup task's
    id added (``setup_task_id``); :meth:`SetupContext.from_xcom` reads each."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    out = []
    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                               XComModel.key == "return_value").all()
        for row in rows:
            setup = setup_xcom(XComModel.deserialize_value(row))
            if setup is not None:
                out.append({**setup, "setup_task_id": row.task_id})
    return sorted(out, key=lambda v: v["setup_task_id"])


def _task_instances(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every task instance of the run: task id, map index, state, try number."""
    try:
        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(TI.task_id, TI.map_index, TI.state, TI.try_number).filter(
                TI.dag_id == dag_id, TI.run_id == run_id).all()
        return [{"task_id": r[0], "map_index": r[1], "state": None if r[2] is None else str(getattr(r[2], "value",
                                                                                                    r[2])),
                 "try_number": r[3]} for r in rows]
    except Exception as exc:  # the view still shows the storage's truth without Airflow's task states
        log.warning("commit status: could not read the task instances of %s/%s: %s", dag_id, run_id, exc)
        return []


def _stage_tis(setup_task_id: str, tis: list[dict[str, Any]]) -> dict[str, Any]:
    """The stage's task instances, by role, for a stage built by ``commit_stage`` (``<group>.setup`` ...)."""
    group = setup_task_id.rsplit(".", 1)[0] if "." in setup_task_id else ""
    prefix = f"{group}." if group else ""
    by_role: dict[str, Any] = {"writes": {}}
    for ti in tis:
        if ti["task_id"] == f"{prefix}write":
            by_role["writes"][max(ti["map_index"], 0)] = ti
            by_role["write_task_id"] = ti["task_id"]
        elif ti["task_id"] in (f"{prefix}commit", f"{prefix}abort", f"{prefix}setup"):
            by_role[ti["task_id"].rsplit(".", 1)[-1]] = ti
    return by_role


def _stage_state(value: dict[str, Any]) -> tuple[SetupContext | None, dict[str, Any]]:
    """A stage's setup context (``None`` if this version cannot read it) and its job state, read from its storage;
    state ``unreadable``, with the error, instead of failing the page."""
    from ..hooks.storage import CommitStorageHook
    from ..protocol import make_committer

    ctx = None
    try:
        ctx = SetupContext.from_xcom(value)
        store = CommitStorageHook(ctx.conn_id).get_store(ctx.target)
        committer = make_committer(store, ctx.job_id, algorithm=ctx.algorithm_value, mode=ctx.mode,
                                   partition_by=ctx.partition_by)
        return ctx, committer.status()
    except Exception as exc:
        return ctx, {"state": "unreadable", "error": f"{type(exc).__name__}: {exc}",
                     "output": ctx.target if ctx else value.get("target")}


def job_states(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Each write stage's job state, read from its storage, with what Airflow says of its task instances and the
    next steps (``next_steps``) a user can take."""
    jobs = []
    tis = None
    for value in _setup_contexts(dag_id, run_id):
        setup_task_id = value["setup_task_id"]
        ctx, state = _stage_state(value)
        if tis is None:
            tis = _task_instances(dag_id, run_id)
        job = {"stage": (ctx.job_name if ctx else None) or setup_task_id, "setup_task_id": setup_task_id,
               "job_id": ctx.job_id if ctx else value.get("job_id"), **state}
        job["airflow"] = _stage_tis(setup_task_id, tis)
        job["task_states"] = task_states(job)
        job["next_steps"] = next_steps(job)
        jobs.append(job)
    return jobs


def _attempt_label(name: str) -> str:
    """``"0.2"`` (application attempt 0, Airflow try 2) as a person reads it."""
    app_attempt, _, try_number = str(name).partition(".")
    return f"try {try_number} (app. attempt {app_attempt})" if try_number else str(name)


def _tries(names: list[str]) -> set[int]:
    return {int(n.split(".", 1)[1]) for n in names if "." in str(n) and n.split(".", 1)[1].isdigit()}


def task_states(job: dict[str, Any]) -> dict[int, dict[str, str]]:
    """Per task number: a short status and its explanation, from the storage and the Airflow task instance."""
    writes = job.get("airflow", {}).get("writes", {})
    kept = set((job.get("aborted") or {}).get("kept_committed_tasks") or [])
    v2 = str(job.get("algorithm")) == "2"
    out: dict[int, dict[str, str]] = {}
    tasks = {t["task"]: t for t in job.get("tasks") or []}
    for n in sorted(set(tasks) | set(writes)):
        t = tasks.get(n, {})
        ti = writes.get(n) or {}
        ti_state = ti.get("state")
        if t.get("attempt") is not None:
            if t.get("recovered_from_app") is not None:
                status, why = "recovered", (f"committed in application attempt {t['recovered_from_app']}; this "
                                            "attempt reused it without running your code")
            elif job.get("state") == "failed" and n in kept:
                status, why = "kept", ("committed; the failed run's teardown kept its files hidden under "
                                       "_temporary, so a clear of the run recovers it instead of running it again")
            else:
                status, why = "committed", f"try {t['attempt']} committed (its record is the decision)"
        elif v2 and job.get("state") == "failed" and ti_state == "success" and ti.get("try_number") in _tries(
                t.get("failed_attempts", [])):
            status, why = "withdrawn", ("committed at its task commit (v2: files visible at once), then withdrawn "
                                        "by the abort of the failed run: v2 cannot keep committed tasks")
        elif t.get("unfinished_attempts") and ti_state in ("running", "queued", "scheduled", "deferred",
                                                           "up_for_retry", "restarting", None):
            status, why = "running", "a try is set up and has no fate yet: it is writing"
        elif ti_state in ("failed", "upstream_failed"):
            status, why = "failed", "the Airflow task failed; no attempt of it committed"
        elif ti_state == "up_for_retry":
            status, why = "retrying", "a try failed; Airflow runs the next try, which fences the failed one first"
        elif t.get("unfinished_attempts"):
            status, why = "unfinished", ("set up with no fate: killed, or still running as a zombie; the next try "
                                         "or the teardown records it failed")
        elif t.get("failed_attempts") or t.get("denied_attempts"):
            status, why = "failed", "no attempt committed"
        else:
            status, why = "waiting", "not started yet"
        out[n] = {"status": status, "why": why}
    return out


def _numbers(ns: list[int]) -> str:
    ns = sorted(ns)
    if len(ns) == 1:
        return f"task {ns[0]}"
    return "tasks " + ", ".join(map(str, ns[:-1])) + f" and {ns[-1]}"


def next_steps(job: dict[str, Any]) -> list[str]:
    """What a clear or a retry would do now, in a sentence or two."""
    state = job.get("state")
    states = job.get("task_states") or {}
    af = job.get("airflow") or {}
    v2 = str(job.get("algorithm")) == "2"
    app = job.get("app_attempt")
    done = [n for n, s in states.items() if s["status"] in ("committed", "recovered", "kept")]
    todo = [n for n in states if n not in done]
    if state == "committed":
        return ["Nothing to do: the data is published and _SUCCESS is written. Clearing this run recomputes the "
                "stage as a new generation whose commit replaces this job's files (never duplicates them)."]
    if state == "committing":
        commit = af.get("commit") or {}
        steps = ["The job commit has started (its plan is fixed) and rolls forward only: the teardown will not "
                 "abort it."]
        if commit.get("state") in ("failed", "upstream_failed", "up_for_retry"):
            steps.append("Retry or clear the commit task: it resumes the commit from its plan; no write runs again.")
        return steps
    if state == "failed":
        if v2:
            removed = (job.get("aborted") or {}).get("visible_files_removed")
            return [f"The failed run's teardown removed this job's visible files ({removed}); v2 cannot keep "
                    f"committed tasks. Clear the DAG run: setup opens application attempt {(app or 0) + 1} and "
                    f"every task runs again."]
        if done and todo:
            return [f"Clear the DAG run (or the stage's setup task with its downstream tasks): setup opens "
                    f"application attempt {(app or 0) + 1}; {_numbers(done)} will be recovered (your code is not "
                    f"called), {_numbers(todo)} will run."]
        return [f"Clear the DAG run: setup opens application attempt {(app or 0) + 1} and "
                f"{'every task runs again' if not done else 'every task is recovered; only the commit runs'}."]
    if state == "running":
        failed = [n for n, s in states.items() if s["status"] == "failed"]
        retrying = [n for n, s in states.items() if s["status"] == "retrying"]
        steps = []
        if retrying:
            steps.append(f"Airflow retries {_numbers(retrying)} by itself: the next try first records the failed "
                         f"one failed, then writes and commits in application attempt {app}.")
        if failed:
            keep = f"; {_numbers(done)} stay committed and are not run again" if done else ""
            steps.append(f"{_numbers(failed).capitalize()} failed. \"Clear only failed tasks\" re-runs "
                         f"{'it' if len(failed) == 1 else 'them'} in application attempt {app}{keep}; once the "
                         f"teardown has run, clear the whole run instead (committed tasks are recovered).")
        if not steps:
            total = len(states)
            steps.append(f"Writing: {len(done)} of {total} task(s) committed. The page refreshes by itself."
                         if total else "Writing. The page refreshes by itself.")
        return steps
    if state == "unreadable":
        return ["The storage could not be read from the api-server: check the connection and that the api-server "
                "has this package and the storage's credentials."]
    return []


# ---------------------------------------------------------------------------------------------------- routes
@app.get("/api/dags/{dag_id}/runs/{run_id}", dependencies=AUTH)
def status_json(dag_id: str, run_id: str) -> dict[str, Any]:
    """The commit state of every write stage of a DAG run, as JSON."""
    return {"dag_id": dag_id, "run_id": run_id, "jobs": job_states(dag_id, run_id)}


def _map_index(value: str | None) -> int | None:
    """The tab's ``map_index``: the UI leaves ``{MAP_INDEX}`` literal on an unmapped task instance."""
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


@app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse, dependencies=AUTH)
def status_page(dag_id: str, run_id: str, task_id: str | None = None, map_index: str | None = None,
                fragment: bool = False) -> str:
    """The commit state of a DAG run, as a page (the DAG-run and task-instance tabs embed it); ``fragment=1``
    returns only the content, for the page's own refresh."""
    if task_id is not None and "{" in task_id:
        task_id = None
    t0 = time.monotonic()
    jobs = job_states(dag_id, run_id)
    return render(dag_id, run_id, jobs, task_id, _map_index(map_index), time.monotonic() - t0, fragment=fragment)


# ---------------------------------------------------------------------------------------------------- rendering
TERMS = {
    "state": "running: tasks are writing; committing: the job commit has fixed its plan and is publishing; "
             "committed: published, _SUCCESS written; failed: the run failed and its teardown cleaned up; "
             "absent: nothing under the target yet.",
    "job id": "dag id + run id + stage name: the same for every try and every clear of this DAG run.",
    "job uuid": "one per generation; files are named with it.",
    "generation": "0 for the first setup of this job; +1 when a run that already committed is cleared and "
                  "recomputed (its commit replaces the previous generation's files).",
    "application attempt": "one run of the stage's setup task: 0 first, +1 on every setup retry or clear of the "
                           "DAG run. Committed tasks of an earlier attempt are recovered, not run again.",
    "committer": "which commit protocol wrote the stage.",
    "algorithm": "1: files are published at job commit (nothing visible before). 2: each task's files are visible "
                 "at its task commit. magic (S3): multipart uploads completed at job commit.",
    "mode": "error: the target must be empty; append: add files; overwrite: replace everything at job commit; "
            "dynamic: replace only the partitions written.",
    "target": "where the data lands.",
    "attempt id": "A.T = application attempt A, Airflow try T. 0.2 is try 2 of the task in the first application "
                  "attempt.",
    "committed attempt": "the try whose files are the task's output (its commit record decided it).",
    "recovered from": "the application attempt in which the task committed; this attempt reused that commit.",
    "failed attempts": "tries recorded failed: they raised, were aborted, or were fenced by a later try or the "
                       "teardown (e.g. killed with SIGKILL). Their files were removed; they can never commit.",
    "denied attempts": "tries that asked to commit after another try of the task had won: their files were "
                       "removed.",
    "unfinished attempts": "tries set up with no fate yet: still running, or killed and not yet seen by a later "
                           "try or the teardown.",
    "files": "data files of the task's committed attempt.",
}
STAGE_TERMS = {
    "recovery": "reading every expected task's commit record (recovering earlier application attempts' tasks)",
    "plan": "fixing the commit plan: the moves and deletions, written before the first move",
    "moves": "publishing the files (renames, S3 copies, or completing multipart uploads)",
    "deletes": "removing the old files the mode replaces",
    "commit_log": "writing the commit log _commits/<job>.json",
    "markers": "writing _SUCCESS (and each partition's in dynamic mode)",
    "cleanup_after_success": "deleting _temporary/<job> after _SUCCESS",
    "client_start": "starting the storage client (S3), not part of any stage",
    "total": "from the first stage to _SUCCESS",
}
STATUS_TERMS = {"committed": "ok", "recovered": "ok", "kept": "ok", "withdrawn": "warn", "running": "live",
                "retrying": "live", "failed": "bad", "unfinished": "warn", "waiting": "muted"}


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _when(iso: Any) -> str:
    """An ISO timestamp as ``2026-01-01 12:00:00 UTC``."""
    text = str(iso or "")
    try:
        from datetime import datetime, timezone

        return datetime.fromisoformat(text).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return text or "—"


def _term(label: str, key: str | None = None) -> str:
    text = TERMS.get(key or label)
    e = html.escape
    return f"<abbr title='{e(text)}'>{e(label)}</abbr>" if text else e(label)


def _cell(value: Any) -> str:
    return "<span class='muted'>—</span>" if value in (None, "", []) else html.escape(str(value))


def _attempts(names: list[str] | None) -> str:
    if not names:
        return "<span class='muted'>—</span>"
    return ", ".join(f"<span class='aid' title='{html.escape(_attempt_label(n))}'>{html.escape(str(n))}</span>"
                     for n in names)


def _render_job(job: dict[str, Any], task_id: str | None, map_index: int | None) -> str:
    e = html.escape
    state = job.get("state", "?")
    totals = job.get("totals") or {}
    parts = [f"<section class='job' data-job-id='{e(job['job_id'])}' data-state='{e(state)}'>",
             f"<h2>{e(str(job['stage']))} <span class='badge s-{e(state)}' data-testid='state' "
             f"title='{e(TERMS['state'])}'>{e(state)}</span></h2>"]
    steps = job.get("next_steps") or []
    if steps:
        parts.append("<div class='next' data-testid='next-steps'><b>What to do</b><ul>"
                     + "".join(f"<li>{e(s)}</li>" for s in steps) + "</ul></div>")
    if job.get("error"):
        parts.append(f"<p class='warn'>{e(job['error'])}</p>")
    if str(job.get("algorithm")) == "2":
        parts.append("<p class='warn' data-testid='v2-warning'>Algorithm v2: each task's files became visible at its "
                     "task commit; readers during the job could see partial output.</p>")
    aborted = job.get("aborted")
    if aborted:
        kept = aborted.get("kept_committed_tasks") or []
        removed = aborted.get("visible_files_removed") or 0
        what = (f"kept {_numbers(kept)} (committed, hidden under _temporary, for recovery)" if kept
                else "kept no task")
        if removed:
            what += (f"; removed {removed} visible file{'s' if removed != 1 else ''} (v2 tasks were visible: a v2 "
                     "job cannot keep them)")
        parts.append(f"<p class='abort' data-testid='abort'>The failed run's teardown ran at "
                     f"{e(_when(aborted.get('at')))}: {e(what)}. Uncommitted attempts were recorded failed and their "
                     "files removed.</p>")
    facts = [("job id", job.get("job_id")), ("job uuid", job.get("job_uuid")), ("generation", job.get("generation")),
             ("application attempt", job.get("app_attempt")), ("committer", job.get("committer")),
             ("algorithm", job.get("algorithm")), ("mode", job.get("mode")), ("target", job.get("output"))]
    parts.append("<dl>" + "".join(f"<dt>{_term(k)}</dt><dd data-field='{e(k.replace(' ', '_'))}'>{e(str(v))}</dd>"
                                  for k, v in facts if v not in (None, "")) + "</dl>")
    states = job.get("task_states") or {}
    if state in ("running", "committing") and states:
        done = sum(1 for s in states.values() if s["status"] in ("committed", "recovered", "kept"))
        pct = 100 * done // max(len(states), 1)
        parts.append(f"<div class='progress' data-testid='progress' title='task commits'><div style='width:{pct}%'>"
                     f"</div></div><p class='muted'>{done} of {len(states)} task(s) committed"
                     f"{'; publishing' if state == 'committing' else ''}</p>")
    if totals:
        parts.append("<div class='totals'>" + "".join(
            f"<div><b data-testid='total-{k}'>{_cell(v) if k != 'bytes' else _fmt_bytes(v)}</b><span>{k}</span></div>"
            for k, v in totals.items()) + "</div>")
    durations = job.get("durations") or {}
    if durations:
        parts.append("<h3>Job commit stages</h3><table><tr>" + "".join(
            f"<th><abbr title='{e(STAGE_TERMS.get(k, k))}'>{e(k)}</abbr></th>" for k in durations)
            + "</tr><tr>" + "".join(f"<td>{v:.3f} s</td>" for v in durations.values()) + "</tr></table>")
    tasks = {t["task"]: t for t in job.get("tasks") or []}
    if tasks or states:
        parts.append("<h3>Tasks</h3><table class='tasks'><tr><th>task</th><th>status</th>"
                     f"<th>{_term('committed attempt')}</th><th>{_term('recovered from')}</th>"
                     f"<th>{_term('files')}</th><th>{_term('failed attempts')}</th><th>{_term('denied attempts')}</th>"
                     f"<th>{_term('unfinished attempts')}</th></tr>")
        for n in sorted(set(tasks) | set(states)):
            t = tasks.get(n, {})
            st = states.get(n, {"status": "?", "why": ""})
            mine = task_id is not None and map_index is not None and n == max(map_index, 0)
            aid = f"{t.get('app_attempt')}.{t.get('attempt')}"
            committed = (f"<span class='aid' title='{e(_attempt_label(aid))}'>{e(aid)}</span>"
                         if t.get("attempt") is not None else _cell(None))
            recovered = (f"application attempt {t['recovered_from_app']}" if t.get("recovered_from_app") is not None
                         else _cell(None))
            parts.append(
                f"<tr{' class=mine' if mine else ''} data-task='{n}'><td>{n}</td>"
                f"<td><span class='pill {STATUS_TERMS.get(st['status'], 'muted')}' title='{e(st['why'])}' "
                f"data-testid='task-status'>{e(st['status'])}</span></td>"
                f"<td>{committed}</td><td>{recovered}</td>"
                f"<td>{_cell(t.get('files') if t.get('attempt') is not None else None)}</td>"
                f"<td>{_attempts(t.get('failed_attempts'))}</td><td>{_attempts(t.get('denied_attempts'))}</td>"
                f"<td>{_attempts(t.get('unfinished_attempts'))}</td></tr>")
        parts.append("</table>")
    files = job.get("files") or []
    if files and isinstance(files[0], dict):
        shown = files[:200]
        parts.append(f"<details class='files'><summary>Files ({len(files)})</summary><table>"
                     + "".join(f"<tr><td>{e(str(f.get('path')))}</td><td>{_fmt_bytes(f.get('size'))}</td></tr>"
                               for f in shown)
                     + ("<tr><td colspan=2 class='muted'>…</td></tr>" if len(files) > len(shown) else "")
                     + "</table></details>")
    parts.append("</section>")
    return "".join(parts)


def _glossary() -> str:
    e = html.escape
    rows = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in TERMS.items())
    stages = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in STAGE_TERMS.items())
    return (f"<details class='glossary' data-testid='glossary'><summary>What the terms mean</summary><dl>{rows}</dl>"
            f"<h3>Job commit stages</h3><dl>{stages}</dl></details>")


def render_content(dag_id: str, run_id: str, jobs: list[dict[str, Any]], task_id: str | None,
                   map_index: int | None, took: float) -> str:
    e = html.escape
    live = not jobs or any(j.get("state") in LIVE_STATES for j in jobs)
    parts = [f"<div id='content' data-live='{'1' if live else '0'}'>"
             f"<p class='sub'>{e(dag_id)} &middot; {e(run_id)}</p>"]
    if not jobs:
        parts.append("<p data-testid='no-jobs'>No commit stage of this run has run its setup task yet.</p>")
    parts += [_render_job(job, task_id, map_index) for job in jobs]
    parts.append(_glossary())
    parts.append(f"<p class='sub'>read from storage in {took * 1000:.0f} ms"
                 f"{f'; refreshes every {REFRESH_SECONDS} s while a stage runs' if live else ''}</p></div>")
    return "".join(parts)


STYLE = """
:root{color-scheme:light;--fg:#18181b;--muted:#71717a;--line:#e4e4e7;--ok:#15803d;--bad:#b91c1c;--warn:#a16207;
--live:#1d4ed8;--mine:rgba(250,204,21,.18);--panel:rgba(0,0,0,.03)}
:root.dark{color-scheme:dark;--fg:#f4f4f5;--muted:#a1a1aa;--line:#3f3f46;--ok:#4ade80;--bad:#f87171;--warn:#facc15;
--live:#60a5fa;--mine:rgba(250,204,21,.14);--panel:rgba(255,255,255,.04)}
html,body{background:transparent}
body{font-family:var(--font,system-ui,sans-serif);margin:12px 16px;color:var(--fg);font-size:14px}
h1{margin:0;font-size:20px}h2{font-size:17px;margin:8px 0}h3{font-size:14px;margin:14px 0 4px}
.sub,.muted{color:var(--muted)}abbr{text-decoration:underline dotted;cursor:help}
.badge{border:1px solid currentColor;border-radius:6px;padding:1px 8px;font-size:12px;vertical-align:middle}
.s-committed{color:var(--ok)}.s-failed,.s-unreadable{color:var(--bad)}.s-committing{color:var(--warn)}
.s-running{color:var(--live)}.s-absent{color:var(--muted)}
.pill{border-radius:10px;padding:0 8px;font-size:12px;border:1px solid currentColor;cursor:help}
.ok{color:var(--ok)}.bad{color:var(--bad)}.warn{color:var(--warn)}.live{color:var(--live)}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}dt{color:var(--muted)}dd{margin:0}
.totals{display:flex;gap:24px;margin:12px 0}.totals div{display:flex;flex-direction:column}
.totals b{font-size:150%}.totals span{color:var(--muted)}table{border-collapse:collapse;margin:6px 0}
td,th{border:1px solid var(--line);padding:3px 8px;text-align:left}th{font-weight:600}
tr.mine{background:var(--mine)}.job{border-top:1px solid var(--line);padding-top:8px;margin-top:8px}
.next{background:var(--panel);border-left:3px solid var(--live);padding:6px 10px;margin:8px 0}
.next ul{margin:4px 0;padding-left:18px}.abort{color:var(--warn)}
.progress{height:6px;background:var(--line);border-radius:3px;max-width:420px;overflow:hidden}
.progress div{height:100%;background:var(--live)}.aid{cursor:help;border-bottom:1px dotted var(--muted)}
details{margin:8px 0}summary{cursor:pointer;color:var(--muted)}.glossary dd{max-width:900px}
"""

SCRIPT = """
(function(){
  var root=document.documentElement;
  function theme(){
    var dark=null, parentDoc=null;
    try{ if(window.parent!==window){ parentDoc=window.parent.document; } }catch(e){ parentDoc=null; }
    if(parentDoc){
      var h=parentDoc.documentElement;
      if(h.classList.contains('dark')) dark=true; else if(h.classList.contains('light')) dark=false;
      try{ var cs=getComputedStyle(parentDoc.body); root.style.setProperty('--font', cs.fontFamily); }catch(e){}
    }
    var q=new URLSearchParams(location.search).get('theme');
    if(dark===null && (q==='dark'||q==='light')) dark=(q==='dark');
    if(dark===null){
      try{ var t=localStorage.getItem('theme'); if(t==='dark'||t==='light') dark=(t==='dark'); }catch(e){}
    }
    if(dark===null) dark=window.matchMedia('(prefers-color-scheme: dark)').matches;
    root.classList.toggle('dark', dark); root.classList.toggle('light', !dark);
    return parentDoc;
  }
  var parentDoc=theme();
  if(parentDoc){
    new MutationObserver(theme).observe(parentDoc.documentElement,
                                        {attributes:true, attributeFilter:['class','style']});
  }
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', theme);
  function refresh(){
    var c=document.getElementById('content');
    if(!c || c.getAttribute('data-live')!=='1') return;
    var u=new URL(location.href); u.searchParams.set('fragment','1');
    fetch(u.toString(),{credentials:'same-origin'}).then(function(r){ return r.ok ? r.text() : null; })
      .then(function(t){
        if(!t) return;
        var open=[].map.call(document.querySelectorAll('details[open]'), function(d){ return d.className; });
        c.outerHTML=t;
        open.forEach(function(n){ var d=document.querySelector('details.'+(n||'x')); if(d) d.open=true; });
      })
      .catch(function(){}).finally(function(){ setTimeout(refresh, REFRESH_MS); });
  }
  setTimeout(refresh, REFRESH_MS);
})();
"""


def render(dag_id: str, run_id: str, jobs: list[dict[str, Any]], task_id: str | None, map_index: int | None,
           took: float, *, fragment: bool = False) -> str:
    content = render_content(dag_id, run_id, jobs, task_id, map_index, took)
    if fragment:
        return content
    script = SCRIPT.replace("REFRESH_MS", str(REFRESH_SECONDS * 1000))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Commit status</title><style>{STYLE}</style>"
            f"<script>{_EARLY}</script></head><body><h1>Commit status</h1>{content}<script>{script}</script>"
            "</body></html>")


# set the colour mode before the first paint (no white flash in dark mode)
_EARLY = ("try{var h=window.parent.document.documentElement;if(h.classList.contains('dark'))"
          "document.documentElement.classList.add('dark');}catch(e){}")


class CommitStatusPlugin(AirflowPlugin):
    """Registers the view (DAG-run and task-instance tabs) and the operators' extra links.

    ``href``s are relative (no leading slash): the UI resolves them against its base URL, so the tabs work
    behind a reverse proxy or with ``[api] base_url`` under a path."""

    name = "commit_status"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Commit status"}]
    external_views = [
        {"name": "Commit status", "href": f"{URL_PREFIX.lstrip('/')}/dags/{{DAG_ID}}/runs/{{RUN_ID}}",
         "destination": "dag_run", "url_route": "commit-status"},
        {"name": "Commit status", "href": f"{URL_PREFIX.lstrip('/')}/dags/{{DAG_ID}}/runs/{{RUN_ID}}"
         f"?task_id={{TASK_ID}}&map_index={{MAP_INDEX}}", "destination": "task_instance",
         "url_route": "commit-status-ti"},
    ]
    operator_extra_links = [CommitStatusLink(), CommitTargetLink()]
