"""The commit-status view: a FastAPI app inside Airflow's api-server, shown as a tab on DAG-run and task-instance
pages. It reads the job state from the storage itself (job record, task commit records, attempt claims, commit
log / ``_SUCCESS``), found through the setup tasks' XCom of the run.

Plugin routes are anonymous by default in Airflow 3; every route here depends on ``requires_access_dag("GET")``,
so it needs an authenticated user (bearer token or the UI's session cookie) with read access to the DAG.
"""

from __future__ import annotations

import html
import json
import time
from typing import Any

from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

from ..links.commit_status import URL_PREFIX, CommitStatusLink, CommitTargetLink

SETUP_MARKER = "commit_provider_setup"

app = FastAPI(title="Commit status", description="Commit protocol state of a DAG run's write stages")


def _setup_contexts(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The job contexts the run's setup tasks published (one per write stage)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    out = []
    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                               XComModel.key == "return_value").all()
        for row in rows:
            value = XComModel.deserialize_value(row)
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    continue
            if isinstance(value, dict) and value.get(SETUP_MARKER):
                out.append({**value, "setup_task_id": row.task_id})
    return sorted(out, key=lambda v: v["setup_task_id"])


def job_states(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Each write stage's job state, read from its storage."""
    from ..hooks.storage import CommitStorageHook
    from ..protocol import make_committer

    jobs = []
    for ctx in _setup_contexts(dag_id, run_id):
        try:
            store = CommitStorageHook(ctx.get("conn_id")).get_store(ctx["target"])
            committer = make_committer(store, ctx["job_id"], algorithm=ctx["algorithm_value"], mode=ctx["mode"],
                                       partition_by=ctx.get("partition_by", []))
            state = committer.status()
        except Exception as exc:  # show what is wrong instead of failing the page
            state = {"state": "unreadable", "error": f"{type(exc).__name__}: {exc}", "output": ctx.get("target")}
        jobs.append({"stage": ctx.get("job_name") or ctx["setup_task_id"], "setup_task_id": ctx["setup_task_id"],
                     "job_id": ctx["job_id"], **state})
    return jobs


@app.get("/api/dags/{dag_id}/runs/{run_id}", dependencies=[Depends(requires_access_dag("GET"))])
def status_json(dag_id: str, run_id: str) -> dict[str, Any]:
    """The commit state of every write stage of a DAG run, as JSON."""
    return {"dag_id": dag_id, "run_id": run_id, "jobs": job_states(dag_id, run_id)}


@app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse,
         dependencies=[Depends(requires_access_dag("GET"))])
def status_page(dag_id: str, run_id: str, task_id: str | None = None, map_index: int | None = None) -> str:
    """The commit state of a DAG run, as a page (the DAG-run and task-instance tabs embed it)."""
    t0 = time.monotonic()
    jobs = job_states(dag_id, run_id)
    return render(dag_id, run_id, jobs, task_id, map_index, time.monotonic() - t0)


