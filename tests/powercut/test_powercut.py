"""Durability under a power cut (not a process kill): a few cells of ``python -m tests.powercut`` in CI, on ext4 and
on btrfs.

A SIGKILL never loses the page cache, so the crash matrix cannot see a rename that reaches the disk before the data
it names. These tests cut the power of a real file system (a loop device) while a real worker process is paused at
a commit point, reboot a byte copy of the disk and check what a reader finds and that the job goes on to exactly
once (:mod:`tests.powercut.cell`). ext4 commits all metadata in order, so it shows lost data; btrfs makes durable
only what each fsync logged, so it also shows a missing directory fsync (:mod:`tests.powercut.disk`). The premise
tests prove on every run that each simulation still loses what nobody synced on this kernel, and the loss tests
that the btrfs simulation reports a store that breaks the fsync rules; without them a passing cell would prove
nothing. Skipped only without root or loop devices: a file system whose tools are missing is installed, or fails.
"""

from __future__ import annotations

import os

import pytest

from . import disk
from .cell import RETURNED, Cell, run_cell

pytestmark = pytest.mark.skipif(disk.unavailable() is not None,
                                reason=f"power-cut simulation impossible here: {disk.unavailable()}")

#: One cell per kind of step on ext4: a job commit that returned (v1, overwrite: the old rows must not be lost), a
#: job commit cut after its moves (v2, dynamic), task commits cut after the record (v1) and after the move (v2).
#: On btrfs, the steps where a store without directory fsyncs loses (``--fsyncs files``): a v1 job commit after
#: its moves and after its commit log, a v2 one after ``_SUCCESS``, both having returned, and a v2 task commit.
CI_CELLS = [
    Cell(1, "overwrite", RETURNED),
    Cell(2, "dynamic", "commit_job.after_moves"),
    Cell(1, "append", "commit_task.after_record"),
    Cell(2, "error", "commit_task.after_move"),
    Cell(1, "dynamic", "commit_job.after_moves", "btrfs"),
    Cell(1, "append", "commit_job.after_commit_log", "btrfs"),
    Cell(2, "overwrite", "commit_job.after_success", "btrfs"),
    Cell(1, "overwrite", RETURNED, "btrfs"),
    Cell(2, "dynamic", RETURNED, "btrfs"),
    Cell(2, "error", "commit_task.after_move", "btrfs"),
]


def ready(name: str) -> disk.FileSystem:
    """The file system *name*, its tools installed: a simulation that cannot run fails, it is never skipped."""
    fs = disk.FILE_SYSTEMS[name]
    disk.install_tools(fs)
    why = disk.unavailable(fs)
    if why:
        pytest.fail(f"cannot simulate a power cut of {name}: {why}; install {fs.package}, or run as root with "
                    "apt-get")
    return fs


def _write(path: str, sync: bool) -> None:
    with open(path, "wb") as fh:
        fh.write(b"n" * 4096)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sizes(image: str, mnt: str, fs: disk.FileSystem, names: list[str]) -> dict[str, int | None]:
    """After a reboot of *image*: each name's size (``None``: absent), and the canary's state."""
    with disk.mounted(image, mnt, fs):
        seen = {n: os.path.getsize(os.path.join(mnt, n)) if os.path.exists(os.path.join(mnt, n)) else None
                for n in names}
        return {**seen, "canary": disk.canary_state(mnt)}


def test_the_simulation_loses_what_nobody_synced(tmp_path):
    """The premise on ext4, measured: nothing reaches the disk on its own (a copy taken then holds none of the new
    names); the cut makes every name and deletion durable but not the data nobody fsynced (0 bytes after the
    reboot), while fsynced data survives; the control (after syncfs) holds everything, the canary included."""
    fs = ready("ext4")
    image, mnt = str(tmp_path / "disk.img"), str(tmp_path / "mnt")
    disk.make_image(image, fs)
    with disk.mounted(image, mnt, fs):
        old = os.path.join(mnt, "old")
        with open(old, "wb") as fh:
            fh.write(b"o" * 4096)
        disk.syncfs(mnt)
        disk.write_canary(mnt)
        def publish(name: str, sync: bool) -> None:  # write a temporary file, then rename it to its name
            _write(os.path.join(mnt, f".{name}.tmp"), sync)
            os.rename(os.path.join(mnt, f".{name}.tmp"), os.path.join(mnt, name))

        publish("unsynced", sync=False)
        disk.copy_image(image, str(tmp_path / "lost.img"))
        publish("synced", sync=True)
        os.unlink(old)
        disk.power_cut(mnt, "test")
        disk.copy_image(image, str(tmp_path / "cut.img"))
        disk.syncfs(mnt)
        disk.copy_image(image, str(tmp_path / "control.img"))

    names = ["old", "unsynced", "synced"]
    assert _sizes(str(tmp_path / "lost.img"), mnt, fs, names) == \
        {"old": 4096, "unsynced": None, "synced": None, "canary": "absent"}
    assert _sizes(str(tmp_path / "cut.img"), mnt, fs, names) == \
        {"old": None, "unsynced": 0, "synced": 4096, "canary": "empty"}
    assert _sizes(str(tmp_path / "control.img"), mnt, fs, names) == \
        {"old": None, "unsynced": 4096, "synced": 4096, "canary": "written"}


