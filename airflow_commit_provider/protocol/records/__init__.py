"""The protocol's records: JSON documents whose existence and content are the state of a job.

Nothing about a job lives in process memory or in Airflow's XCom: any process that can read the output root can
tell what is committed, which is what lets a retry, a cleared DAG run or a zombie act safely.

==================  ===============================  =========================================
record              where (JobLayout)                written
==================  ===============================  =========================================
job record          ``job_record``                   once per generation (exclusive create)
app-attempt marker  ``app_marker(app)``              once per application attempt (exclusive)
attempt claim       ``attempt_claim(app, t, a)``     exclusive: ``failed``, or the task record
task commit record  ``task_record(app, t)``          exclusive: **the commit decision**
commit plan         ``plan(job_uuid)``               once, before the first move of job commit
abort record        ``abort_record(app, job_uuid)``  by the failed run's teardown
commit log          ``commit_log``                   at job commit; outlives ``_temporary``
error-mode claim    ``error_claim``                  exclusive, before the plan (mode ``error``)
purge record        ``purge_record(run)``            by a purge, per run of the generation
``_SUCCESS``        ``SUCCESS`` (and per partition)  last
compaction plan     ``compaction_plan(job_uuid)``    once, before a compaction's first merge
input claim         ``input_claim(file, n)``         exclusive: who holds a compaction's input
==================  ===============================  =========================================

The paths themselves are named in one place, :class:`.layout.JobLayout` (and drawn in docs/design.md's layout
section, which a test checks against it).

The records the protocol decides by are typed, each with its fields, ``to_json``/``from_json`` and validation: the
task commit record in :mod:`.taskrecord`, the job record, commit plan and commit log in :mod:`.jobrecord`, the
error-mode claim in :mod:`.targetclaim`. The app-attempt marker and the attempt claims are existence checks and the
abort record is a report (their content is for people, read as plain dicts); ``_SUCCESS`` is checked by
:func:`validate_success`, which the sensor and any reader can call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import msgspec

from ..errors import CorruptRecord
from ..stores import Store

FORMAT = "airflow-commit-provider"
VERSION = 1

#: Keys every ``_SUCCESS`` manifest must carry, with their JSON types.
SUCCESS_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "version": int,
    "committer": str,
    "algorithm": (int, str),
    "mode": str,
    "job_id": str,
    "job_uuid": str,
    "app_attempt": int,
    "started": str,
    "finished": str,
    "files": list,
    "totals": dict,
    "durations": dict,
    "diagnostics": dict,
}


def now_iso() -> str:
    """UTC timestamp with microseconds, as every record writes it."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def encode(value: Any) -> bytes:
    """Compact JSON, as every record is written."""
    return json.dumps(value, sort_keys=False, separators=(",", ":"), default=str).encode()


def encode_plain(value: Any) -> bytes:
    """:func:`encode` of a long list of strings, integers, ``None``, booleans, and lists and dicts of those (no
    floats: msgspec writes some, ``1e-05``, otherwise than json): a job's files and tasks, 10,000 entries and more.
    msgspec encodes it in a fifth of json's time; its bytes are json's wherever no string needs an escape, which
    bytes that are ASCII without a backslash show (json escapes every non-ASCII character, msgspec writes UTF-8).
    Anything else is encoded again by :func:`encode`."""
    try:
        out = msgspec.json.encode(value)
    except (TypeError, msgspec.MsgspecError):   # a value msgspec does not know: json's ``default=str`` does
        return encode(value)
    return out if out.isascii() and b"\\" not in out else encode(value)


class Encoded(bytes):
    """A value already encoded by :func:`encode`, which :func:`dumps` puts in as it is, wherever it stands in the
    record: a long list that goes into several records (a manifest's files and tasks: the commit log, the root's
    and every partition's ``_SUCCESS``) is encoded once per commit."""


def dumps(kind: str, body: Mapping[str, Any], **encoded: bytes) -> bytes:
    """Serialise a record of *kind*, stamping format and version. Values of *body* that are :class:`Encoded`, and
    *encoded* (after *body*), are already JSON: the bytes are those of :func:`encode` over the plain values."""
    doc = {"format": f"{FORMAT}/{kind}", "version": VERSION, **body}
    if not encoded and not any(value.__class__ is Encoded for value in doc.values()):
        return encode(doc)
    parts = [encode(key) + b":" + (value if value.__class__ is Encoded else encode(value))
             for key, value in doc.items()]
    parts += [encode(key) + b":" + value for key, value in encoded.items()]
    return b"{" + b",".join(parts) + b"}"


