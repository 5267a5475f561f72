"""Which data files a compaction's merged file holds the rows of, and what that means for a job that replaces them.

A job's next generation (a DAG run cleared after success, the next run of a ``job_key``) replaces the files of the
generation before it: its commit deletes the files that generation's commit log lists. A compaction in between
merged some of them into a file of its own, under another name: without more, the replacing commit would find
nothing to delete and leave the old rows in the merged file beside the new ones (every row twice, with no error).

So a merged file names, in its Parquet footer, the data files whose rows it holds (:data:`MERGED_FROM`; a file
merged again names the originals, not the intermediate), and a replacing commit resolves the old generation's
files through it (:func:`resolve_replaced`): a merged file holding only rows of the replaced generation is replaced
with it; one that also holds rows of other files cannot be, and the commit is refused before anything visible
changes, saying what would work instead. The footers are read only when a replaced file is missing.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Iterable, Mapping, Set

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InvalidOutputSpec
from ..parallel import parallel
from ..stores import Store

log = logging.getLogger(__name__)

#: The footer key of a merged file: a JSON list of the original data files (paths under the target) it holds.
MERGED_FROM = b"airflow_commit_provider.merged_from"


def origins(rel: str, metadata: Mapping[bytes, bytes] | None) -> list[str]:
    """The original data files whose rows the file *rel* (its footer's key-value *metadata*) holds: those its
    footer names when a compaction wrote it, else the file itself."""
    named = (metadata or {}).get(MERGED_FROM)
    return json.loads(named) if named else [rel]


def merged_metadata(inputs: Iterable[tuple[str, Mapping[bytes, bytes] | None]]) -> dict[bytes, bytes]:
    """The footer entry of a file merging *inputs* (each ``(path, footer metadata)``), in the inputs' order."""
    held: list[str] = []
    for rel, metadata in inputs:
        held.extend(o for o in origins(rel, metadata) if o not in held)
    return {MERGED_FROM: json.dumps(held).encode()}


def read_origins(store: Store, rel: str) -> list[str]:
    """:func:`origins` of a stored Parquet file, from its footer alone (two reads of its tail). A file whose end is
    not a Parquet footer (another writer's, or damaged) holds nothing a compaction of this provider merged: it is
    its own origin, and the commit goes on (a reader fails on it, not this job); one gone since the listing holds
    nothing. Storage errors propagate: taken for "not merged", a lost answer would leave rows twice."""
    try:
        tail = store.read_tail(rel, 8)
        if len(tail) < 8 or tail[4:] != b"PAR1":
            return [rel]
        data = store.read_tail(rel, struct.unpack("<I", tail[:4])[0] + 8)
    except FileNotFoundError:
        return []
    try:
        footer = pq.read_metadata(io.BytesIO(b"PAR1" + data))
    except (OSError, ValueError, pa.ArrowException) as exc:   # pyarrow's "couldn't deserialize thrift" is an OSError
        log.warning("%s: not a readable Parquet footer (%s): taken as no compaction's", store.url(rel), exc)
        return [rel]
    return origins(rel, footer.metadata)


def resolve_replaced(store: Store, replaced: Set[str], visible: Set[str], deleted: Set[str], job_id: str,
                     generation: int | None, threads: int = 1) -> set[str]:
    """The visible files that hold rows of the replaced generation's files *replaced*: those still there, and
    the merged files (in *visible*) holding rows of those a compaction merged. A merged file holding rows of other
    files too is refused (:class:`InvalidOutputSpec`, nothing changed) unless the commit deletes it anyway
    (*deleted*: what its mode replaces, e.g. every file with ``overwrite``, whose footers are not read).

    The footers are read (with *threads* workers) only when a replaced file is missing: after a compaction, or
    once after a file was deleted by hand; the next generation finds its predecessor's files where it left them."""
    found = replaced & visible
    missing = replaced - visible
    if not missing:
        return found
    candidates = sorted(rel for rel in visible - replaced - deleted if rel.endswith(".parquet"))
    held_by: dict[str, list[str]] = {}

    def read(rel: str) -> None:
        held_by[rel] = read_origins(store, rel)

    parallel(read, candidates, threads)
    for rel in candidates:
        held = held_by[rel]
        if held == [rel] or missing.isdisjoint(held):
            continue
        others = [o for o in held if o not in replaced]
        if not others:
            found.add(rel)
        else:
            ours = [o for o in held if o in replaced]
            raise InvalidOutputSpec(
                f"job {job_id} replaces the files of its generation {generation}, but a compaction merged "
                f"{len(ours)} of them ({', '.join(ours[:3])}) into {store.url(rel)} together with rows of "
                f"{len(others)} other file(s) ({', '.join(others[:3])}): those rows cannot be replaced on their own, "
                "and replacing the rest would leave them in the target twice. Nothing was changed. Run the job in "
                "mode 'overwrite' (or 'dynamic', partitioned by what tells its rows apart) to replace them with "
                "the rest; to keep the old rows and add the new ones beside them, run it as another job (a new run, or "
                "another job_key)")
    return found


__all__ = ["MERGED_FROM", "merged_metadata", "origins", "read_origins", "resolve_replaced"]
