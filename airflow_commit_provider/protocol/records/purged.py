"""That a purge ended a DAG run's generation before it committed: what ``_commits/_purged_<job>_<run>.json`` holds.

Without its job record, a job whose commit log exists reads as committed and cleaned up: a try that asks is told
"already committed" and given the log's records. That is right for a late try of the committed generation, and
wrong for a try of a generation that a purge (``abort --purge``, ``gc --apply``, an overlapping run's purge, a
set-up that starts over) took away: a clear of that run's failed tasks would re-run its writes and its commit,
each would answer with another generation's output, and the run would succeed without its data. So the purge
records, for each DAG run whose set-up opened an application attempt of the generation, that it did, before it
deletes the job record; a try of such a run that finds no job record is refused (:class:`~..errors.GenerationPurged`)
until the run sets up again (a clear of the whole run), which deletes its record
(:func:`~..jobsetup.setup_job`). One record per run, named by it: a later purge, of another run's generation or of
this run's next one, never overwrites what an earlier one recorded for another run, and a try reads its own run's
record alone, by name, whatever the job's commits since.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import records
from ..config import RunOwner
from ..errors import CorruptRecord
from ..stores import Store

KIND = "purged-generation"


@dataclass(frozen=True)
class PurgedGeneration:
    """Generation *generation* (*job_uuid*) of job *job_id*, set up by *owner*'s run, purged at *at*."""

    job_id: str
    job_uuid: str
    generation: int
    owner: RunOwner
    at: str

    def describe(self) -> str:
        return (f"generation {self.generation} ({self.job_uuid}), which {self.owner.describe()} set up, was purged "
                f"at {self.at}")

    def to_json(self) -> bytes:
        return records.dumps(KIND, {"job_id": self.job_id, "job_uuid": self.job_uuid, "generation": self.generation,
                                    "owner": self.owner.to_dict(), "at": self.at})

    @classmethod
    def read(cls, store: Store, rel: str) -> PurgedGeneration | None:
        doc = records.read(store, rel, KIND)
        if doc is None:
            return None
        where = store.url(rel)
        owner = RunOwner.from_record(records.get_field(doc, "owner", dict, where, KIND), where)
        if owner is None:
            raise CorruptRecord(f"{where}: field 'owner' is null; the record is corrupt")
        return cls(records.get_field(doc, "job_id", str, where, KIND),
                   records.get_field(doc, "job_uuid", str, where, KIND),
                   records.get_field(doc, "generation", int, where, KIND),
                   owner, records.get_field(doc, "at", str, where, KIND))


__all__ = ["PurgedGeneration"]
