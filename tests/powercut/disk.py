"""A small ext4 disk on a loop device, and a power cut of it that is the same on every run.

A power cut loses what the kernel still holds in memory: data in the page cache that was never written, and
metadata changes of the journal's running transaction that was never committed. The disk as a power cut leaves
it is a byte copy of the image file taken at that moment; mounting the copy replays its journal, as a reboot does.

Where the cut falls must not depend on timers. ext4 writes on its own when its journal commit timer fires (5 s by
default), when the flusher writes back data older than ``vm.dirty_expire_centisecs`` (30 s), and when a rename
replaces a file (``auto_da_alloc`` starts writing the replacing file's data). So the disk is mounted with
``commit=3600,noauto_da_alloc`` and made without ``fast_commit`` and without lazy initialisation (no background
writes of inode tables), and the cut does exactly one thing: it fsyncs an unrelated new file on the same file
system. That commits ext4's running transaction -- every create, link, rename and unlink so far -- while file data
that nobody fsynced stays unwritten (delayed allocation: it has no blocks yet, so ordered mode has nothing to
flush). That is the worst realistic power cut: another process fsyncs, then the power goes. Measured here (Linux
6.18, e2fsprogs' defaults otherwise): a job of renames, links, a replace and an unlink made 0 writes to the device
until the cut, even after waiting 7 s (a copy then is the state before the job); the cut made 3 writes (16 KiB,
the journal commit); after the reboot every renamed, linked or replacing file was there with 0 bytes and the
unlinked file was gone; with the data fsynced before the rename every file was intact; a copy taken after a sync
(the control) was intact. With the default mount options the journal timer and ``auto_da_alloc`` wrote on their
own within the same 7 s (the outcome then depends on timing).

What is not under control is a writeback of the page cache that something else starts (``sync`` by another
process, the flusher after 30 s, memory pressure). It can only make a cut milder, and a canary tells when it
happened: :func:`write_canary` leaves an unsynced file before the job starts, older than any file of the job. A
sync writes every dirty file and the flusher writes the oldest first, so a copy that holds none of the canary's
data holds no data of the job that the job did not fsync itself; a copy that holds it is not a clean cut, and the
caller runs the cell again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

#: Mount options: no journal commit and no data writeback unless asked for (see the module docstring).
MOUNT_OPTIONS = "commit=3600,noauto_da_alloc"
IMAGE_MIB = 48
CANARY = ".powercut-canary"
CANARY_BYTES = b"canary" * 8192
TOOLS = ("mkfs.ext4", "losetup", "mount", "umount", "cp")


def unavailable() -> str | None:
    """Why this machine cannot simulate a power cut (not root, no loop devices, tools missing), or ``None``."""
    if os.geteuid() != 0:
        return "needs root (loop devices and mount)"
    if not os.path.exists("/dev/loop-control") or not os.access("/dev/loop-control", os.R_OK | os.W_OK):
        return "no loop devices (/dev/loop-control)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    return None


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


def make_image(path: str, mib: int = IMAGE_MIB) -> None:
    """A fresh ext4 in the image file *path* (sparse: a few hundred KiB on the host)."""
    with open(path, "wb") as fh:
        fh.truncate(mib << 20)
    _run("mkfs.ext4", "-q", "-F", "-O", "^fast_commit", "-E", "lazy_itable_init=0,lazy_journal_init=0", path)


def copy_image(src: str, dst: str) -> None:
    """The disk as it is now: what the loop device has written to the image, nothing of the page cache above it."""
    _run("cp", "--sparse=always", src, dst)


@contextlib.contextmanager
def mounted(image: str, mountpoint: str, options: str = MOUNT_OPTIONS) -> Iterator[str]:
    """*image* on a new loop device, mounted at *mountpoint* (a mount of a copy replays its journal: the reboot).
    Yields the loop device; unmounts and detaches it, that device only, whatever happens."""
    os.makedirs(mountpoint, exist_ok=True)
    device = _run("losetup", "--find", "--show", image)
    try:
        _run("mount", "-t", "ext4", "-o", options, device, mountpoint)
        try:
            yield device
        finally:
            _wait_closed(mountpoint)
            try:
                _run("umount", mountpoint)
            except RuntimeError:
                # take it out of the tree whatever holds it (the device goes when the holder lets go), then say so
                subprocess.run(["umount", "--lazy", mountpoint], capture_output=True)
                raise
    finally:
        _run("losetup", "--detach", device)  # still busy: the kernel detaches it when the last user goes


def _open_under(mountpoint: str) -> list[str]:
    """Files under *mountpoint* this process still holds open."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor, too)
            continue
        if target.startswith(mountpoint + "/"):
            held.append(target)
    return held


def _wait_closed(mountpoint: str, deadline: float = 30.0) -> None:
    """Wait until this process holds no file under *mountpoint*: pyarrow closes the files a dataset scan opened
    on its I/O threads, after the scan returned (seen here about once in 20 reads, for a fraction of a
    millisecond), and an unmount meanwhile fails with "target is busy"."""
    end = time.monotonic() + deadline
    while _open_under(mountpoint) and time.monotonic() < end:
        time.sleep(0.01)


def syncfs(path: str) -> None:
    """Write back everything of the file system holding *path*, and only that one (``os.sync`` would flush every
    file system of the machine, other tests' too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), f"syncfs({path})")
    finally:
        os.close(fd)


def power_cut(mountpoint: str, tag: str) -> None:
    """Commit ext4's running transaction and nothing else: fsync a new file unrelated to the job (*tag* names it,
    so that each cut changes something and really commits). The copy taken next is the disk after the power cut."""
    fd = os.open(os.path.join(mountpoint, f".powercut-{tag}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, b"cut")
        os.fsync(fd)
    finally:
        os.close(fd)


def write_canary(mountpoint: str) -> None:
    """An unsynced file written just before the job starts (see the module docstring)."""
    with open(os.path.join(mountpoint, CANARY), "wb") as fh:
        fh.write(CANARY_BYTES)


def canary_state(mountpoint: str) -> str:
    """On a rebooted copy: ``"empty"`` (a clean cut: the journal was committed, no data written back),
    ``"written"`` or ``"partly written"`` (the page cache was written back: a control, or a cut something else
    made milder) or ``"absent"`` (no journal commit since the canary was written)."""
    path = os.path.join(mountpoint, CANARY)
    if not os.path.exists(path):
        return "absent"
    with open(path, "rb") as fh:
        data = fh.read()
    if not data:
        return "empty"
    return "written" if data == CANARY_BYTES else "partly written"
