"""A whole target as the storage tells it, every job at once: what the ``airflow-commit`` command line shows
(``inspect``), checks (``verify``) and cleans (``abort``, ``gc``).

The job-level read model is :class:`~.status.JobStatus`; this module finds the jobs of a target (their records
under ``_temporary/`` and their commit logs under ``_commits/``) and rebuilds each one's :class:`~.job.Job` from the
job's own record, so that nobody has to remember a stage's algorithm, mode or partitioning to look at a job or to
clean it up. Everything that changes the target goes through the protocol's own abort (:mod:`.abort`), which
records every uncommitted attempt failed before it removes a file (I10) and touches only the job it was given:
nothing here deletes a path by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .abort import abort_job
from .config import CommitConfig
from .errors import CorruptRecord, InvalidOutputSpec
from .job import Job
from .layout import CLAIMS, COMMITS, SUCCESS, TEMPORARY, TRASH, JobLayout, is_job_id
from .records.job import CommitLog, JobRecord
from .records.lastcommit import last_commit
from .records.success import parse_marker, files_under, listing_mismatch
from .records.underway import markers_changing
from .status import JobStatus
from .stores import Store

def job_ids(store: Store) -> list[str]:
    """Every job the target knows of: a directory under ``_temporary/`` (a job under way, failed, or a committed
    job's leftovers) or a commit log under ``_commits/``. Names that are no job id (``_trash``, ``_claims``, the
    error-mode claim) are the target's own."""
    found = {n for n in store.list_dir(TEMPORARY) if is_job_id(n)}
    found |= {n[:-5] for n in store.list_dir(COMMITS) if n.endswith(".json") and is_job_id(n[:-5])}
    return sorted(found)


def job_scope(store: Store, job_id: str) -> Job:
    """The :class:`Job` of *job_id* on *store*, configured as its own record says (the current generation's job
    record, else the last committed generation's commit log): :class:`InvalidOutputSpec` when it has neither."""
    layout = JobLayout(job_id)
    record = JobRecord.read(store, layout.job_record)
    if record is not None:
        algorithm, mode, partition_by = record.algorithm, record.mode, record.partition_by
    else:
        log = CommitLog.read(store, layout.commit_log)
        if log is None:
            raise InvalidOutputSpec(f"{store.url()} has no job {job_id!r} (no {layout.job_record}, no "
                                    f"{layout.commit_log}); `airflow-commit inspect {store.url()}` lists its jobs")
        algorithm, mode, partition_by = (log.manifest["algorithm"], log.manifest["mode"],
                                         log.manifest.get("partition_by") or ())
    return Job(store, job_id, CommitConfig(algorithm=algorithm, mode=mode, partition_by=partition_by))


#: what ``inspect`` says of a job directory without a job record or a commit log
ORPHANED = ("a job directory without a job record or a commit log: what a try left that was still running when its "
            "job was purged (the purge removed the record; the try's abort wrote its fate after). Nothing can commit "
            "from it; gc removes it")


def describe_job(store: Store, job_id: str) -> dict[str, Any]:
    """One job: its state and tasks (:meth:`~.status.JobStatus.status`), what a clear of its run would recover,
    its pending multipart uploads, its committed generations, and whether ``gc`` would collect it; ``orphaned``
    for the leftovers of a purged job's late try (:data:`ORPHANED`)."""
    layout = JobLayout(job_id)
    if not store.exists(layout.job_record) and CommitLog.read(store, layout.commit_log) is None:
        return {"job_id": job_id, "state": "orphaned", "problem": ORPHANED, "collectable": True}
    scope = job_scope(store, job_id)
    status = JobStatus(scope).status()
    out: dict[str, Any] = {k: status.get(k) for k in ("job_id", "state", "job_uuid", "generation", "app_attempt",
                                                      "committer", "algorithm", "mode", "labels", "owner")}
    tasks = status.get("tasks") or []
    if status["state"] in ("running", "failed", "committing"):
        out["tasks"] = {
            "committed": sorted(t["task"] for t in tasks if t.get("attempt") is not None),
            #: committed, but a job commit refused their files for good: a clear runs them again
            "refused": sorted(t["task"] for t in tasks if t.get("refused")),
            "failed_attempts": sum(len(t.get("failed_attempts", ())) for t in tasks),
            "denied_attempts": sum(len(t.get("denied_attempts", ())) for t in tasks),
            "unfinished_attempts": sorted(f"{t['task']}@{a}" for t in tasks for a in t.get("unfinished_attempts", ())),
        }
        #: a clear of the run recovers these (their code is not called again); the rest run again
        out["recoverable_tasks"] = sorted(set(out["tasks"]["committed"]) - set(out["tasks"]["refused"]))
        uploads = scope.publisher.job_uploads(status["job_uuid"])
        out["pending_uploads"] = [rel for rel, _ in uploads]
    log = scope.commit_log()
    if log is not None:
        out["committed_generations"] = [h.get("generation") for h in log.history] + [log.manifest["generation"]]
        out["last_commit"] = {"generation": log.manifest["generation"], "finished": log.manifest.get("finished"),
                              "files": len(log.manifest["files"]),
                              "rows": (log.manifest.get("totals") or {}).get("rows")}
    leftovers = status["state"] == "committed" and bool(store.list_dir(scope.layout.job_dir))
    trash = [n for n in store.list_dir(TRASH) if scope.layout.is_own_trash(n)]
    out["trash_entries"] = len(trash)
    out["collectable"] = status["state"] == "failed" or leftovers or bool(trash)
    return out