def test_btrfs_keeps_only_what_was_fsynced(tmp_path):
    """The premise on btrfs, measured: with nothing forced (``lost``) the disk holds exactly what each fsync
    logged -- a rename of a fsynced file is lost unless its directory is fsynced, a new file's fsync keeps its
    name, an unlink is undone even when another file of its directory was fsynced after it (ext4 would keep the
    rename and the unlink); the cut (an unrelated fsync) adds the new name of the renamed fsynced file, not the
    unlink; the control holds everything, the canary included."""
    fs = ready("btrfs")
    image, mnt = str(tmp_path / "disk.img"), str(tmp_path / "mnt")
    disk.make_image(image, fs)
    with disk.mounted(image, mnt, fs):
        for d in ("renamed", "kept", "new", "unlinked"):
            os.mkdir(os.path.join(mnt, d))
        _write(os.path.join(mnt, "unlinked", "victim"), sync=True)
        disk.syncfs(mnt)
        disk.write_canary(mnt)
        _write(os.path.join(mnt, "new", "file"), sync=True)
        _write(os.path.join(mnt, "kept", ".file.tmp"), sync=True)
        os.rename(os.path.join(mnt, "kept", ".file.tmp"), os.path.join(mnt, "kept", "file"))
        _fsync_dir(os.path.join(mnt, "kept"))
        os.unlink(os.path.join(mnt, "unlinked", "victim"))
        _write(os.path.join(mnt, "unlinked", "other"), sync=True)
        # last: any later fsync of this file system would write this rename to the log tree too
        _write(os.path.join(mnt, "renamed", ".file.tmp"), sync=True)
        os.rename(os.path.join(mnt, "renamed", ".file.tmp"), os.path.join(mnt, "renamed", "file"))
        disk.copy_image(image, str(tmp_path / "lost.img"))
        disk.power_cut(mnt, "test")
        disk.copy_image(image, str(tmp_path / "cut.img"))
        disk.syncfs(mnt)
        disk.copy_image(image, str(tmp_path / "control.img"))

    names = ["renamed/.file.tmp", "renamed/file", "kept/.file.tmp", "kept/file", "new/file", "unlinked/victim",
             "unlinked/other"]
    lost = {"renamed/.file.tmp": 4096, "renamed/file": None, "kept/.file.tmp": None, "kept/file": 4096,
            "new/file": 4096, "unlinked/victim": 4096, "unlinked/other": 4096, "canary": "absent"}
    assert _sizes(str(tmp_path / "lost.img"), mnt, fs, names) == lost
    assert _sizes(str(tmp_path / "cut.img"), mnt, fs, names) == \
        {**lost, "renamed/.file.tmp": None, "renamed/file": 4096}
    assert _sizes(str(tmp_path / "control.img"), mnt, fs, names) == \
        {**lost, "renamed/.file.tmp": None, "renamed/file": 4096, "unlinked/victim": None, "canary": "written"}


@pytest.mark.parametrize("cell", CI_CELLS, ids=[c.name() for c in CI_CELLS])
def test_power_cut(cell, tmp_path):
    ready(cell.fs)
    outcome = run_cell(cell, str(tmp_path))
    assert outcome.status == "pass", outcome.summary()


#: Cells a store that breaks the fsync rules fails on btrfs, each with a check of the ``lost`` copy that must fail:
#: fsyncing nothing, the committed state is not there after ``commit_job`` returned; fsyncing files but no
#: directory, the job cannot be resumed from its commit log (the same cell passes on ext4: an fsync there commits
#: every directory entry made before it).
LOSSES = [
    (Cell(1, "overwrite", RETURNED, "btrfs", "none"), "lost: committed when commit_job returned"),
    (Cell(1, "append", "commit_job.after_commit_log", "btrfs", "files"), "lost: resume"),
]


@pytest.mark.parametrize(("cell", "check"), LOSSES, ids=[c.name() for c, _ in LOSSES])
def test_the_btrfs_simulation_reports_loss(cell, check, tmp_path):
    """The btrfs simulation can fail: a job on a store that leaves out fsyncs loses, and the control still passes
    (``fail``, not ``broken``)."""
    ready(cell.fs)
    outcome = run_cell(cell, str(tmp_path))
    assert outcome.status == "fail", outcome.summary()
    assert check in outcome.failures(), outcome.summary()
