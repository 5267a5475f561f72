"""Durability under a power cut (not a process kill): a few cells of ``python -m tests.powercut`` in CI.

A SIGKILL never loses the page cache, so the crash matrix cannot see a rename that reaches the disk before the data
it names. These tests cut the power of a real ext4 (a loop device) while a real worker process is paused at a
commit point, reboot a byte copy of the disk and check what a reader finds and that the job goes on to exactly
once (:mod:`tests.powercut.cell`). ``test_the_simulation_loses_what_nobody_synced`` proves on every run that the
simulation still loses unsynced data on this kernel; without it a passing cell would prove nothing.
"""

from __future__ import annotations

import os

import pytest

from . import disk
from .cell import RETURNED, Cell, run_cell

pytestmark = pytest.mark.skipif(disk.unavailable() is not None,
                                reason=f"power-cut simulation impossible here: {disk.unavailable()}")

#: One cell per kind of step: a job commit that returned (v1, overwrite: the old rows must not be lost), a job
#: commit cut after its moves (v2, dynamic), task commits cut after the record (v1) and after the move (v2).
CI_CELLS = [
    Cell(1, "overwrite", RETURNED),
    Cell(2, "dynamic", "commit_job.after_moves"),
    Cell(1, "append", "commit_task.after_record"),
    Cell(2, "error", "commit_task.after_move"),
]


def test_the_simulation_loses_what_nobody_synced(tmp_path):
    """The premise, measured: nothing reaches the disk on its own (a copy taken then holds none of the new names);
    the cut makes every name and deletion durable but not the data nobody fsynced (0 bytes after the reboot),
    while fsynced data survives; the control (after syncfs) holds everything, the canary included."""
    image, mnt = str(tmp_path / "disk.img"), str(tmp_path / "mnt")
    disk.make_image(image)
    with disk.mounted(image, mnt):
        old = os.path.join(mnt, "old")
        with open(old, "wb") as fh:
            fh.write(b"o" * 4096)
        disk.syncfs(mnt)
        disk.write_canary(mnt)
        def publish(name: str, sync: bool) -> None:  # write a temporary file, then rename it to its name
            with open(os.path.join(mnt, f".{name}.tmp"), "wb") as fh:
                fh.write(b"n" * 4096)
                if sync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.rename(os.path.join(mnt, f".{name}.tmp"), os.path.join(mnt, name))

        publish("unsynced", sync=False)
        disk.copy_image(image, str(tmp_path / "lost.img"))
        publish("synced", sync=True)
        os.unlink(old)
        disk.power_cut(mnt, "test")
        disk.copy_image(image, str(tmp_path / "cut.img"))
        disk.syncfs(mnt)
        disk.copy_image(image, str(tmp_path / "control.img"))

    def sizes(copy: str) -> dict[str, int | None]:
        with disk.mounted(str(tmp_path / f"{copy}.img"), mnt):
            seen = {n: os.path.getsize(os.path.join(mnt, n)) if os.path.exists(os.path.join(mnt, n)) else None
                    for n in ("old", "unsynced", "synced")}
            return {**seen, "canary": disk.canary_state(mnt)}

    assert sizes("lost") == {"old": 4096, "unsynced": None, "synced": None, "canary": "absent"}
    assert sizes("cut") == {"old": None, "unsynced": 0, "synced": 4096, "canary": "empty"}
    assert sizes("control") == {"old": None, "unsynced": 4096, "synced": 4096, "canary": "written"}


@pytest.mark.parametrize("cell", CI_CELLS, ids=[c.name() for c in CI_CELLS])
def test_power_cut(cell, tmp_path):
    outcome = run_cell(cell, str(tmp_path))
    assert outcome.status == "pass", outcome.summary()
