"""Mode ``error`` as a claim on the target, not a check: the first job to commit into it owns it.

"The target holds no data" checked, then acted on, lets two jobs that check at the same moment both commit, and a
job resuming a plan it fixed before another job committed never checks again. So a job in mode ``error`` takes the
target the way every decision of this protocol is taken: by the exclusive creation of a record
(:attr:`.layout.JobLayout.error_claim`; local ``os.link``, S3 ``If-None-Match``, memory lock), in job commit's
``FixPlan`` before its plan record, and checks it again before the first visible change of every run of that plan.
Setup refuses at once when another job holds it.

The claim names the job id, not the generation: a re-run of the same job (a cleared DAG run) replaces its own
data and keeps the claim. It is freed only by the abort of a job none of whose generations committed (nothing of it
is visible: the claim precedes its plan, and an abort refuses once there is a plan); a job that committed keeps it,
since the target holds its data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import records
from .errors import CommitProtocolError, InvalidOutputSpec
from .stores import Store

if TYPE_CHECKING:
    from .records.job import JobRecord
    from .layout import JobLayout

#: how often :meth:`TargetClaim.take` finds the claim gone again after another job's creation refused its own
CLAIM_TRIES = 8


@dataclass(frozen=True)
class ClaimRecord:
    """Who owns the target in mode ``error``: the job, and the generation of it that took the claim."""

    KIND = "error-claim"

    job_id: str
    job_uuid: str
    generation: int
    claimed: str

    def to_json(self) -> bytes:
        return records.dumps(self.KIND, {"job_id": self.job_id, "job_uuid": self.job_uuid,
                                         "generation": self.generation, "claimed": self.claimed})

    @classmethod
    def from_json(cls, data: bytes, where: str) -> ClaimRecord:
        """Parse and validate; :class:`CorruptRecord` naming *where* and the field."""
        doc = records.loads(cls.KIND, data, where)
        return cls(*(records.get_field(doc, key, typ, where, cls.KIND)
                     for key, typ in (("job_id", str), ("job_uuid", str), ("generation", int), ("claimed", str))))


class TargetClaim:
    """The one owner of the claim record of one job's committer: reads, takes and frees it."""

    def __init__(self, store: Store, layout: JobLayout) -> None:
        self.store = store
        self.layout = layout

    def holder(self) -> ClaimRecord | None:
        """The claim, or ``None`` when no job owns the target."""
        return records.read(self.store, self.layout.error_claim, ClaimRecord.KIND, ClaimRecord.from_json)

    def other_holder(self) -> ClaimRecord | None:
        """The claim when another job holds it, else ``None``."""
        holder = self.holder()
        return holder if holder is not None and holder.job_id != self.layout.job_id else None

    def refuse_other(self) -> None:
        """:class:`InvalidOutputSpec` naming the owner when another job holds the claim."""
        holder = self.other_holder()
        if holder is not None:
            raise self.refusal(holder)

    def take(self, job: JobRecord) -> None:
        """Claim the target for *job*'s job, or find it already this job's; :class:`InvalidOutputSpec` naming
        the owner when another job holds it. The exclusive creation decides between jobs taking it at once."""
        record = ClaimRecord(job.job_id, job.job_uuid, job.generation, records.now_iso()).to_json()
        for _ in range(CLAIM_TRIES):   # read first: a job that holds it already (a resumed commit, a re-run) asks once
            holder = self.holder()
            if holder is not None:
                if holder.job_id != job.job_id:
                    raise self.refusal(holder)
                return
            if self.store.create_exclusive(self.layout.error_claim, record):
                return
            # another job created it between the two calls (and it may be gone again: read it again)
        raise CommitProtocolError(
            f"job {self.layout.job_id} could not claim {self.store.url(self.layout.error_claim)} in mode 'error': "
            f"the claim was taken and freed again {CLAIM_TRIES} times while it tried (other jobs set up and "
            "aborted there at the same moment); nothing visible changed: retry the commit")

    def release_uncommitted(self) -> bool:
        """Free the claim if this job holds it and none of its generations committed (no commit log); ``True``
        when it was freed. The caller has made sure no commit of the job is under way (no plan)."""
        holder = self.holder()
        if holder is None or holder.job_id != self.layout.job_id or self.store.exists(self.layout.commit_log):
            return False
        self.store.delete_file(self.layout.error_claim)
        return True

    def refusal(self, holder: ClaimRecord) -> InvalidOutputSpec:
        return InvalidOutputSpec(
            f"output {self.store.url()} belongs to job {holder.job_id}: it claimed the target in mode 'error' at "
            f"{holder.claimed} ({self.store.url(self.layout.error_claim)}), so job {self.layout.job_id} cannot "
            f"write there in mode 'error'; use mode='append', 'overwrite' or 'dynamic', another output, or abort "
            f"job {holder.job_id} if it never committed (its abort frees the target)")


__all__ = ["ClaimRecord", "TargetClaim"]