def markers(store: Store) -> list[dict[str, Any]]:
    """Every ``_SUCCESS`` readers see (the root's and each partition's), each checked against one listing of the
    target (I9): ``valid``, or the first difference in ``problem``. A job committing meanwhile can make a marker
    look wrong for the length of the listing: ``verify`` then says so, and a second run tells."""
    listing = dict(store.list_files("", visible_only=True))
    out = []
    for d in store.marker_dirs(SUCCESS):
        rel = f"{d}/{SUCCESS}" if d else SUCCESS
        entry: dict[str, Any] = {"path": rel}
        try:
            manifest = parse_marker(store.read_bytes(rel), store.url(rel))
        except FileNotFoundError:
            continue   # withdrawn since the listing: a job is committing there
        except CorruptRecord as exc:
            out.append({**entry, "valid": False, "problem": str(exc)})
            continue
        problem = listing_mismatch(files_under(listing, d), manifest, store.url(rel))
        out.append({**entry, "job_id": manifest["job_id"], "generation": manifest.get("generation"),
                    "finished": manifest.get("finished"), "files": len(manifest["files"]),
                    "rows": (manifest.get("totals") or {}).get("rows"), "valid": problem is None,
                    "problem": problem})
    return out


def inspect(store: Store) -> dict[str, Any]:
    """The target: its markers, its jobs, the compactions' claims and what waits in the trash."""
    jobs = []
    for job_id in job_ids(store):
        try:
            jobs.append(describe_job(store, job_id))
        except (CorruptRecord, InvalidOutputSpec) as exc:
            jobs.append({"job_id": job_id, "state": "unreadable", "problem": str(exc), "collectable": False})
    found = markers(store)
    return {"output": store.url(), "markers": found, **({} if found else {"no_marker": no_marker(store)}),
            "jobs": jobs, "claimed_inputs": len(store.list_dir(CLAIMS)), "trash_entries": len(store.list_dir(TRASH))}


def abort(store: Store, job_id: str, *, purge: bool = False) -> dict[str, Any]:
    """Hadoop's abortJob for one job, as its stage's teardown runs it (``purge=False``: committed tasks are kept
    for a clear of the run) or as ``purge_on_failure`` does (the target as it was before the job). A job that is
    committing is left alone (its commit finishes on the next try of the commit task)."""
    return abort_job(job_scope(store, job_id), keep_committed=not purge)


def collect(store: Store, *, apply: bool = False) -> list[dict[str, Any]]:
    """``gc``: the jobs nobody continues by themselves (a failed run's teardown ran; or committed, with clean-up
    left) and what collecting each does. Only with *apply* is anything removed, each job through :func:`abort`
    with ``purge`` (which re-reads the job: one that a clear set going meanwhile is no longer ``failed``, and
    a job that started committing is left alone). Running jobs are never collected: nothing in storage tells a
    live run from a dead one; ``abort --job`` is for those, by hand."""
    plan = []
    for job in inspect(store)["jobs"]:
        if not job.get("collectable"):
            continue
        action = {"failed": "purge: its committed tasks are not recovered by a later clear",
                  "orphaned": "remove what a purged job's late try left"}.get(job["state"],
                                                                              "remove what its clean-up left")
        entry: dict[str, Any] = {"job_id": job["job_id"], "state": job["state"], "action": action}
        if apply:
            entry["result"] = remove_orphan(store, job["job_id"]) if job["state"] == "orphaned" else \
                abort(store, job["job_id"], purge=True)
        plan.append(entry)
    return plan


def remove_orphan(store: Store, job_id: str) -> dict[str, Any]:
    """Remove a job directory :func:`describe_job` found ``orphaned``: only the entries of one listing that shows
    no job record, so that a setup creating the job meanwhile (its record first, then an application attempt
    numbered past every one listed) loses nothing; the directory goes once empty."""
    layout = JobLayout(job_id)
    names = store.list_dir(layout.job_dir)
    if layout.job_record.rsplit("/", 1)[-1] in names or CommitLog.read(store, layout.commit_log) is not None:
        return {"job_id": job_id, "state": "set up meanwhile", "removed": False}
    for name in sorted(names):   # application attempt directories, and the job's own records (files)
        (store.delete_tree if name.isdigit() else store.delete_file)(f"{layout.job_dir}/{name}")
    store.remove_dir_if_empty(layout.job_dir)
    store.remove_dir_if_empty(TEMPORARY)
    return {"job_id": job_id, "state": "orphaned", "removed": True}


