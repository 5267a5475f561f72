"""A job run by real worker processes, for crash-injection tests.

Run as ``python -m tests.protocol.scenario PHASE JSON``: the phase runs in its own process, so a fault armed
through ``COMMIT_PROVIDER_FAULTS`` kills a real process (``os._exit`` or SIGKILL) in the middle of the protocol.
The same functions run in-process for the recovery half of each test (that is the second process).

Every task writes ``ROWS`` rows ``(task, row, attempt, day)``; ``read_rows`` and ``assert_exactly_once`` check the
output row by row. Every call of a task's user code is appended to ``calls.log`` so tests can prove recovery did
not run it again.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from airflow_commit_provider.protocol import make_committer, run_task_attempt
from airflow_commit_provider.protocol.paths import is_hidden
from airflow_commit_provider.protocol.stores.durability import DirSync
from airflow_commit_provider.protocol.stores.local import LocalStore

ROWS = 6
TASKS = 4
JOB = "job-under-test"


def task_table(task: int, attempt: int, rows: int = ROWS) -> pa.Table:
    return pa.table({
        "task": pa.array([task] * rows, pa.int32()),
        "row": pa.array(range(rows), pa.int32()),
        "attempt": pa.array([attempt] * rows, pa.int32()),
        "day": [f"d{i % 2}" for i in range(rows)],
    })


#: What a local job's store fsyncs (``cfg["fsyncs"]``): ``all`` (the product), ``files`` (never a directory: rule 2
#: of :mod:`airflow_commit_provider.protocol.stores.durability` broken on purpose) or ``none`` (``durable=False``).
#: The power-cut simulation must report loss for the last two (``tests/powercut``).
FSYNCS = ("all", "files", "none")


class FilesOnlyStore(LocalStore):
    """A local store that fsyncs every file it should and never a directory."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._sync = DirSync(enabled=False)


def committer(cfg: dict[str, Any], job: str = JOB) -> Any:
    kwargs = {k: cfg[k] for k in ("part_size", "names") if k in cfg}
    fsyncs = cfg.get("fsyncs", "all")
    if fsyncs not in FSYNCS:
        raise ValueError(f"fsyncs must be one of {FSYNCS}, got {fsyncs!r}")
    output = FilesOnlyStore(cfg["root"]) if fsyncs == "files" else cfg["root"]
    return make_committer(output, job, algorithm=cfg["algorithm"], mode=cfg["mode"],
                          partition_by=cfg.get("partition_by", ["day"]), commit_threads=cfg.get("threads", 2),
                          durable=fsyncs != "none", **kwargs)


def _record_call(cfg: dict[str, Any], task: int, attempt: int) -> None:
    with open(os.path.join(cfg["work"], "calls.log"), "a") as fh:
        fh.write(f"{task} {attempt}\n")


def calls(cfg: dict[str, Any]) -> Counter[int]:
    path = os.path.join(cfg["work"], "calls.log")
    if not os.path.exists(path):
        return Counter()
    return Counter(int(line.split()[0]) for line in open(path) if line.strip())


def run_task(cfg: dict[str, Any], task: int, attempt: int, fail: bool = False, job: str = JOB) -> dict[str, Any]:
    def produce(writer: Any) -> None:
        _record_call(cfg, task, attempt)
        writer.write(task_table(task, attempt))
        if fail:
            raise RuntimeError(f"user code of task {task} attempt {attempt} failed")

    return run_task_attempt(committer(cfg, job), task, attempt, produce).to_dict()


def phase_prior(cfg: dict[str, Any]) -> None:
    """Application attempt 0: tasks 0 and 1 commit, then the 'driver' is lost."""
    committer(cfg).setup_job()
    run_task(cfg, 0, 1)
    run_task(cfg, 1, 1)


def phase_main(cfg: dict[str, Any], base_attempt: int) -> dict[str, Any]:
    """A whole application attempt: setup, every task (the last one failing once first), job commit (after an
    audit, with ``cfg["audit"]``)."""
    committer(cfg).setup_job()
    for task in range(TASKS - 1):
        run_task(cfg, task, base_attempt)
    try:
        run_task(cfg, TASKS - 1, base_attempt, fail=True)
    except RuntimeError:
        pass
    run_task(cfg, TASKS - 1, base_attempt + 1)
    return audit_and_commit(cfg, base_attempt)


def phase_retry(cfg: dict[str, Any], base_attempt: int) -> dict[str, Any]:
    """Airflow's 'clear only failed tasks': every task tried again, no setup, then job commit (after an audit,
    with ``cfg["audit"]``)."""
    for task in range(TASKS):
        run_task(cfg, task, base_attempt)
    return audit_and_commit(cfg, base_attempt)


