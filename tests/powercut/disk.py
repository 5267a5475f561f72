"""A small disk on a loop device (ext4 or btrfs), and a power cut of it that is the same on every run.

A power cut loses what the kernel still holds in memory: data in the page cache that was never written, and
metadata changes it never committed. The disk as a power cut leaves it is a byte copy of the image file taken at
that moment; mounting the copy replays its journal (ext4) or log tree (btrfs), as a reboot does. Where the cut falls
must not depend on timers, so each file system is made and mounted to write nothing on its own (:data:`EXT4`,
:data:`BTRFS`). Three copies are taken while the job is paused: ``lost`` with nothing forced, ``cut`` after
:func:`power_cut` (an fsync of an unrelated new file: another process fsyncs, then the power goes) and ``control``
after :func:`syncfs` (the same moment without the power loss). What the first two hold differs by file system.

**ext4** writes on its own when its journal commit timer fires (5 s by default), when the flusher writes back data
older than ``vm.dirty_expire_centisecs`` (30 s), and when a rename replaces a file (``auto_da_alloc`` starts
writing the replacing file's data). So the disk is mounted with ``commit=3600,noauto_da_alloc`` and made without
``fast_commit`` and without lazy initialisation (no background writes of inode tables). One journal commits every
change in order, so the job's own fsyncs make every earlier create, link, rename and unlink durable (``lost``), and
the cut commits the running transaction -- every change so far -- while file data that nobody fsynced stays
unwritten (delayed allocation: it has no blocks yet, so ordered mode has nothing to flush). That is the worst
realistic power cut on ext4. Measured here (Linux 6.18, e2fsprogs' defaults otherwise): a job of renames, links, a
replace and an unlink made 0 writes to the device until the cut, even after waiting 7 s (a copy then is the state
before the job); the cut made 3 writes (16 KiB, the journal commit); after the reboot every renamed, linked or
replacing file was there with 0 bytes and the unlinked file was gone; with the data fsynced before the rename
every file was intact; a copy taken after a sync (the control) was intact. With the default mount options the
journal timer and ``auto_da_alloc`` wrote on their own within the same 7 s (the outcome then depends on timing).
What ext4 cannot show is a missing directory fsync followed by any other fsync: that fsync commits it too.

**btrfs** commits metadata in transactions (every 30 s by default; ``commit=3600`` here, ``nodiscard`` so that no
freed extent is trimmed in the background) and makes an fsync durable without one: the fsync writes the inode's
items -- data, size, names -- to the subvolume's log tree, which the next mount replays. Nothing else reaches the
disk, so ``lost`` holds what the job's own fsyncs logged: a directory fsync the job left out is missing there,
whatever was fsynced after it. Measured here (Linux 6.18, btrfs-progs 6.2, a 128 MiB disk synced before each case):
nothing fsynced, 0 writes to the device in 10 s; a file written, fsynced, then renamed: after the reboot the old
name only, with a directory fsync after the rename the new name only (ext4 and XFS keep the new name as soon as
anything else is fsynced); a new file fsynced, its directory never: there with its data (its fsync logs its name,
and its new parent directory's); an unlink: undone unless its directory is fsynced, even after an fsync of another
new file in the same directory (ext4 and XFS keep it); a hard link, then an fsync of the file: both names. The job's
own fsyncs sometimes commit the whole transaction: btrfs cannot log in full a directory renamed in the same
transaction, so a directory fsync that must log one commits instead (traced in a v1 job: the fsync of the output
root after job commit renamed a partition directory into it, and that of ``_trash`` after the cleanup removed the
job's tree); from there on the cell's ``lost`` copy holds every change made before, as on ext4 (the command counts
those cells). The cut does not commit the transaction either: it writes the log tree, which btrfs also fills at a
rename of a file fsynced earlier in the same transaction (its new name); measured, the rename above is then durable,
the unlink still not -- an order of metadata no ext4 cut produces, kept as btrfs' ``cut``. A transaction commit (the
timer's; ``BTRFS_IOC_START_SYNC`` forces one without writing data) leaves every name and deletion durable and
unsynced data at 0 bytes (measured): ext4's cut again, which the ext4 matrix covers, so it is not taken.

**XFS** is not simulated: its log commits metadata in order, as ext4's journal does. Measured (xfsprogs 6.1):
the first fsync of a job made the creation of an unrelated unsynced file durable, an unlink followed by an fsync
of another file was durable, and the cut made every rename durable -- ext4's states; its log worker also forces
the log every 30 s, a setting of the whole machine (``fs.xfs.xfssyncd_centisecs``), not of a mount.

What is not under control is a writeback of the page cache that something else starts (``sync`` by another
process, the flusher after 30 s, memory pressure). It can only make a cut milder, and a canary tells when it
happened: :func:`write_canary` leaves an unsynced file before the job starts, older than any file of the job. A
sync writes every dirty file and the flusher writes the oldest first, so a copy that holds none of the canary's
data holds no data of the job that the job did not fsync itself; a copy that holds it is not a clean cut, and the
caller runs the cell again. (On btrfs written data is on the disk only once a transaction commits; a copy that
shows the canary's data was taken after a writeback and a commit.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..support import apt_install

CANARY = ".powercut-canary"
CANARY_BYTES = b"canary" * 8192
TOOLS = ("losetup", "mount", "umount", "cp")


@dataclass(frozen=True)
class FileSystem:
    """How one kind of file system is made, mounted and cut (the module docstring says why)."""

    name: str
    #: the Debian package of its tools, installed when missing (:func:`install_tools`)
    package: str
    mkfs: tuple[str, ...]
    image_mib: int
    #: mount options: no commit and no data writeback unless asked for
    options: str
    #: an fsync commits every earlier change of the file system (one journal, in order)
    ordered: bool
    #: what a clean cut leaves of the canary on the ``cut`` copy
    cut_canary: tuple[str, ...]
    #: the copy that is also cleared (besides resumed): the one a missing fsync hurts most
    cleared: str


EXT4 = FileSystem("ext4", "e2fsprogs",
                  ("mkfs.ext4", "-q", "-F", "-O", "^fast_commit", "-E", "lazy_itable_init=0,lazy_journal_init=0"),
                  48, "commit=3600,noauto_da_alloc", True, ("empty",), "cut")
#: 128 MiB: mkfs.btrfs refuses less than 109 MiB (the image is sparse: a few MiB on the host)
BTRFS = FileSystem("btrfs", "btrfs-progs", ("mkfs.btrfs", "-q", "-f"), 128, "commit=3600,nodiscard", False,
                   ("absent", "empty"), "lost")
FILE_SYSTEMS = {fs.name: fs for fs in (EXT4, BTRFS)}


def unavailable(fs: FileSystem | None = None) -> str | None:
    """Why this machine cannot simulate a power cut (not root, no loop devices) or, given *fs*, cannot make and
    mount one (tools missing); ``None`` when it can."""
    if os.geteuid() != 0:
        return "needs root (loop devices and mount)"
    if not os.path.exists("/dev/loop-control") or not os.access("/dev/loop-control", os.R_OK | os.W_OK):
        return "no loop devices (/dev/loop-control)"
    missing = [t for t in ((fs.mkfs[0],) if fs else ()) + TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}" + (f" (Debian package {fs.package})" if fs else "")
    return None


def install_tools(fs: FileSystem) -> None:
    """Install *fs*'s tools with apt-get when they are missing and this is root (as CI is): a power cut of *fs*
    that cannot be simulated fails the tests, it is not skipped (:func:`unavailable` then says what is missing)."""
    if not shutil.which(fs.mkfs[0]):
        apt_install(fs.package)


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


def make_image(path: str, fs: FileSystem = EXT4) -> None:
    """A fresh *fs* in the image file *path* (sparse: a few MiB at most on the host)."""
    with open(path, "wb") as fh:
        fh.truncate(fs.image_mib << 20)
    _run(*fs.mkfs, path)


def copy_image(src: str, dst: str) -> None:
    """The disk as it is now: what the loop device has written to the image, nothing of the page cache above it."""
    _run("cp", "--sparse=always", src, dst)


@contextlib.contextmanager
def mounted(image: str, mountpoint: str, fs: FileSystem = EXT4) -> Iterator[str]:
    """*image* on a new loop device, mounted at *mountpoint* as *fs* (a mount of a copy replays its journal or log
    tree: the reboot). Copies of one btrfs share its UUID; Linux mounts a single-device copy beside another under
    a temporary one (seen here), and the harness mounts them one at a time anyway.
    Yields the loop device; unmounts and detaches it, that device only, whatever happens."""
    os.makedirs(mountpoint, exist_ok=True)
    device = _run("losetup", "--find", "--show", image)
    try:
        _run("mount", "-t", fs.name, "-o", fs.options, device, mountpoint)
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
    """Fsync a new file unrelated to the job (*tag* names it, so that each cut changes something and really
    commits): on ext4 that commits the running transaction and nothing else, on btrfs it writes the log tree. The
    copy taken next is the disk after the power cut."""
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
    """On a rebooted copy: ``"empty"`` (a clean cut: the journal or a btrfs transaction was committed, no data
    written back), ``"written"`` or ``"partly written"`` (the page cache was written back: a control, or a cut
    something else made milder) or ``"absent"`` (no commit since the canary was written: on btrfs, a cut that only
    wrote the log tree)."""
    path = os.path.join(mountpoint, CANARY)
    if not os.path.exists(path):
        return "absent"
    with open(path, "rb") as fh:
        data = fh.read()
    if not data:
        return "empty"
    return "written" if data == CANARY_BYTES else "partly written"
