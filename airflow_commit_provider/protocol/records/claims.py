"""Claims on the files a compaction will delete: at most one live compaction may hold an input.

A compaction merges small files other jobs wrote and deletes them at its job commit. Two compactions planned over
the same files would both merge them, and the second to commit would publish its merged copy of rows the first
had already published: every row twice, under a ``_SUCCESS`` that verifies. Checking at job commit that the
inputs are still there does not prevent it: both can pass the check before either deletes. The deletion of an
input must be decided by one atomic step, as a task commit is: the store's create-if-absent.

Each input has a *chain* of entries ``_temporary/_claims/<input>/<n>`` (:meth:`.JobLayout.input_claim`), created
only with create-if-absent and never rewritten; the entry with the highest number says who holds the input:
``held`` by a job generation (job id and uuid), or ``free``.

- **Claim.** Read the newest entry *n*; if it is ``free``, or held by a generation that is dead, create entry
  *n + 1* held by this generation. Exactly one of several claimants creates *n + 1*, and it decided on the
  newest state, so the chain is a sequence of decisions everyone agrees on (a consensus log). Finding itself as
  the holder is not an error: every application attempt of a compaction claims its inputs again.
- **Dead** means that no job record with the holder's uuid exists. A job record is created before its claims and
  removed only by the job's cleanup (after its deletions and publication) or by a purge (which refuses once a
  commit plan exists, so a purged job never deletes anything), and a uuid never comes back: a dead holder will
  never delete an input again. A failed compaction that was not aborted is not dead; the error names it.
- **Refuse.** A compaction that finds an input held by another live generation refuses before it has merged or
  changed anything, naming the input and the holder. Inputs are claimed in sorted order, so of two compactions
  planned over overlapping inputs, the one that claims the first common input first gets every common one:
  exactly one goes on.
- **Release.** The holder keeps its claims from before its first merge until its job commit has deleted the
  inputs and published the merged files, then appends a ``free`` entry (also when it refuses). A release that a
  crash skipped costs nothing but a later take-over, since the job is dead by then.
- **Sweep.** A chain whose input is gone and whose newest entry is ``free`` or dead is deleted (at the start of
  every compaction, and after its commit): nobody will want that input again. A chain whose input exists is never
  deleted, because deleting entries under a claimant that is appending one could let two claimants both win.

Why the race is closed: to delete an input at its job commit, a compaction holds the input from before its
merges until after its deletions, and the chain lets at most one live generation hold it. What is left to the
check at job commit (:mod:`.inputs`, before the commit plan) are jobs that are not compactions: a dynamic or
overwrite job that replaced an input, which changes or removes it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .. import records
from ..errors import CorruptRecord, InputsClaimed
from ..faults import inject
from ..layout import CLAIMS, TEMPORARY, JobLayout
from ..stores import Store
from ..stores.helpers import missing
from .job import JobRecord

KIND = "input-claim"
#: how often a claimant re-reads a chain that others keep appending to before it gives up (refuses)
_TRIES = 20


@dataclass(frozen=True)
class ClaimEntry:
    """One entry of an input's chain: its number, and who holds the input from then on (``None``: free)."""

    number: int
    job_id: str | None
    job_uuid: str | None

    @property
    def holder(self) -> str:
        return f"job {self.job_id} (generation {self.job_uuid})"


def newest(store: Store, rel: str) -> ClaimEntry | None:
    """The newest entry of *rel*'s chain, or ``None`` when it has none."""
    chain = JobLayout.input_claim_chain(rel)
    numbers = [int(n) for n in store.list_dir(chain) if n.isdigit()]
    for number in sorted(numbers, reverse=True):
        where = JobLayout.input_claim(rel, number)
        doc = records.read(store, where, KIND)
        if doc is None:  # swept meanwhile: the chain is going away
            continue
        state = records.get_field(doc, "state", str, store.url(where), KIND)
        if state not in ("held", "free"):
            raise CorruptRecord(f"{store.url(where)}: field 'state' is {state!r}, not 'held' or 'free'; the input "
                                "claim is corrupt")
        if state == "free":
            return ClaimEntry(number, None, None)
        return ClaimEntry(number, records.get_field(doc, "job_id", str, store.url(where), KIND),
                          records.get_field(doc, "job_uuid", str, store.url(where), KIND))
    return None


