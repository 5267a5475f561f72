"""One cell of the power-cut matrix: a job cut at one point, the disk rebooted, its state checked, the job resumed.

The job is the crash matrix's (:mod:`tests.protocol.scenario`): old data in the target (except in mode ``error``)
and an earlier application attempt that committed two tasks, both made durable first (the state before the job);
then a real worker process, importing this checkout's package, runs a whole application attempt -- setup, four
tasks of which the last fails once, job commit -- and pauses itself (fault action ``stop``) at the cut point, or
runs to the end (point ``returned``: the power goes just after ``commit_job`` returned). While it is paused the
disk (ext4 or btrfs) is copied three times (:mod:`.disk`): ``lost``, before anything is forced (what the job made
durable itself; after ``commit_job`` returned that must be the committed state), ``cut``, after the power cut (an
unrelated fsync: on ext4 the journal committed, every name and deletion durable, data nobody fsynced not; on btrfs
the log tree written: also the new names of files renamed after their fsync, nothing else), and ``control``,
after ``syncfs`` (the same moment without the power loss). The worker is killed, the disk unmounted, and each copy
is mounted in its place:

- **state after the reboot** (every copy): every visible Parquet file reads; no row twice; the target exists and,
  when old files are gone, every new row is there (overwrite never loses the target); in append mode every old
  row is still there; v1 shows nothing before job commit; every ``_SUCCESS`` present is a valid manifest that
  tells the truth (``verify_files``) and whose files' rows read back, and a valid root ``_SUCCESS`` means the
  committed state is there, row for row;
- **the job goes on** (each copy): resumed as Airflow's retry does ("clear only failed": every task again, then
  ``commit_job``), and, in the modes where recomputing is idempotent (overwrite, dynamic), cleared as a user does
  (the failed run's teardown ``abort_job(keep_committed=True)``, then a new application attempt; on the copy a
  missing fsync hurts most: ext4's ``cut``, btrfs' ``lost``): every row exactly once, old rows as the mode says,
  committed tasks not run again, a true ``_SUCCESS``, no ``_temporary``.

The control copy must pass everything, or the cell proves nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from airflow_commit_provider.protocol import faults, read_success_marker
from airflow_commit_provider.protocol.stores import store_for

from ..conftest import REPO
from ..protocol import scenario as sc
from ..protocol.test_crash_matrix import MIDWAY, check_mid_crash, recover_and_check
from . import disk

#: The commit points of task and job commit where the power goes, in protocol order, and ``returned``.
RETURNED = "returned"
POINTS: tuple[str, ...] = (
    "commit_task.after_record", "commit_task.after_move",
    "commit_job.after_plan", "commit_job.after_withdraw", "commit_job.mid_move", "commit_job.after_moves",
    "commit_job.after_deletes", "commit_job.after_commit_log", "commit_job.after_success",
    "commit_job.after_cleanup", RETURNED,
)
MODES = ("error", "append", "overwrite", "dynamic")
ALGORITHMS = (1, 2)
#: Modes in which a clear after a commit recomputes the same output (append would add the rows again, by design).
IDEMPOTENT_MODES = ("overwrite", "dynamic")
#: Attempts of a cell whose cut a foreign writeback made milder (the canary shows it) before it is reported.
CLEAN_CUT_TRIES = 3
JOB_TIMEOUT = 120.0


@dataclass(frozen=True)
class Cell:
    """*fs* names the file system (:data:`.disk.FILE_SYSTEMS`); *fsyncs* what the job's store fsyncs
    (:data:`tests.protocol.scenario.FSYNCS`: anything but ``all`` must be reported as loss somewhere)."""

    algorithm: int
    mode: str
    point: str
    fs: str = "ext4"
    fsyncs: str = "all"

    def name(self) -> str:
        suffix = "" if self.fsyncs == "all" else f"-fsyncs-{self.fsyncs}"
        return f"{self.fs}-v{self.algorithm}-{self.mode}-{self.point}{suffix}"


@dataclass
class Outcome:
    """``status``: ``pass``; ``fail`` (some check failed on a cut copy: data lost or the job stuck); ``broken``
    (the control failed, or the cell could not run: the simulation proves nothing); ``n/a`` (the point is not on
    this algorithm's path); ``unclean`` (every try's cut was made milder by a writeback the harness did not ask
    for). ``checks`` maps ``copy: check`` to ``ok`` or what failed; ``canaries`` each copy to its canary's state
    (:func:`.disk.canary_state`: on btrfs ``empty`` on ``lost`` means the job's fsyncs forced a transaction
    commit, which made that copy milder)."""

    cell: Cell
    status: str = "pass"
    checks: dict[str, str] = field(default_factory=dict)
    canaries: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    tries: int = 1

    def failures(self) -> dict[str, str]:
        return {k: v for k, v in self.checks.items() if v != "ok"}

    def summary(self) -> str:
        lines = [f"{self.cell.name()}: {self.status} ({self.seconds:.1f} s)"]
        lines += [f"  {k}: {v}" for k, v in self.failures().items()]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- checks
def unreadable_files(root: str) -> list[str]:
    """Visible Parquet files under *root* that pyarrow cannot read, each with its size and error."""
    bad = []
    for rel in sc.visible_files(root):
        if not rel.endswith(".parquet"):
            continue
        path = os.path.join(root, rel)
        try:
            pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - any reader error is the finding
            bad.append(f"{rel} ({os.path.getsize(path)} bytes: {type(exc).__name__})")
    return bad


def check_markers(root: str) -> bool:
    """Every ``_SUCCESS`` present (root and partitions) is a valid manifest that lists exactly the visible files
    under it, and the rows of its files read back. A reader such as Hadoop's trusts a marker by its name, so a
    present marker that does not parse is a failure here. Returns whether the root marker is there."""
    for d in sc.marker_dirs(root):
        where = os.path.join(root, d) if d else root
        manifest = read_success_marker(store_for(where), verify_files=True)
        for f in manifest["files"]:
            rows = pq.read_table(os.path.join(root, f["path"])).num_rows
            assert f.get("rows") in (None, rows), f"{d or '.'}/_SUCCESS lists {f['path']} with {f['rows']} rows, " \
                                                   f"the file has {rows}"
        for f in manifest.get("retained") or []:
            pq.read_table(os.path.join(root, f["path"]))
    return "" in sc.marker_dirs(root)


def check_after_reboot(cfg: dict[str, Any]) -> None:
    """The state a reader finds after the reboot is the previous state, a documented mid-commit state or the
    committed one, and all of it is true."""
    root, mode = cfg["root"], cfg["mode"]
    bad = unreadable_files(root)
    assert not bad, f"{len(bad)} unreadable data file(s): {', '.join(bad[:4])}"
    check_mid_crash(cfg)  # target exists, no duplicates, old data only after all new data, v1 isolation
    rows = sc.read_rows(root)
    if mode == "append":
        old = {(r["row"], str(r["day"])) for r in rows if r["task"] == sc.OLD_TASK}
        lost = sc.old_rows_expected(mode) - old
        assert not lost, f"append lost old rows {sorted(lost)}"
    if check_markers(root):  # a true root _SUCCESS: the committed state, row for row
        sc.assert_exactly_once(rows, old=sc.old_rows_expected(mode))


def check_committed(cfg: dict[str, Any]) -> None:
    """After ``commit_job`` returned, the committed state is on the disk, whatever the power does next."""
    root = cfg["root"]
    assert "" in sc.marker_dirs(root), "commit_job returned, but after the reboot there is no _SUCCESS"
    read_success_marker(root, verify_files=True)
    sc.assert_exactly_once(sc.read_rows(root), old=sc.old_rows_expected(cfg["mode"]))


def resume(cfg: dict[str, Any]) -> None:
    """Airflow's retry after the crash: every task tried again (recovered when committed), then job commit."""
    recover_and_check(cfg, "retry")


