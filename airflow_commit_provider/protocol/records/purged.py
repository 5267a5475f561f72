"""A generation that was purged before it committed: what ``_commits/_purged_<job>.json`` holds.

Without its job record, a job whose commit log exists reads as committed and cleaned up: a try that asks is told
"already committed" and given the log's records. That is right for a late try of the committed generation, and
wrong for a try of a *newer* generation that a purge (``abort --purge``, ``gc --apply``, an overlapping run's
purge) took away: a clear of that run's failed tasks would re-run its writes and its commit, each would answer
with the older generation's output, and the run would succeed without its data. So the purge records here which
generation it ended and which DAG runs had set it up, before it deletes the job record, and a try of one of those
runs that finds no job record is refused (:class:`~..errors.GenerationPurged`) until a clear of the whole run sets
up a new generation. The record outlives the purge; it stops counting once a generation at least as new commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import records
from ..config import RunOwner
from ..errors import CorruptRecord
from ..stores import Store

KIND = "purged-generation"


@dataclass(frozen=True)
class PurgedGeneration:
    """Generation *generation* (*job_uuid*) of job *job_id*, purged at *at*; *owners*: the DAG runs whose setups
    opened its application attempts (none when it was set up without one)."""

    job_id: str
    job_uuid: str
    generation: int
    owners: tuple[RunOwner, ...]
    at: str

    def refuses(self, owner: RunOwner | None, committed_generation: int | None) -> bool:
        """Whether a try of *owner*'s run that finds no job record must be refused: its run set this generation
        up, and no generation as new has committed since (*committed_generation*: the commit log's)."""
        return owner is not None and any(o.same_run(owner) for o in self.owners) and (
            committed_generation is None or committed_generation < self.generation)

    def describe(self) -> str:
        runs = ", ".join(o.describe() for o in self.owners) or "no DAG run"
        return f"generation {self.generation} ({self.job_uuid}, set up by {runs}) was purged at {self.at}"

    def to_json(self) -> bytes:
        return records.dumps(KIND, {"job_id": self.job_id, "job_uuid": self.job_uuid, "generation": self.generation,
                                    "owners": [o.to_dict() for o in self.owners], "at": self.at})

    @classmethod
    def of(cls, job_id: str, job_uuid: str, generation: int, owners: Iterable[RunOwner]) -> PurgedGeneration:
        distinct = {(o.dag_id, o.run_id): o for o in owners}
        return cls(job_id, job_uuid, generation, tuple(distinct[k] for k in sorted(distinct)), records.now_iso())

    @classmethod
    def read(cls, store: Store, rel: str) -> PurgedGeneration | None:
        doc = records.read(store, rel, KIND)
        if doc is None:
            return None
        where = store.url(rel)
        owners = records.get_field(doc, "owners", list, where, KIND)
        parsed = tuple(RunOwner.from_record(o, where) for o in owners)
        if any(o is None for o in parsed):
            raise CorruptRecord(f"{where}: field 'owners' lists a null owner; the record is corrupt")
        return cls(records.get_field(doc, "job_id", str, where, KIND),
                   records.get_field(doc, "job_uuid", str, where, KIND),
                   records.get_field(doc, "generation", int, where, KIND),
                   parsed, records.get_field(doc, "at", str, where, KIND))   # type: ignore[arg-type]


__all__ = ["PurgedGeneration"]