def is_alive(store: Store, entry: ClaimEntry) -> bool:
    """Whether the generation holding *entry* still has its job record (a free entry is not alive)."""
    if entry.job_id is None:
        return False
    try:
        job = JobRecord.read(store, JobLayout(entry.job_id).job_record)
    except CorruptRecord:
        return True  # cannot be shown dead: it keeps its claim, and the refusal names it
    return job is not None and job.job_uuid == entry.job_uuid


class InputClaims:
    """The claims of one compaction generation (*job*) on its inputs."""

    def __init__(self, store: Store, job: JobRecord) -> None:
        self.store = store
        self.job = job

    def claim_all(self, paths: Collection[str]) -> None:
        """Hold every one of *paths*, in sorted order; :class:`InputsClaimed` at the first another live generation
        holds (the ones claimed before it are released first, so the refusal leaves nothing held)."""
        done: list[str] = []
        for rel in sorted(paths):
            try:
                self.claim(rel)
            except InputsClaimed:
                self.release_all(done)
                raise
            done.append(rel)
            inject("compact.mid_claim")

    def claim(self, rel: str) -> None:
        for _ in range(_TRIES):
            top = newest(self.store, rel)
            if top is not None and top.job_uuid == self.job.job_uuid:
                return
            if top is not None and is_alive(self.store, top):
                raise InputsClaimed(
                    f"compaction job {self.job.job_id} cannot compact {self.store.url(rel)}: {top.holder} holds it "
                    "(it is compacting it, or it failed and was not aborted: clear its run to finish it, or abort "
                    "it to release the file); nothing was merged or changed", rel, top.holder)
            if self._append(rel, 0 if top is None else top.number + 1, held=True):
                return
        raise InputsClaimed(f"compaction job {self.job.job_id} cannot claim {self.store.url(rel)}: its claim changed "
                            f"hands {_TRIES} times while this job tried; nothing was merged or changed", rel,
                            "several jobs")

    def release_all(self, paths: Sequence[str]) -> None:
        """Give up the inputs this generation holds among *paths* (the others are left alone)."""
        for rel in sorted(paths):
            top = newest(self.store, rel)
            if top is not None and top.job_uuid == self.job.job_uuid:
                # if this fails, someone appended meanwhile: they found this job dead, and took the input over
                self._append(rel, top.number + 1, held=False)

    def _append(self, rel: str, number: int, *, held: bool) -> bool:
        body = {"state": "held" if held else "free", "job_id": self.job.job_id, "job_uuid": self.job.job_uuid,
                "path": rel, "at": records.now_iso()}
        where = JobLayout.input_claim(rel, number)
        for _ in range(_TRIES):
            try:
                return self.store.create_exclusive(where, records.dumps(KIND, body))
            except FileNotFoundError:  # a sweep removed the chain's directory between its creation and ours
                continue
        return self.store.create_exclusive(where, records.dumps(KIND, body))


def live_holders(store: Store, paths: Collection[str]) -> dict[str, str]:
    """Of *paths*, those a live compaction holds, each with its holder (one listing of the chains; an entry read
    only for a path that has a chain). A job whose commit deletes one must wait: the compaction has merged it, or
    will, and would publish its rows again after the deletion."""
    chains = {rel.rsplit("/", 1)[0] for rel in store.list_names(CLAIMS) if "/" in rel}
    held = {}
    for rel in sorted(chains.intersection(paths)):
        top = newest(store, rel)
        if top is not None and is_alive(store, top):
            held[rel] = top.holder
    return held


def sweep(store: Store) -> int:
    """Delete the chains of inputs that are gone whose newest entry is free or dead; returns how many. Safe
    alongside claimants: one that claims a gone input refuses when it checks the input afterwards."""
    chains = sorted({rel.rsplit("/", 1)[0] for rel in store.list_names(CLAIMS) if "/" in rel})
    removed = 0
    for rel in missing(store, chains) if chains else []:
        top = newest(store, rel)
        if top is not None and is_alive(store, top):
            continue
        store.delete_tree(JobLayout.input_claim_chain(rel))
        removed += 1
        head = rel
        while "/" in head:
            head = head.rsplit("/", 1)[0]
            if not store.remove_dir_if_empty(f"{CLAIMS}/{head}"):
                break
    if removed and store.remove_dir_if_empty(CLAIMS):
        store.remove_dir_if_empty(TEMPORARY)
    return removed


__all__ = ["ClaimEntry", "InputClaims", "is_alive", "live_holders", "newest", "sweep"]