_STATE_COLOURS = {"committed": "#1e8449", "committing": "#b9770e", "running": "#2e86c1", "failed": "#c0392b",
                  "absent": "#7f8c8d", "unreadable": "#c0392b"}


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render(dag_id: str, run_id: str, jobs: list[dict[str, Any]], task_id: str | None, map_index: int | None,
           took: float) -> str:
    e = html.escape
    parts = [f"<h1>Commit status</h1><p class='sub'>{e(dag_id)} &middot; {e(run_id)}</p>"]
    if not jobs:
        parts.append("<p data-testid='no-jobs'>No commit stage of this run has run its setup task yet.</p>")
    for job in jobs:
        state = job.get("state", "?")
        totals = job.get("totals") or {}
        colour = _STATE_COLOURS.get(state, "#555")
        parts.append(f"<section class='job' data-job-id='{e(job['job_id'])}'>")
        parts.append(f"<h2>{e(str(job['stage']))} <span class='state' data-testid='state' "
                     f"style='background:{colour}'>{e(state)}</span></h2>")
        if job.get("error"):
            parts.append(f"<p class='warn'>{e(job['error'])}</p>")
        if str(job.get("algorithm")) == "2":
            parts.append("<p class='warn' data-testid='v2-warning'>Algorithm v2: each task's files became visible "
                         "at its task commit; readers during the job could see partial output.</p>")
        facts = [("job id", job.get("job_id")), ("job uuid", job.get("job_uuid")),
                 ("generation", job.get("generation")), ("application attempt", job.get("app_attempt")),
                 ("committer", job.get("committer")), ("algorithm", job.get("algorithm")), ("mode", job.get("mode")),
                 ("target", job.get("output"))]
        parts.append("<dl>" + "".join(f"<dt>{e(k)}</dt><dd data-field='{e(k.replace(' ', '_'))}'>{e(str(v))}</dd>"
                                      for k, v in facts if v is not None) + "</dl>")
        if totals:
            parts.append("<div class='totals'>" + "".join(
                f"<div><b data-testid='total-{k}'>{v if k != 'bytes' else _fmt_bytes(v)}</b><span>{k}</span></div>"
                for k, v in totals.items()) + "</div>")
        durations = job.get("durations") or {}
        if durations:
            parts.append("<h3>Job commit stages</h3><table><tr>" + "".join(f"<th>{e(k)}</th>" for k in durations)
                         + "</tr><tr>" + "".join(f"<td>{v:.3f} s</td>" for v in durations.values()) + "</tr></table>")
        tasks = job.get("tasks") or []
        if tasks:
            parts.append("<h3>Tasks</h3><table class='tasks'><tr><th>task</th><th>committed attempt</th>"
                         "<th>application attempt</th><th>recovered from</th><th>files</th><th>failed attempts</th>"
                         "<th>denied attempts</th></tr>")
            for t in tasks:
                mine = task_id is not None and map_index is not None and t["task"] == max(map_index, 0)
                parts.append(
                    f"<tr{' class=mine' if mine else ''} data-task='{t['task']}'><td>{t['task']}</td>"
                    f"<td>{e(str(t.get('attempt')))}</td><td>{e(str(t.get('app_attempt')))}</td>"
                    f"<td>{'' if t.get('recovered_from_app') is None else 'attempt ' + str(t['recovered_from_app'])}"
                    f"</td><td>{t.get('files', '')}</td><td>{', '.join(t.get('failed_attempts', []))}</td>"
                    f"<td>{', '.join(t.get('denied_attempts', []))}</td></tr>")
            parts.append("</table>")
        parts.append("</section>")
    parts.append(f"<p class='sub'>read from storage in {took * 1000:.0f} ms</p>")
    style = ("body{font-family:system-ui,sans-serif;margin:16px;color:#222}h1{margin:0}.sub{color:#777}"
             ".state{color:#fff;border-radius:4px;padding:2px 8px;font-size:70%;vertical-align:middle}"
             "dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}dt{color:#777}dd{margin:0}"
             ".totals{display:flex;gap:24px;margin:12px 0}.totals div{display:flex;flex-direction:column}"
             ".totals b{font-size:150%}.totals span{color:#777}table{border-collapse:collapse;margin:8px 0}"
             "td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}.warn{color:#b9770e}"
             "tr.mine{background:#fcf3cf}.job{border-top:1px solid #eee;padding-top:8px}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>Commit status</title><style>{style}</style>" \
           f"</head><body>{''.join(parts)}</body></html>"


class CommitStatusPlugin(AirflowPlugin):
    """Registers the view (DAG-run and task-instance tabs) and the operators' extra links."""

    name = "commit_status"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Commit status"}]
    external_views = [
        {"name": "Commit status", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}", "destination": "dag_run",
         "url_route": "commit-status"},
        {"name": "Commit status", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}?task_id={{TASK_ID}}"
         f"&map_index={{MAP_INDEX}}", "destination": "task_instance", "url_route": "commit-status-ti"},
    ]
    operator_extra_links = [CommitStatusLink(), CommitTargetLink()]
