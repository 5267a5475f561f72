"""The local store's tree: its walks (files, the directories readers see), and the check of the tree it works in:
no symlink and no other volume (a mount point) below the output root, so that nothing is ever created, moved or
deleted outside it and a rename never fails with ``EXDEV`` half way through a commit
(:meth:`.local.LocalStore.check_tree`)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Container, Iterable, Iterator
from pathlib import Path

from ..errors import InvalidOutputSpec
from ..layout import COMMITS, TEMPORARY
from ..paths import is_hidden


def walk(top: str, visible_only: bool = False) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every file under the directory *top* as (path relative to it, directory entry); hidden subtrees pruned on
    request. Links are files here: never entered."""
    stack = [("", top)]
    while stack:
        prefix, path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if visible_only and entry.name.startswith(("_", ".")):
                continue
            name = f"{prefix}{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                stack.append((name + "/", entry.path))
            else:
                yield name, entry


def sized(files: Iterator[tuple[str, os.DirEntry[str]]], skip: Container[str] = ()) -> list[tuple[str, int]]:
    """``(path, size)`` of each file :func:`walk` yields, but those in *skip* (not even looked at: job commit skips
    its own 10,000 files) and those gone meanwhile."""
    out: list[tuple[str, int]] = []
    for name, entry in files:
        if name in skip:
            continue
        try:
            out.append((name, entry.stat(follow_symlinks=False).st_size))
        except FileNotFoundError:
            continue
    return out


def visible_entries(root: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every entry of the directories readers see under *root*, depth first, as (its directory relative to
    *root*, entry): hidden entries are yielded but never entered, nor are links."""
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, rel) if rel else root))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            yield rel, entry
            if not entry.name.startswith(("_", ".")) and entry.is_dir(follow_symlinks=False):
                stack.append(f"{rel}/{entry.name}" if rel else entry.name)


def check_tree(root: str, url: Callable[..., str], dirs: Iterable[str] = (), *, visible: bool = False) -> None:
    """Refuse, naming the path, a tree the protocol could leave through: a symlink, or a directory on another
    volume (a mount point), at or above any of *dirs* (the directories a step will create, move into or
    delete under) or, with *visible*, anywhere in the tree readers see. The root itself may be a link (it is
    where the table lives); nothing below it may. Called before the first visible change (set-up, the
    commit plan, a v2 task commit), so that a move never follows a link out of the root, a deletion never
    removes what a link pointed at, and a rename never fails with ``EXDEV`` after the markers are gone."""
    try:
        device = os.stat(root).st_dev
    except FileNotFoundError:
        return
    except NotADirectoryError:   # a regular file above the root: no directory can ever be made there
        blocker = next(p for p in Path(root).parents if p.exists())
        raise InvalidOutputSpec(f"output root {url()} lies below {blocker}, which is a file, not a directory; "
                                "give a target whose parents are directories (nothing was changed)") from None
    mount = next(iter(mounts_below(root)), None)
    if mount is not None:
        # a bind mount keeps the device number, yet rename(2) refuses to cross it (EXDEV) all the same
        raise InvalidOutputSpec(
            f"{url(mount)} is a mount point below the output root {url()}; renames cannot cross "
            "mounts, so a commit could stop half way. Keep the whole output root, _temporary included, on one "
            "mount; nothing was changed")
    checked: set[str] = set()
    for rel in dirs:
        parts = [p for p in rel.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in checked:
                continue
            checked.add(sub)
            try:
                st = os.lstat(f"{root}/{sub}")
            except FileNotFoundError:
                break  # created later, by the protocol, as a real directory of the root's volume
            _check_entry(root, url, sub, st, device)
    if visible:
        for rel, entry in visible_entries(root):
            sub = f"{rel}/{entry.name}" if rel else entry.name
            if is_hidden(entry.name) and sub not in (TEMPORARY, COMMITS):
                continue  # readers and the protocol never look there
            if entry.is_symlink() or entry.is_dir(follow_symlinks=False):
                _check_entry(root, url, sub, entry.stat(follow_symlinks=False), device)


def mounts_below(root: str) -> list[str]:
    """The mount points strictly below the root (relative paths), from ``/proc/self/mountinfo`` where the
    system has one; the device check of :meth:`check_tree` covers the other systems."""
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            lines = fh.read().decode("utf-8", "surrogateescape").splitlines()
    except OSError:
        return []
    real = os.path.realpath(root).rstrip("/") + "/"
    out = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        # the mount point is field 5, with space, tab, newline and backslash written as octal escapes
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        if point.startswith(real):
            out.append(point[len(real):])
    return sorted(out)


def _check_entry(root: str, url: Callable[..., str], rel: str, st: os.stat_result, device: int) -> None:
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(f"{root}/{rel}")
        raise InvalidOutputSpec(
            f"{url(rel)} is a symbolic link (to {target}); the protocol never follows links below the "
            "output root, where a move or deletion could reach outside it. Replace the link with a real "
            "directory, or make the link's target the output root; nothing was changed")
    if stat.S_ISDIR(st.st_mode) and st.st_dev != device:
        raise InvalidOutputSpec(
            f"{url(rel)} is on another volume than the output root {url()} (device {st.st_dev}, "
            f"not {device}); renames cannot cross volumes, so a commit could stop half way. Keep the whole "
            "output root, _temporary included, on one file system; nothing was changed")
