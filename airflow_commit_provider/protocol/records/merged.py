"""A compaction's merged file: the footer entry naming the data files whose rows it holds.

A compaction merges the files of one directory, so the entry names files beside the merged one, and the names are
the same whether a job's root is the compaction's, a partition below it or a directory above. The entry names the
compaction generation that wrote it and counts only in a file whose name carries that generation (the protocol
names every file after its generation), so a footer copied into another file by a reader that kept the schema's
metadata names nothing. Why a job reads it: :mod:`..replacing`.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from ..stores import Store

log = logging.getLogger(__name__)

#: The footer key of a merged file: ``{"by": <compaction generation uuid>, "files": [<file names beside it>]}``.
MERGED_FROM = b"airflow_commit_provider.merged_from"


def _split(rel: str) -> tuple[str, str]:
    head, _, name = rel.rpartition("/")
    return head, name


def _beside(rel: str, name: str) -> str:
    head, _ = _split(rel)
    return f"{head}/{name}" if head else name


def origins(rel: str, metadata: Mapping[bytes, bytes] | None) -> list[str] | None:
    """The original data files (paths like *rel*: under the same root) whose rows the file *rel* holds, as its
    footer's key-value *metadata* names them; ``None`` when it is no merged file of this provider's (no entry, an
    entry that is not ours, or one naming a generation the file's name does not carry)."""
    raw = (metadata or {}).get(MERGED_FROM)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        by, files = doc["by"], doc["files"]
    except (ValueError, TypeError, KeyError):
        log.warning("%s: footer entry %s is not this provider's: ignored", rel, MERGED_FROM.decode())
        return None
    if not isinstance(by, str) or not by or by not in _split(rel)[1] or not isinstance(files, list) or \
            not all(isinstance(f, str) and f and "/" not in f for f in files):
        return None   # copied from a merged file into another (a reader that kept the schema's metadata)
    return [_beside(rel, name) for name in files]


def merged_metadata(job_uuid: str, inputs: Iterable[tuple[str, Mapping[bytes, bytes] | None]]) -> dict[bytes, bytes]:
    """The footer entry of a file that compaction generation *job_uuid* merges from *inputs* (each ``(path,
    footer metadata)``, all in one directory), in the inputs' order."""
    held: list[str] = []
    for rel, metadata in inputs:
        held.extend(_split(o)[1] for o in (origins(rel, metadata) or [rel]) if _split(o)[1] not in held)
    return {MERGED_FROM: json.dumps({"by": job_uuid, "files": held}).encode()}


def without_provenance(schema: pa.Schema) -> pa.Schema:
    """*schema* without a merged file's entry: data read from a merged file and written again is no merge."""
    if not schema.metadata or MERGED_FROM not in schema.metadata:
        return schema
    return schema.with_metadata({k: v for k, v in schema.metadata.items() if k != MERGED_FROM})


def read_origins(store: Store, rel: str) -> list[str] | None:
    """:func:`origins` of a stored file, from its footer alone (two reads of its tail). A file whose end is not a
    Parquet footer (another writer's, or damaged) is no merged file: the commit goes on (a reader fails on it, not
    this job); one gone since the listing neither. Storage errors propagate: taken for "not merged", a lost
    answer would leave rows twice."""
    try:
        tail = store.read_tail(rel, 8)
        if len(tail) < 8 or tail[4:] != b"PAR1":
            return None
        data = store.read_tail(rel, struct.unpack("<I", tail[:4])[0] + 8)
    except FileNotFoundError:
        return None
    try:
        footer = pq.read_metadata(io.BytesIO(b"PAR1" + data))
    except (OSError, ValueError, pa.ArrowException) as exc:   # pyarrow's "couldn't deserialize thrift" is an OSError
        log.warning("%s: not a readable Parquet footer (%s): taken as no compaction's", store.url(rel), exc)
        return None
    return origins(rel, footer.metadata)


__all__ = ["MERGED_FROM", "merged_metadata", "origins", "read_origins", "without_provenance"]
