"""Path rules: relative names that cannot escape the output root, partition directories, hidden names.

Everything the protocol writes for itself lives under names starting with ``_`` (``_temporary``, ``_commits``,
``_SUCCESS``), because pyarrow, Spark and Hive readers skip names starting with ``_`` or ``.``. User-supplied names
(file names, partition values) are checked here so that nothing they contain can reach outside the output root or
hide inside the protocol's own directories.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .errors import InvalidOutputSpec

#: Hive and Spark write a null partition value as this directory name; readers turn it back into null.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")
_FORBIDDEN_CHARS = set("/\\\x00") | {chr(c) for c in range(1, 32)} | {"\x7f"}


def is_hidden(relpath: str) -> bool:
    """True when any component of *relpath* starts with ``_`` or ``.``: readers skip it, and so does cleanup."""
    return any(part.startswith(("_", ".")) for part in relpath.split("/") if part)


def check_relative(name: str, *, what: str = "file name") -> str:
    """Return *name* normalised to a ``/``-separated relative path, or raise if it could escape the root.

    Refused: empty names, absolute paths, drive letters, backslashes, ``.`` and ``..`` components, NUL and control
    characters, and names whose components start with ``_`` or ``.`` (reserved for the protocol).
    """
    if not isinstance(name, str) or not name:
        raise InvalidOutputSpec(f"{what} must be a non-empty string, got {name!r}")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "://" in name:
        raise InvalidOutputSpec(f"{what} {name!r} is absolute; give a path relative to the output root")
    if any(ch in _FORBIDDEN_CHARS - {"/"} for ch in name):
        raise InvalidOutputSpec(f"{what} {name!r} contains a backslash, NUL or control character")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidOutputSpec(f"{what} {name!r} has an empty, '.' or '..' component (path traversal)")
        if part.startswith(("_", ".")):
            raise InvalidOutputSpec(
                f"{what} {name!r} has a component starting with '_' or '.', which readers skip and the commit "
                "protocol reserves for itself")
    return "/".join(parts)


def check_partition_key(key: str) -> str:
    """Partition column names become directory names: letters, digits, ``_`` and ``-``, not starting with ``_``."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise InvalidOutputSpec(
            f"partition column {key!r} cannot be a directory name: use letters, digits, '_' and '-', "
            "starting with a letter or digit")
    return key


def partition_value_to_str(key: str, value: object) -> str:
    """Render one partition value as it appears after ``key=`` in a directory name.

    Values that could escape the output root or hide the directory (``/``, ``\\``, ``..``, NUL, control characters,
    a leading ``.`` or ``_``) are rejected, not escaped: a silent rewrite would put rows where nobody looks for them.
    """
    if value is None:
        return NULL_PARTITION
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    if text == "":
        raise InvalidOutputSpec(f"partition value for {key!r} is an empty string; use null or a non-empty value")
    bad = sorted({repr(ch) for ch in text if ch in _FORBIDDEN_CHARS})
    if bad:
        raise InvalidOutputSpec(
            f"partition value {text!r} for {key!r} contains {', '.join(bad)}: it could escape the output root")
    if text in (".", "..") or (text.startswith((".", "_")) and text != NULL_PARTITION):
        raise InvalidOutputSpec(
            f"partition value {text!r} for {key!r} is '.', '..' or starts with '.' or '_' (path traversal or a "
            "directory readers skip)")
    return text


def partition_dir(keys: Iterable[str], values: Iterable[object]) -> str:
    """``k1=v1/k2=v2`` for one combination of partition values."""
    return "/".join(f"{key}={partition_value_to_str(key, value)}" for key, value in zip(keys, values))


def partition_of(relpath: str) -> str:
    """The partition directory of a file's relative path (``""`` for a file at the root)."""
    head, _, _ = relpath.rpartition("/")
    return head


def parse_partition(partition: str) -> Mapping[str, str]:
    """``{"k1": "v1", ...}`` from ``k1=v1/k2=v2``."""
    out: dict[str, str] = {}
    for part in filter(None, partition.split("/")):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out


def join(*parts: str) -> str:
    """Join relative path parts with ``/``, skipping empty ones."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))