def verify(store: Store) -> dict[str, Any]:
    """Whether every marker under the target tells the truth; ``ok`` is false when there is none (then
    ``no_marker``: why, and what writes one)."""
    found = markers(store)
    return {"output": store.url(), "ok": bool(found) and all(m["valid"] for m in found), "markers": found,
            **({} if found else {"no_marker": no_marker(store)})}


def no_marker(store: Store) -> str:
    """Why the target has no root ``_SUCCESS``, for a person: a job commit under way (or stopped) withdrew it,
    another job's uncommitted files are visible, a change since the last commit withdrew it, or nothing ever
    committed there; and what writes one."""
    changing = markers_changing(store)
    if "" in changing.dirs:
        return ("a job commit under way withdrew it (or stopped before writing it again): a retry of that job's "
                "commit task, or a clear of it, finishes the commit and writes it; `inspect` names the job "
                "(committing)")
    if changing.uncommitted is not None:
        return changing.uncommitted
    try:
        last = last_commit(store)
    except CorruptRecord as exc:
        return f"which job committed there last is unknown: {exc}"
    if last is None:
        return "no job of this provider has committed there"
    m = last[1].manifest
    return (f"job {m['job_id']} committed there last (generation {m.get('generation')}, finished {m['finished']}); "
            "a change since withdrew its marker, and the next commit writes one")


def summary_lines(found: Mapping[str, Any], gc_command: str) -> list[str]:
    """:func:`inspect` for a person: one line a marker and a job (*gc_command*: the ``gc --apply`` line that
    reaches the target, as the caller was given it)."""
    lines = [f"target {found['output']}"]
    if not found["markers"]:
        lines.append(f"  no _SUCCESS: {found['no_marker']}")
    for m in found["markers"]:
        verdict = "valid" if m["valid"] else f"INVALID: {m['problem']}"
        lines.append(f"  {m['path']}: job {m.get('job_id')} generation {m.get('generation')}, {m.get('files')} "
                     f"file(s), {m.get('rows')} row(s), {verdict}")
    for j in found["jobs"]:
        head = f"  job {j['job_id']}: {j['state']}"
        if j.get("generation") is not None:
            head += f", generation {j['generation']}, application attempt {j.get('app_attempt')}"
        if j.get("algorithm") is not None:
            head += f", algorithm {j['algorithm']}, mode {j['mode']}"
        lines.append(head)
        if j["state"] == "committing":
            lines.append("    its job commit fixed its plan and has not finished: a retry of its commit task, or a "
                         "clear of that task, finishes it (gc and abort leave it alone)")
        labels = j.get("labels") or {}
        if labels.get("dag_id"):
            lines.append(f"    dag {labels['dag_id']} run {labels.get('run_id')}")
        owner = j.get("owner")
        if owner:   # the run whose setup claimed the current application attempt (owners.py)
            lines.append(f"    application attempt {j.get('app_attempt')} owned by dag {owner['dag_id']} run "
                         f"{owner['run_id']} (clear {owner['clear_number']})")
        if "tasks" in j:
            t = j["tasks"]
            refused = f", {len(t['refused'])} of them refused by a job commit (a clear runs them again)" \
                if t["refused"] else ""
            lines.append(f"    committed tasks {len(t['committed'])}{refused}; a clear of the run recovers "
                         f"{len(j['recoverable_tasks'])}; failed attempts {t['failed_attempts']}, denied "
                         f"{t['denied_attempts']}, unfinished {len(t['unfinished_attempts'])}; pending uploads "
                         f"{len(j.get('pending_uploads', []))}")
        if j.get("last_commit"):
            c = j["last_commit"]
            lines.append(f"    last commit: generation {c['generation']} at {c['finished']}, {c['files']} file(s)")
        if j.get("problem"):
            lines.append(f"    {j['problem']}")
        if j.get("collectable"):
            lines.append(f"    collectable: `{gc_command}` removes it")
    if found["trash_entries"]:
        lines.append(f"  {found['trash_entries']} committed job directory(ies) in {TRASH} (gc removes them)")
    if found["claimed_inputs"]:
        lines.append(f"  {found['claimed_inputs']} file(s) claimed by compactions ({CLAIMS})")
    return lines


__all__ = ["abort", "collect", "describe_job", "inspect", "job_ids", "job_scope", "markers", "no_marker",
           "remove_orphan", "summary_lines", "verify"]
