"""The deduplication plan: every decision of one deduplication, fixed before anything changes.

:func:`~.dedup.find_duplicates` makes it (the dry run is this object); :func:`~.dedup.remove_duplicates` creates
it exclusively at :data:`~.layout.DEDUP_PLAN` before its first change and carries out exactly it, so the dry run
shows what the apply does, a second deduplication of the root cannot start meanwhile, and a run that dies at any
point is finished by the next one from the same record. Like the other records (:mod:`.jobrecord`): frozen,
versioned, validated when read (:class:`CorruptRecord` naming the field).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import records
from ..errors import CorruptRecord
from ..stores import Store


@dataclass(frozen=True)
class Deletion:
    """One visible file proven to be a second copy of a task's output, and what proves it."""

    path: str
    #: its size when the plan was made: a file of another size at the path is another file, left alone
    size: int
    #: the writer whose naming rules (and records) the proof uses: ``this-provider``, ``spark`` or ``hive``
    writer: str
    #: the files that stay and hold the task's output, with their sizes: the deletion runs only while every one
    #: of them is there with that size
    keep: tuple[tuple[str, int], ...]
    proof: str

    def to_doc(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "writer": self.writer,
                "keep": [{"path": p, "size": s} for p, s in self.keep], "proof": self.proof}


@dataclass(frozen=True)
class Undecided:
    """Files that look like one task twice but are not proven to be: reported, never deleted."""

    writer: str
    files: tuple[str, ...]
    why: str

    def to_doc(self) -> dict[str, Any]:
        return {"writer": self.writer, "files": list(self.files), "why": self.why}


@dataclass(frozen=True)
class LeftAlone:
    """Visible files of a job that has not committed: a file, or a directory (``""``: the whole root)."""

    path: str
    why: str

    def to_doc(self) -> dict[str, Any]:
        return {"path": self.path, "why": self.why}


@dataclass(frozen=True)
class DedupPlan:
    """What one deduplication deletes and why, and which markers it withdraws and rewrites around that."""

    KIND = "dedup-plan"

    plan_id: str
    created: str
    root: str
    single_job_dirs: bool
    deletions: tuple[Deletion, ...]
    undecided: tuple[Undecided, ...]
    left_alone: tuple[LeftAlone, ...]
    #: every directory above a deletion (``""``: the root): its ``_SUCCESS`` goes before the first deletion
    withdraw: tuple[str, ...]
    #: the ``_SUCCESS`` of those directories as they were when the plan was made, to be written back (without the
    #: deleted files) when nobody wrote a newer one meanwhile
    markers: Mapping[str, bytes] = field(default_factory=dict)
    #: visible files seen, by writer (``unrecognised`` for names no known writer gives)
    seen: Mapping[str, int] = field(default_factory=dict)
    #: read back from the store: an earlier run created it and did not finish (not part of the record)
    pending: bool = False

    def to_doc(self) -> dict[str, Any]:
        """The report (XCom, logs): every decision, without the saved markers' bytes."""
        return {"plan_id": self.plan_id, "created": self.created, "root": self.root,
                "single_job_dirs": self.single_job_dirs, "pending": self.pending,
                "delete": [d.to_doc() for d in self.deletions], "undecided": [u.to_doc() for u in self.undecided],
                "left_alone": [a.to_doc() for a in self.left_alone], "withdraw": list(self.withdraw),
                "seen": dict(self.seen)}

    def to_json(self) -> bytes:
        body = {k: v for k, v in self.to_doc().items() if k != "pending"}
        body["markers"] = {d: base64.b64encode(data).decode() for d, data in sorted(self.markers.items())}
        return records.dumps(self.KIND, body)

    @classmethod
    def from_json(cls, data: bytes, where: str) -> DedupPlan:
        doc = records.loads(cls.KIND, data, where)
        k = cls.KIND

        def get(d: Mapping[str, Any], key: str, typ: type | tuple[type, ...], prefix: str = "") -> Any:
            return records.get_field(d, key, typ, where, k, prefix)

        def objects(d: Mapping[str, Any], key: str, prefix: str = "") -> list[tuple[str, Mapping[str, Any]]]:
            out = []
            for i, entry in enumerate(get(d, key, list, prefix)):
                if not isinstance(entry, dict):
                    raise CorruptRecord(f"{where}: field {prefix}{key}[{i}] is not an object; the {k} record is "
                                        "corrupt")
                out.append((f"{prefix}{key}[{i}].", entry))
            return out

        def strings(d: Mapping[str, Any], key: str, prefix: str = "") -> tuple[str, ...]:
            values = get(d, key, list, prefix)
            if not all(isinstance(v, str) for v in values):
                raise CorruptRecord(f"{where}: field {prefix}{key} must list strings; the {k} record is corrupt")
            return tuple(values)

        plan_id, created, root = get(doc, "plan_id", str), get(doc, "created", str), get(doc, "root", str)
        single_job_dirs = get(doc, "single_job_dirs", bool)
        deletions = tuple(
            Deletion(get(e, "path", str, p), get(e, "size", int, p), get(e, "writer", str, p),
                     tuple((get(kept, "path", str, q), get(kept, "size", int, q)) for q, kept in objects(e, "keep", p)),
                     get(e, "proof", str, p))
            for p, e in objects(doc, "delete"))
        undecided = tuple(Undecided(get(e, "writer", str, p), strings(e, "files", p), get(e, "why", str, p))
                          for p, e in objects(doc, "undecided"))
        left_alone = tuple(LeftAlone(get(e, "path", str, p), get(e, "why", str, p))
                           for p, e in objects(doc, "left_alone"))
        markers = {}
        for d, text in get(doc, "markers", dict).items():
            try:
                markers[d] = base64.b64decode(text, validate=True)
            except (TypeError, ValueError):
                raise CorruptRecord(f"{where}: field markers[{d!r}] is not base64; the {k} record is corrupt") from None
        return cls(plan_id, created, root, single_job_dirs, deletions, undecided, left_alone, strings(doc, "withdraw"),
                   markers, dict(get(doc, "seen", dict)), pending=True)

    @classmethod
    def read(cls, store: Store, rel: str) -> DedupPlan | None:
        return records.read(store, rel, cls.KIND, cls.from_json)


__all__ = ["DedupPlan", "Deletion", "LeftAlone", "Undecided"]
