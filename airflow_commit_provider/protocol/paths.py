"""Path rules: relative names that cannot escape the output root, partition directories, hidden names.

Everything the protocol writes for itself lives under names starting with ``_`` (``_temporary``, ``_commits``,
``_SUCCESS``), because pyarrow, Spark and Hive readers skip names starting with ``_`` or ``.``. User-supplied file
names are checked here so that nothing they contain can reach outside the output root or hide inside the protocol's
own directories. Partition values are escaped as Spark and Hive escape them (``%XX``), so that any value survives
the path: hive readers that unescape read back exactly the value written (invariant I11).
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


#: Spark's ``ExternalCatalogUtils.charToEscape`` (copied from Hive's ``FileUtils.escapePathName``) on POSIX: ASCII
#: 01-1F, ``"  #  %  '  *  /  :  =  ?  \\``, 7F, ``{  [  ]  ^``; plus NUL, which no file name can hold. Spark adds
#: space, ``<``, ``>`` and ``|`` only when the JVM runs on Windows; these are left as they are, as Spark on Linux does.
PATH_ESCAPE_CHARS = frozenset(chr(c) for c in range(0x20)) | frozenset("\"#%'*/:=?\\\x7f{[]^")

#: The longest directory component most file systems take (NAME_MAX on Linux, macOS, ext4, XFS), in UTF-8 bytes;
#: object stores take longer keys, but the output must stay copyable to a file system.
MAX_NAME_BYTES = 255

_HEX = frozenset("0123456789abcdefABCDEF")


def escape_path_name(text: str) -> str:
    """Spark's ``escapePathName``: every character of :data:`PATH_ESCAPE_CHARS` becomes ``%XX`` (uppercase hex).

    Everything else, non-ASCII included, is kept as it is. ``%`` itself is escaped, so the result unescapes back to
    *text* exactly (:func:`unescape_path_name`), and holds no ``/``, ``\\``, NUL or control character.
    """
    return "".join(f"%{ord(ch):02X}" if ch in PATH_ESCAPE_CHARS else ch for ch in text)


def unescape_path_name(text: str) -> str:
    """Spark's ``unescapePathName``: ``%XX`` (two hex digits, either case) becomes that character; any other ``%``
    stays as it is. (Spark's ``Integer.parseInt`` would also take ``%+A``; only hex digits are taken here.)"""
    if "%" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "%" and i + 2 < n and text[i + 1] in _HEX and text[i + 2] in _HEX:
            out.append(chr(int(text[i + 1:i + 3], 16)))
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _shorten(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def partition_value_to_str(key: str, value: object) -> str:
    """Render one partition value as it appears after ``key=`` in a directory name, escaped as Spark and Hive do.

    ``None`` is ``__HIVE_DEFAULT_PARTITION__`` (readers turn it back into null). Dates and times are written in ISO
    format, other values as ``str(value)``; then every character of :data:`PATH_ESCAPE_CHARS` becomes ``%XX``, so
    ``a/b`` is ``a%2Fb`` and ``a%20b`` is ``a%2520b``, and hive readers that unescape (pyarrow, duckdb, Spark, Hive,
    Trino) read back exactly the value written. With ``/`` and ``\\`` escaped and the name starting with ``key=``,
    values like ``.``, ``..``, ``_x`` or ``.x`` can neither leave the output root nor hide the directory: they are
    accepted.

    Refused, with :class:`InvalidOutputSpec` naming the key and the value, because no directory name gives them back:

    - the empty string. Spark and Hive write it as the null partition, so it would read back as null; the caller
      decides, by writing ``None``, whether null is what is meant.
    - the string ``__HIVE_DEFAULT_PARTITION__``, which readers take for null.
    - text that is not valid Unicode (lone surrogates): it has no UTF-8 file name.
    - a ``key=<escaped value>`` longer than :data:`MAX_NAME_BYTES` bytes of UTF-8 (:func:`partition_component`).
    """
    if value is None:
        return NULL_PARTITION
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    if text == "":
        raise InvalidOutputSpec(
            f"partition value for {key!r} is an empty string, which cannot be a directory name: Spark and Hive write "
            f"it as the null partition {NULL_PARTITION}, so it would read back as null; write None if null is meant, "
            "or a non-empty value")
    if text == NULL_PARTITION:
        raise InvalidOutputSpec(
            f"partition value {text!r} for {key!r} is the name of the null partition: readers would read it back as "
            "null; write None if null is meant")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidOutputSpec(
            f"partition value {_shorten(text)} for {key!r} is not valid Unicode ({exc.reason}): it has no UTF-8 "
            "directory name") from None
    return escape_path_name(text)


def partition_component(key: str, value: object) -> str:
    """``key=<escaped value>``: one directory name, at most :data:`MAX_NAME_BYTES` bytes of UTF-8."""
    component = f"{key}={partition_value_to_str(key, value)}"
    size = len(component.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        shown = value.isoformat() if hasattr(value, "isoformat") else str(value)
        raise InvalidOutputSpec(
            f"partition value {_shorten(shown)} for {key!r} is too long: the directory name {key}=... would be "
            f"{size} bytes of UTF-8 once escaped, over the {MAX_NAME_BYTES}-byte limit of file names")
    return component


def partition_dir(keys: Iterable[str], values: Iterable[object]) -> str:
    """``k1=v1/k2=v2`` for one combination of partition values, each value escaped (:func:`partition_value_to_str`).

    Raises :class:`InvalidOutputSpec` for a value no directory name gives back, or a ``key=value`` component longer
    than :data:`MAX_NAME_BYTES` bytes.
    """
    return "/".join(partition_component(key, value) for key, value in zip(keys, values))


def by_directory(rels: Iterable[str]) -> dict[str, set[str]]:
    """*rels* grouped by their directory (``""``: the root): one listing per directory answers for all of them."""
    wanted: dict[str, set[str]] = {}
    for rel in rels:
        head, _, name = rel.rpartition("/")
        wanted.setdefault(head, set()).add(name)
    return wanted


def partition_of(relpath: str) -> str:
    """The partition directory of a file's relative path (``""`` for a file at the root)."""
    head, _, _ = relpath.rpartition("/")
    return head


def parse_partition(partition: str) -> Mapping[str, str]:
    """``{"k1": "v1", ...}`` from ``k1=v1/k2=v2``, keys and values unescaped (Spark's ``parsePathFragment``).

    The null partition stays the string ``__HIVE_DEFAULT_PARTITION__``.
    """
    out: dict[str, str] = {}
    for part in filter(None, partition.split("/")):
        key, sep, value = part.partition("=")
        if sep:
            out[unescape_path_name(key)] = unescape_path_name(value)
    return out


def join(*parts: str) -> str:
    """Join relative path parts with ``/``, skipping empty ones."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def split_partition_suffix(path: str) -> tuple[str, str]:
    """``(root, partition)`` of a path or URL whose last segments are partition directories (``key=value``, as
    :func:`partition_dir` names them): ``("s3://lake/events", "day=2024-01-01")`` for
    ``s3://lake/events/day=2024-01-01``; ``(path, "")`` when its last segment is no partition directory."""
    parts = path.rstrip("/").split("/")
    end = len(parts)
    while end > 1 and "=" in parts[end - 1][1:]:
        end -= 1
    return "/".join(parts[:end]), "/".join(parts[end:])