def clear(cfg: dict[str, Any]) -> None:
    """A user's clear of the failed run: its teardown (keep committed tasks), then a new application attempt."""
    sc.committer(cfg).abort_job(keep_committed=True)
    recover_and_check(cfg, "clear")


def _attempt(checks: dict[str, str], key: str, check: Callable[[dict[str, Any]], None], cfg: dict[str, Any]) -> None:
    try:
        check(cfg)
        checks[key] = "ok"
    except Exception as exc:  # noqa: BLE001 - a failed check is reported, the other checks still run
        where = traceback.extract_tb(exc.__traceback__)[-1]
        text = " ".join(str(exc).split())
        checks[key] = f"{type(exc).__name__}: {text[:400]} [{os.path.basename(where.filename)}:{where.lineno}]"


# ---------------------------------------------------------------------------------------------------- the job
class Job:
    """The worker process of one application attempt, paused at *point* (``stop``) or run to its end."""

    def __init__(self, cfg: dict[str, Any], point: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop(faults.ENV_VAR, None)
        if point != RETURNED:
            env[faults.ENV_VAR] = f"{point}=stop@{MIDWAY.get(point, 1)}"
        self.log = os.path.join(cfg["work"], "job.log")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.protocol.scenario", "main", json.dumps(cfg)],
                                         cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self._lock = threading.Lock()
        self._reaped = False

    def wait(self) -> str:
        """``stopped`` (paused at its point), ``exited`` (ran to its end) or ``failed: ...``."""
        def watchdog() -> None:
            with self._lock:
                if not self._reaped:
                    self.proc.kill()

        timer = threading.Timer(JOB_TIMEOUT, watchdog)
        timer.start()
        try:
            _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        finally:
            with self._lock:
                timer.cancel()
                if not os.WIFSTOPPED(status):
                    self._reaped = True
                    self.proc.returncode = os.waitstatus_to_exitcode(status)
        if os.WIFSTOPPED(status):
            return "stopped"
        if self.proc.returncode == 0:
            return "exited"
        with open(self.log, errors="replace") as fh:
            return f"failed: worker rc={self.proc.returncode}: {fh.read()[-600:]}"

    def kill(self) -> None:
        """Kill a paused worker (the machine is gone) and reap it, so that its file system can be unmounted."""
        with self._lock:
            if self._reaped:
                return
            self._reaped = True
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


# ---------------------------------------------------------------------------------------------------- the cell
def run_cell(cell: Cell, base: str) -> Outcome:
    """Run *cell* under *base* (a scratch directory on the host), again while its cut is not clean."""
    t0 = time.monotonic()
    for tries in range(1, CLEAN_CUT_TRIES + 1):
        outcome = _run_once(cell, base)
        outcome.tries = tries
        if outcome.status != "unclean":
            break
    outcome.seconds = time.monotonic() - t0
    return outcome


def _run_once(cell: Cell, base: str) -> Outcome:
    outcome = Outcome(cell)
    cell_dir = tempfile.mkdtemp(prefix=cell.name() + "-", dir=base)
    try:
        cut = _cut(cell, cell_dir, outcome)
        if cut is None:
            return outcome
        cfg, copies = cut
        for copy in copies:
            with disk.mounted(copy.image, os.path.join(cell_dir, "mnt"), disk.FILE_SYSTEMS[cell.fs]):
                canary = outcome.canaries[copy.name] = disk.canary_state(os.path.join(cell_dir, "mnt"))
                if canary not in copy.canary:
                    if "written" in canary and copy.name != "control":
                        outcome.status = "unclean"  # something wrote the page cache back: run the cell again
                        return outcome
                    outcome.checks[f"simulation: canary on {copy.name}"] = f"{canary}, expected {copy.canary}"
                    continue
                for step_name, step in copy.steps:
                    _attempt(outcome.checks, f"{copy.name}: {step_name}", step, cfg)
        failed = outcome.failures()
        if any(k.startswith(("control", "simulation")) for k in failed):
            outcome.status = "broken"
        elif failed:
            outcome.status = "fail"
        return outcome
    except Exception as exc:  # noqa: BLE001 - the harness itself failed: reported, the matrix goes on
        outcome.status = "broken"
        outcome.checks["harness"] = f"{type(exc).__name__}: {exc} {traceback.format_exc(limit=3)[-400:]}"
        return outcome
    finally:
        if not os.path.ismount(os.path.join(cell_dir, "mnt")):  # never remove files through a mount left behind
            shutil.rmtree(cell_dir, ignore_errors=True)


Step = tuple[str, Callable[[dict[str, Any]], None]]


@dataclass(frozen=True)
class Copy:
    """One image of the disk to reboot: *canary* is what a clean cut leaves of the canary on it; *steps* are the
    checks and recoveries run on it, in order."""

    name: str
    image: str
    canary: tuple[str, ...]
    steps: tuple[Step, ...]


def _cut(cell: Cell, cell_dir: str, outcome: Outcome) -> tuple[dict[str, Any], list[Copy]] | None:
    """Run the job on a fresh disk and cut it at the cell's point; the copies to reboot, each with its checks,
    or ``None`` when there is nothing to reboot (the point is not on the path, or the worker failed).

    Three moments are copied while the worker is paused: ``lost`` before anything is forced (what the job made
    durable itself: after ``commit_job`` returned that must be the committed state), ``cut`` after an unrelated
    fsync (on ext4 every name and deletion durable, unsynced data not; on btrfs the log tree written: the names of
    files renamed after their fsync), ``control`` after ``syncfs``. Each is resumed; the file system's
    :attr:`~.disk.FileSystem.cleared` copy is also cleared, in the modes where that recomputes the same output."""
    fs = disk.FILE_SYSTEMS[cell.fs]
    image, mnt = os.path.join(cell_dir, "disk.img"), os.path.join(cell_dir, "mnt")
    work = os.path.join(cell_dir, "work")
    os.makedirs(work)
    cfg = {"root": os.path.join(mnt, "out"), "work": work, "algorithm": cell.algorithm, "mode": cell.mode,
           "fsyncs": cell.fsyncs}
    disk.make_image(image, fs)
    with disk.mounted(image, mnt, fs):
        if cell.mode != "error":
            sc.write_old_data(cfg["root"])
        sc.phase_prior(cfg)
        disk.syncfs(mnt)  # the state before the job is on the disk
        disk.write_canary(mnt)
        job = Job(cfg, cell.point)
        try:
            state = job.wait()
            if state == "exited" and cell.point != RETURNED:
                outcome.status = "n/a"
                return None
            if state.startswith("failed"):
                outcome.status = "broken"
                outcome.checks["job"] = state
                return None
            disk.copy_image(image, os.path.join(cell_dir, "lost.img"))
            disk.power_cut(mnt, "1")
            disk.copy_image(image, os.path.join(cell_dir, "cut.img"))
            disk.syncfs(mnt)
            disk.copy_image(image, os.path.join(cell_dir, "control.img"))
        finally:
            job.kill()
    checks: tuple[Step, ...] = (("state after reboot", check_after_reboot),)
    if cell.point == RETURNED:
        checks += (("committed when commit_job returned", check_committed),)
    checks += (("resume", resume),)
    img = {name: os.path.join(cell_dir, f"{name}.img") for name in ("lost", "cut", "clear", "control")}
    canaries = {"lost": ("absent", "empty"), "cut": fs.cut_canary}
    copies = [Copy(name, img[name], canaries[name], checks) for name in ("lost", "cut")]
    if cell.mode in IDEMPOTENT_MODES:
        disk.copy_image(img[fs.cleared], img["clear"])
        copies.append(Copy(fs.cleared, img["clear"], canaries[fs.cleared], (("clear", clear),)))
    copies.append(Copy("control", img["control"], ("written",),
                       (("state after reboot", check_after_reboot), ("resume", resume))))
    return cfg, copies


def all_cells() -> list[Cell]:
    return [Cell(a, m, p) for p in POINTS for m in MODES for a in ALGORITHMS]
