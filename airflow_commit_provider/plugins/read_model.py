"""The Commit status view's read model: typed JSON the React app renders, built from the storage's job state
(``committer.status()``) and Airflow's task instances, and nothing else.

A run's model is built once per version (:mod:`.airflow_state` fingerprints the run cheaply): the summary (counts
per status, progress, the job commit's stages) goes to the page first; the task table is served from the same
model, filtered and paged, so a 1,000-task stage never travels whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..protocol.jobcommit.names import COMMIT_STAGES
from .advice import DONE, advise
from .airflow_state import RunSnapshot, TaskInstanceRow
from .audit_view import audit_view, blame_rows
from .view_models import (Abort, CommitFailure, CommitStageTime, FilePage, FileRow, RunStatus, Stage, TaskPage,
                          TaskRow, Totals)

#: Airflow task-instance states from which a try of the task can still follow (or is under way): a task in one of
#: them is never shown ``failed``, whatever its earlier tries left.
LIVE_TI_STATES = frozenset({"running", "queued", "scheduled", "deferred", "up_for_retry", "up_for_reschedule",
                            "restarting"})
MAX_PAGE = 500


# ------------------------------------------------------------------------------------------------ building it
def stage_roles(setup_task_id: str, tis: Sequence[TaskInstanceRow]) -> dict[str, Any]:
    """The stage's task instances by role, for a stage built by ``commit_stage`` (``<group>.setup``,
    ``<group>.write``, ``<group>.commit``, ``<group>.abort``): ``writes`` by task number."""
    group = setup_task_id.rsplit(".", 1)[0] if "." in setup_task_id else ""
    prefix = f"{group}." if group else ""
    roles: dict[str, Any] = {"writes": {}, "write_task_id": None}
    for ti in tis:
        if ti.task_id == f"{prefix}write":
            roles["writes"][max(ti.map_index, 0)] = ti
            roles["write_task_id"] = ti.task_id
        elif ti.task_id in (f"{prefix}commit", f"{prefix}abort"):
            roles[ti.task_id.rsplit(".", 1)[-1]] = ti
    return roles


def committed_attempt(t: Mapping[str, Any]) -> str | None:
    """``"<app>.<try>"`` of the attempt that committed *t* (a task of ``status()``): for a task adopted by a later
    application attempt, the application attempt it committed in (``recovered_from_app``), not the adopter's."""
    if t.get("attempt") is None:
        return None
    if t.get("committed_attempt"):
        return str(t["committed_attempt"])
    app = t["recovered_from_app"] if t.get("recovered_from_app") is not None else t.get("app_attempt")
    return f"{app}.{t['attempt']}"


def _tries(names: Sequence[str]) -> set[int]:
    return {int(n.split(".", 1)[1]) for n in names if "." in str(n) and n.split(".", 1)[1].isdigit()}


def _fenced(failed: Sequence[str]) -> str:
    """Why the task's failed attempts do not count: recorded failed, they can never commit (a killed try is fenced
    that way by the next try, before it writes)."""
    if not failed:
        return ""
    return (f"; {'attempt' if len(failed) == 1 else 'attempts'} {', '.join(failed)} "
            f"{'is' if len(failed) == 1 else 'are'} recorded failed and can never commit, even if still running "
            "(a killed try is fenced so by the next try)")