def parse(kind: str, data: bytes, where: str) -> Any:
    """The JSON of a record of *kind*; :class:`CorruptRecord` naming *where* when it is not JSON."""
    try:
        return json.loads(data.decode())   # records are UTF-8: decoding first skips json's encoding detection
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{where} is not valid JSON ({exc}); the {kind} record is corrupt or truncated") from exc


def check(kind: str, doc: Any, where: str) -> dict[str, Any]:
    """*doc* if it is a record of *kind* of this version; :class:`CorruptRecord` naming *where* if not."""
    if not isinstance(doc, dict) or doc.get("format") != f"{FORMAT}/{kind}":
        raise CorruptRecord(f"{where} is not an {FORMAT} {kind} record (format={doc.get('format')!r})"
                            if isinstance(doc, dict) else f"{where} is not a JSON object")
    if doc.get("version") != VERSION:
        raise CorruptRecord(f"{where} has unsupported record version {doc.get('version')!r}")
    return doc


def loads(kind: str, data: bytes, where: str) -> dict[str, Any]:
    """Parse a record of *kind*; :class:`CorruptRecord` naming *where* when it is not one."""
    return check(kind, parse(kind, data, where), where)


def get_field(doc: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: str, kind: str,
              prefix: str = "", *, nullable: bool = False, required: bool = True, default: Any = None) -> Any:
    """``doc[key]`` of a record of *kind*, checked to be a *typ* (or ``None`` when *nullable*; ``bool`` is an
    ``int`` only where *typ* is ``bool``); :class:`CorruptRecord` naming the field when it is not. A key that is
    not *required* may be absent (*default*)."""
    try:
        value = doc[key]
    except KeyError:
        if not required:
            return default
        raise CorruptRecord(f"{where} lacks the field {prefix + key!r}; the {kind.replace('-', ' ')} record is "
                            "corrupt") from None
    if value.__class__ is typ or (nullable and value is None):   # the common case, without isinstance
        return value
    if isinstance(value, typ) and (typ is bool or not isinstance(value, bool)):
        return value
    want = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
    raise CorruptRecord(f"{where}: field {prefix + key!r} has type {type(value).__name__}, not "
                        f"{want}{' or null' if nullable else ''}; the {kind.replace('-', ' ')} record is corrupt")


def read(store: Store, rel: str, kind: str, decode: Callable[[bytes, str], Any] | None = None) -> Any:
    """The record at *rel* (a dict, or what *decode* makes of its bytes and URL), or ``None`` when there is
    none."""
    try:
        data = store.read_bytes(rel)
    except FileNotFoundError:
        return None
    return loads(kind, data, store.url(rel)) if decode is None else decode(data, store.url(rel))


def validate_success(doc: Any, where: str, kind: str = "success") -> dict[str, Any]:
    """Check a parsed ``_SUCCESS`` manifest (or, with *kind* ``commit-log``, the commit log that holds the same
    manifest); :class:`CorruptRecord` naming the first problem."""
    if not isinstance(doc, dict):
        raise CorruptRecord(f"{where} is not a JSON object")
    if kind != "success":
        check(kind, doc, where)
    elif doc.get("format") != f"{FORMAT}/success":
        raise CorruptRecord(f"{where} is not an {FORMAT} _SUCCESS manifest (format={doc.get('format')!r}); "
                            "a 0-byte _SUCCESS comes from Hadoop or Spark")
    for key, typ in SUCCESS_REQUIRED.items():
        if key not in doc:
            raise CorruptRecord(f"{where} lacks the field {key!r}")
        if not isinstance(doc[key], typ) or isinstance(doc[key], bool):
            raise CorruptRecord(f"{where}: field {key!r} has type {type(doc[key]).__name__}")
    for i, entry in enumerate(doc["files"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or not isinstance(entry.get("size"), int):
            raise CorruptRecord(f"{where}: files[{i}] needs a string 'path' and an integer 'size'")
    retained = doc.get("retained", [])
    if not isinstance(retained, list) or not all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("size"), int)
            for e in retained):
        raise CorruptRecord(f"{where}: 'retained' must list entries with a string 'path' and an integer 'size'")
    totals = doc["totals"]
    if totals.get("files") != len(doc["files"]):
        raise CorruptRecord(f"{where}: totals.files={totals.get('files')} but {len(doc['files'])} files are listed")
    if totals.get("bytes") != sum(f["size"] for f in doc["files"]):
        raise CorruptRecord(f"{where}: totals.bytes does not match the listed file sizes")
    return doc