def scenario_audit(algorithm: int | str) -> Any:
    """The audit of an audited scenario (``cfg["audit"]``): what every task writes passes it; with algorithm 1 a
    data callable reads the staged files too (every row of every task once)."""
    from airflow_commit_provider.protocol.audit import Audit, checks

    def every_row_once(dataset: ds.Dataset) -> bool:
        keys = [(r["task"], r["row"]) for r in dataset.to_table(columns=["task", "row"]).to_pylist()]
        return sorted(keys) == [(t, i) for t in range(TASKS) for i in range(ROWS)]

    return Audit(checks=[checks.Rows(min=ROWS, per="task"), checks.NotNull("task", "row"),
                         checks.Between("row", 0, ROWS - 1)], data=every_row_once if algorithm == 1 else None)


def audit_and_commit(cfg: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The job commit, after try *attempt* of the audit with ``cfg["audit"]`` (which must pass)."""
    if not cfg.get("audit"):
        return committer(cfg).commit_job(TASKS)
    from airflow_commit_provider.protocol.audit.run import AuditGate, run_audit

    audit = scenario_audit(cfg["algorithm"])
    verdict = run_audit(committer(cfg).job, audit, TASKS, attempt)
    assert verdict.passed, verdict.message
    return committer(cfg).commit_job(TASKS, gate=AuditGate(audit.digest()))


def phase_abort(cfg: dict[str, Any]) -> dict[str, Any]:
    return committer(cfg).abort_job()


def run_audit_phase(cfg: dict[str, Any]) -> dict[str, Any]:
    """One try (``cfg["attempt"]``) of the scenario's audit, in a process of its own (a zombie test pauses it)."""
    from airflow_commit_provider.protocol.audit.run import run_audit

    return run_audit(committer(cfg).job, scenario_audit(cfg["algorithm"]), TASKS, cfg["attempt"]).to_doc()


def _fs(root: str) -> tuple[Any, str]:
    import fsspec

    if root.startswith("s3://"):  # never a cached listing: tests look at what is really there
        return fsspec.core.url_to_fs(root, use_listings_cache=False, skip_instance_cache=True)
    if root.startswith("gs://"):  # the store's own file system (gcsfs's core one), uncached
        from airflow_commit_provider.protocol.stores.gcs import gcs_filesystem

        fs = gcs_filesystem({"use_listings_cache": False})
        return fs, fs._strip_protocol(root)
    if root.startswith(("abfs://", "az://")):
        from airflow_commit_provider.protocol.stores.azure import azure_filesystem

        fs = azure_filesystem({"use_listings_cache": False})
        return fs, fs._strip_protocol(root)
    return fsspec.core.url_to_fs(root)


def read_rows(root: str) -> list[dict[str, Any]]:
    """Every row readers see under *root* (hive partitions, hidden names skipped, as pyarrow does)."""
    fs, path = _fs(root)
    if not fs.isdir(path):
        return []
    dataset = ds.dataset(path, format="parquet", partitioning="hive", filesystem=fs)
    return dataset.to_table().to_pylist()


def visible_files(root: str) -> list[str]:
    fs, path = _fs(root)
    prefix = path.rstrip("/") + "/"
    rels = (p[len(prefix):] for p in fs.find(path))
    return sorted(r for r in rels if r and not r.endswith("/") and not is_hidden(r))  # S3 markers: no files


def all_files(root: str) -> list[str]:
    fs, path = _fs(root)
    prefix = path.rstrip("/") + "/"
    return sorted(r for r in (p[len(prefix):] for p in fs.find(path)) if r and not r.endswith("/"))


OLD_TASK = 99
#: Files present in the target before the job (two partitions, one of which the job also writes).
OLD_FILES = {"day=d0/old-00.parquet": range(0, 3), "day=d9/old-01.parquet": range(3, 6)}


def write_old_data(root: str) -> None:
    import pyarrow.parquet as pq

    fs, base = _fs(root)
    for rel, rows in OLD_FILES.items():
        fs.makedirs(f"{base}/{rel.rsplit('/', 1)[0]}", exist_ok=True)
        pq.write_table(pa.table({"task": pa.array([OLD_TASK] * len(rows), pa.int32()),
                                 "row": pa.array(list(rows), pa.int32()),
                                 "attempt": pa.array([0] * len(rows), pa.int32())}), f"{base}/{rel}",
                       filesystem=fs)


def old_rows_expected(mode: str) -> set[tuple[int, str]]:
    """(row, day) of the old rows that must survive a commit in *mode*."""
    keep = {"append": OLD_FILES, "error": {}, "overwrite": {},
            "dynamic": {k: v for k, v in OLD_FILES.items() if k.startswith("day=d9")}}[mode]
    return {(i, rel.split("/")[0][4:]) for rel, rows in keep.items() for i in rows}


def check_no_duplicates(rows: list[dict[str, Any]]) -> None:
    """What must hold at every moment, even mid-commit: no row twice, no task mixing attempts."""
    ours = [r for r in rows if r["task"] != OLD_TASK]
    dupes = {k: n for k, n in Counter((r["task"], r["row"]) for r in ours).items() if n != 1}
    assert not dupes, f"duplicated rows: {dupes}"
    for t in {r["task"] for r in ours}:
        attempts = {r["attempt"] for r in ours if r["task"] == t}
        assert len(attempts) == 1, f"task {t} mixes attempts {attempts}"


def assert_exactly_once(rows: list[dict[str, Any]], tasks: int = TASKS, per_task: int = ROWS,
                        old: set[tuple[int, str]] | None = None) -> None:
    """Every row of every task exactly once, all rows of a task from one attempt, old rows as the mode says."""
    check_no_duplicates(rows)
    ours = [r for r in rows if r["task"] != OLD_TASK]
    keys = {(r["task"], r["row"]) for r in ours}
    expected = {(t, i) for t in range(tasks) for i in range(per_task)}
    assert keys == expected, f"missing rows: {sorted(expected - keys)}; unexpected: {sorted(keys - expected)}"
    for t in range(tasks):
        days = {r["row"]: r["day"] for r in ours if r["task"] == t}
        assert all(str(days[i]) == f"d{i % 2}" for i in range(per_task)), f"task {t}: rows in wrong partitions"
    old_seen = Counter((r["row"], str(r["day"])) for r in rows if r["task"] == OLD_TASK)
    assert all(n == 1 for n in old_seen.values()), f"old rows duplicated: {old_seen}"
    assert set(old_seen) == (old or set()), f"old rows: expected {sorted(old or set())}, got {sorted(old_seen)}"


if __name__ == "__main__":
    phase, raw = sys.argv[1], sys.argv[2]
    config = json.loads(raw)
    Path(config["work"]).mkdir(parents=True, exist_ok=True)
    result = {"prior": lambda: phase_prior(config), "main": lambda: phase_main(config, config.get("attempt", 11)),
              "retry": lambda: phase_retry(config, config.get("attempt", 21)),
              "abort": lambda: phase_abort(config),
              "task": lambda: run_task(config, config["task"], config["attempt"]),
              "audit": lambda: run_audit_phase(config)}[phase]()
    print(json.dumps({"ok": True}))


def commit_one_deny_the_next(committer: Any, task: int = 0) -> None:
    """Try 1 of *task* writes and commits; try 2 starts after that (it writes the same names) and is denied at
    its commit (:class:`CommitDenied`, asserted)."""
    from airflow_commit_provider.protocol import CommitDenied, TaskAttemptWriter

    tries = []
    for attempt in (1, 2):
        ta = committer.setup_task(task, attempt)
        with TaskAttemptWriter(committer, ta, partition_by=committer.partition_by) as w:
            w.write(task_table(task, attempt))
        tries.append((ta, w.rows))
        if attempt == 1:
            committer.commit_task(*tries[0])
    try:
        committer.commit_task(*tries[1])
    except CommitDenied:
        return
    raise AssertionError(f"try 2 of task {task} committed after try 1 had")


def wakes_after_the_commit(committer: Any) -> Any:
    """What a try set up before its job committed writes (run it with another committer of the job, as try 1 of
    task 0): it opens a file and writes, then try 2 of task 0 commits and the job commits (one task) through
    *committer*, then it writes on and closes the file."""
    def produce(w: Any) -> None:
        fh = w.open_file(partition={"day": "d0"})
        fh.write(b"x" * 100)
        assert run_task_attempt(committer, 0, 2, lambda w2: w2.write(task_table(0, 2))).status == "committed"
        committer.commit_job(1)
        fh.write(b"y")
        fh.close()

    return produce


def crash_after_plan(committer: Any, expected_tasks: int = 1) -> None:
    """A job commit that dies (in-process) right after fixing its plan: the job is then committing and only rolls
    forward."""
    import pytest

    from airflow_commit_provider.protocol import faults

    faults.arm("commit_job.after_plan", "raise")
    with pytest.raises(faults.InjectedFault):
        committer.commit_job(expected_tasks)
    faults.disarm()


def marker_dirs(root: str) -> list[str]:
    """Directories readers see (no hidden component) that hold a ``_SUCCESS``, relative to *root*."""
    fs, path = _fs(root)
    prefix = path.rstrip("/") + "/"
    out = []
    for p in fs.find(path):
        rel = p[len(prefix):] if p.startswith(prefix) else ""
        head, _, name = rel.rpartition("/")
        if name == "_SUCCESS" and not is_hidden(head):
            out.append(head)
    return sorted(out)


def assert_markers_tell_truth(root: str) -> int:
    """I9 as a reader that trusts ``_SUCCESS`` sees it: every marker that reads as valid lists exactly the visible
    files under its directory, with their sizes. Returns how many valid markers were checked. A marker that does
    not parse (half written, a Hadoop 0-byte one) is not trusted by such a reader and is not checked."""
    from airflow_commit_provider.protocol import CorruptRecord, read_success_marker
    from airflow_commit_provider.protocol.records.success import verify_listed_files
    from airflow_commit_provider.protocol.stores import store_for

    fs, base = _fs(root)
    checked = 0
    for d in marker_dirs(root):
        where = f"{root.rstrip('/')}/{d}" if d else root
        store = store_for(where, fs=fs) if root.startswith("s3://") else store_for(where)
        try:
            manifest = read_success_marker(store)
        except (CorruptRecord, FileNotFoundError):
            continue
        verify_listed_files(store, manifest, store.url("_SUCCESS"))
        checked += 1
    return checked