def _per_task_files(files: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Rows and bytes per task from a committed job's file list (its task entries do not carry them)."""
    out: dict[int, dict[str, Any]] = {}
    for f in files:
        agg = out.setdefault(f.get("task"), {"rows": 0, "bytes": 0})
        agg["bytes"] += f.get("size") or 0
        agg["rows"] = None if agg["rows"] is None or f.get("rows") is None else agg["rows"] + f["rows"]
    return out


def shards_per_task(job: Mapping[str, Any]) -> int:
    """The stage's shards per write task instance, as its job record's labels say (the write operator puts it
    there); 1 for a stage without, or a record that cannot say."""
    n = (job.get("labels") or {}).get("shards_per_task", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def task_rows(job: Mapping[str, Any], writes: Mapping[int, TaskInstanceRow], shards: int = 1,
              run_active: bool = False) -> list[TaskRow]:
    """Per task number: its status and why, from the storage's records and the Airflow task instance that runs
    it (with *shards* per task instance: task ``i * shards + s`` is shard ``s`` of map index ``i``; *run_active*:
    the DAG run is queued or running, so a cleared task instance runs again)."""
    from_files = _per_task_files([f for f in job.get("files") or [] if isinstance(f, dict)])
    kept = set((job.get("aborted") or {}).get("kept_committed_tasks") or [])
    tasks = {t["task"]: t for t in job.get("tasks") or []}
    out = []
    for n in sorted(set(tasks) | {i * shards + s for i in writes for s in range(shards)}):
        t = tasks.get(n, {})
        map_index, shard = divmod(n, shards)
        ti = writes.get(map_index)
        aid = committed_attempt(t)
        if aid is not None and "rows" not in t:
            t = {**t, **from_files.get(n, {"rows": None, "bytes": 0})}
        status, why = task_status(job, t, ti, aid, n in kept, shards, run_active)
        if t.get("refused") and status != "refused":
            aid = None   # its refused commit is not its output: a new try of it is under way
        claimed = list(t.get("denied_attempts") or [])
        out.append(TaskRow(task=n, map_index=map_index, shard=shard if shards > 1 else None, status=status, why=why,
                           airflow_state=ti.state if ti else None,
                           try_number=ti.try_number if ti else None, committed_attempt=aid,
                           recovered_from_app=t.get("recovered_from_app"),
                           files=t.get("files", 0) if aid else 0, rows=t.get("rows") if aid else 0,
                           bytes=t.get("bytes", 0) if aid else 0,
                           failed_attempts=list(t.get("failed_attempts") or []),
                           denied_attempts=[] if status == "committing" else claimed,
                           unfinished_attempts=list(t.get("unfinished_attempts") or []),
                           committing_attempts=claimed if status == "committing" else [],
                           duration=ti.duration if ti else None))
    return out


def task_status(job: Mapping[str, Any], t: Mapping[str, Any], ti: TaskInstanceRow | None, aid: str | None,
                kept: bool, shards: int, run_active: bool) -> tuple[str, str]:
    """One task's status and why: each justified by the protocol's records and Airflow's task instance *now*.

    ``committing``: an attempt's claim to commit holds (no other party can take the task from it) and no record
    of the task exists yet (``status()`` lists such a claim as denied, not knowing a record is coming): it is
    between its claim and its record. ``retrying``: a try failed and Airflow has the next one in hand (up for
    retry, scheduled, queued, running before it set up; or cleared in a live run). ``failed`` only when no try can
    follow: Airflow's task instance failed, or is not live and no attempt committed."""
    state = job.get("state")
    ti_state = ti.state if ti else None
    failed = list(t.get("failed_attempts") or [])
    claimed = list(t.get("denied_attempts") or [])
    live_ti = ti_state in LIVE_TI_STATES
    if aid is not None and t.get("refused"):
        if not (live_ti or (ti_state is None and run_active and state == "running")):
            return "refused", (f"attempt {aid} committed, but a job commit refused its files for good "
                               f"({t['refused']}): a clear of the whole run (with the stage's setup) runs the task "
                               "again with the code of then; it is not recovered" + _fenced(failed))
        aid = None   # the clear's try of the task is under way: shown as any task without a commit
    if aid is not None:
        if t.get("recovered_from_app") is not None:
            status, why = "recovered", (f"attempt {aid} committed in application attempt {t['recovered_from_app']}; "
                                        f"application attempt {t.get('app_attempt')} adopted it without running "
                                        "your code")
        elif state == "failed" and kept:
            status, why = "kept", (f"attempt {aid} committed; the failed run's teardown kept its files hidden under "
                                   "_temporary, so a clear of the run recovers it instead of running it")
        else:
            status, why = "committed", f"attempt {aid} committed (its commit record is the decision)"
        return status, why + _fenced(failed)
    if (str(job.get("algorithm")) == "2" and state == "failed" and ti_state == "success" and ti is not None
            and ti.try_number in _tries(failed)):
        return "withdrawn", ("committed at its task commit (v2: files visible at once), then withdrawn by the abort "
                             "of the failed run: v2 cannot keep committed tasks")
    if claimed and state == "running" and live_ti:
        return "committing", (f"attempt {claimed[-1]} claimed the task's commit (no other attempt can take it now) "
                              "and is writing its commit record")
    if t.get("unfinished_attempts") and (live_ti or ti_state is None):
        return "running", "a try is set up and has no fate yet: it is writing"
    if ti_state in ("failed", "upstream_failed"):
        return "failed", ("the Airflow task failed and has no try left; no attempt of it committed" if shards == 1
                          else "the Airflow task instance failed and has no try left; no attempt of this shard "
                               "committed")
    if live_ti and (failed or claimed or ti_state == "up_for_retry"):
        return "retrying", (f"a try failed; Airflow has the next one in hand ({ti_state}), which fences the failed "
                            "one first" + _fenced(failed))
    if ti_state is None and run_active and state == "running" and (failed or claimed):
        return "retrying", "a try failed and the task was cleared: Airflow runs it again in this run" + _fenced(failed)
    if t.get("unfinished_attempts"):
        return "unfinished", ("set up with no fate: killed, or still running as a zombie; the next try or the "
                              "teardown records it failed")
    if failed or claimed:
        return "failed", "no attempt committed and no try of it is under way" + _fenced(failed)
    if ti_state == "running":
        return "running", "its try is starting: it has not set up an attempt yet"
    return "waiting", "not started yet"


def table_text(table: Any) -> str | None:
    """The table version or snapshot a committed job produced, as the view shows it."""
    if not isinstance(table, Mapping) or not table.get("format"):
        return None
    if "version" in table:
        return f"{table['format']} {table.get('table')} version {table['version']}"
    if "snapshot_id" in table:
        return f"{table['format']} {table.get('table')} snapshot {table['snapshot_id']}"
    return f"{table['format']} {table.get('table')} (no transaction: nothing to add)"


def timeline(job: Mapping[str, Any], commit_summary: Mapping[str, Any] | None) -> tuple[list[CommitStageTime],
                                                                                           float | None]:
    """The job commit's stages, from ``_SUCCESS`` (the stages up to its own writing) and the commit task's summary
    (which also has ``markers`` and ``cleanup_after_success``) when it is of the same generation."""
    durations = dict(job.get("durations") or {})
    if commit_summary and commit_summary.get("job_uuid") == job.get("job_uuid"):
        durations.update(commit_summary.get("durations") or {})
    stages = [CommitStageTime(name=k, seconds=float(durations[k])) for k in COMMIT_STAGES
              if isinstance(durations.get(k), (int, float))]
    total = durations.get("total")
    return stages, float(total) if isinstance(total, (int, float)) else None


class StageModel:
    """One stage, read: its summary and every task row (kept on the server; pages are cut from it)."""

    def __init__(self, setup_task_id: str, stage_name: str, job: Mapping[str, Any], snapshot: RunSnapshot,
                 commit_summary: Mapping[str, Any] | None, conn_id: str | None = None) -> None:
        """*conn_id*: the stage's connection, for the commands the advice prints."""
        roles = stage_roles(setup_task_id, snapshot.task_instances)
        shards = shards_per_task(job)
        audit = audit_view(job.get("audit"))
        # a replaced generation's tasks are the later run's; a purged job and a refused setup have none left
        self.rows = [] if job.get("replaced_by") or job.get("state") in ("purged", "refused") else blame_rows(
            task_rows(job, roles["writes"], shards, snapshot.active), audit)
        self.files = [f for f in job.get("files") or [] if isinstance(f, dict)]
        counts = Counter(r.status for r in self.rows)
        #: kept by the teardown, yet not recovered by a clear: a job commit refused them (``status()``)
        refused = {t.get("task") for t in job.get("tasks") or [] if t.get("refused")}
        aborted = job.get("aborted")
        failure = job.get("commit_failure")
        stages, total = timeline(job, commit_summary)
        advice = advise(job, [(r.task, r.status) for r in self.rows], roles.get("commit"), conn_id, shards,
                        audit)
        totals = job.get("totals")
        self.summary = Stage(
            stage=stage_name, setup_task_id=setup_task_id, write_task_id=roles["write_task_id"],
            job_id=job.get("job_id"), state=job.get("state", "unreadable"), error=job.get("error"),
            job_uuid=job.get("job_uuid"), generation=job.get("generation"), app_attempt=job.get("app_attempt"),
            committer=job.get("committer"),
            algorithm=None if job.get("algorithm") is None else str(job.get("algorithm")), mode=job.get("mode"),
            target=job.get("output"), started=job.get("started"), finished=job.get("finished"),
            tasks_total=len(self.rows), tasks_done=sum(counts[s] for s in DONE), counts=dict(counts),
            totals=Totals(**{k: totals.get(k) for k in Totals.model_fields}) if totals else None,
            timeline=stages, total_seconds=total,
            aborted=Abort(at=aborted.get("at"), kept_tasks=[n for n in aborted.get("kept_committed_tasks") or []
                                                            if n not in refused],
                          visible_files_removed=aborted.get("visible_files_removed") or 0) if aborted else None,
            commit_failure=CommitFailure(**{k: failure.get(k) for k in CommitFailure.model_fields})
            if isinstance(failure, dict) else None,
            action=advice.action, next_steps=advice.steps,
            partial_output_visible=str(job.get("algorithm")) == "2", files_total=len(self.files),
            shards_per_task=shards, table=table_text(job.get("table")), replaced_by=job.get("replaced_by"),
            audit=audit)

    def page(self, version: str, status: str | None, offset: int, limit: int, task: int | None,
             map_index: int | None = None,
             order: Callable[[Sequence[TaskRow]], list[TaskRow]] | None = None) -> TaskPage:
        """The rows of *status* (all: ``None``), of one *task*, or of one write task instance (*map_index*: its
        shards), in *order* (:func:`~.task_order.sort_rows`; task order by default)."""
        rows = [r for r in self.rows if (status is None or r.status == status) and (task is None or r.task == task)
                and (map_index is None or r.map_index == map_index)]
        if order is not None:
            rows = order(rows)
        limit = max(1, min(limit, MAX_PAGE))
        return TaskPage(version=version, setup_task_id=self.summary.setup_task_id, status=status, total=len(rows),
                        offset=offset, limit=limit, items=rows[offset:offset + limit])

    def file_page(self, version: str, offset: int, limit: int) -> FilePage:
        limit = max(1, min(limit, MAX_PAGE))
        return FilePage(version=version, setup_task_id=self.summary.setup_task_id, target=self.summary.target,
                        total=len(self.files), offset=offset, limit=limit,
                        items=[FileRow(path=str(f.get("path")), size=int(f.get("size") or 0), rows=f.get("rows"),
                                       task=f.get("task")) for f in self.files[offset:offset + limit]])


class RunModel:
    """A run, read at one version: the summary and each stage's model."""

    def __init__(self, dag_id: str, run_id: str, version: str, snapshot: RunSnapshot,
                 stages: Sequence[StageModel]) -> None:
        self.stages = {s.summary.setup_task_id: s for s in stages}
        has = bool(snapshot.setup_task_ids) or bool(stages)
        # only a run that is queued or running changes by itself: a finished run (a stage left "running" by a
        # failed run whose teardown did not run, a run without stages) is never polled
        live = has and snapshot.active
        self.live = live
        self.summary = RunStatus(dag_id=dag_id, run_id=run_id, version=version, run_state=snapshot.run_state,
                                 has_stages=has, live=live, stages=[s.summary for s in stages])
