"""The task attempt state machine and its one owner: ``started -> committing | failed``.

Every task attempt leaves a trace under its application attempt:

- that it started, so that a try killed with SIGKILL (or lost with its worker) is known to have existed: on the
  local disk its work directory, made at set-up and removed only once the attempt has a fate; on S3, where an
  attempt that wrote nothing has no directory, ``_attempts/attempt_<task>_<try>.started`` (which earlier releases
  wrote on every store, and which is still read);
- ``attempt_<task>_<try>``: the attempt's **fate**, created exclusively, holding ``failed``, or ``committing``
  (earlier releases) or the attempt's task commit record, which then also becomes the record (see :func:`fate_of`).

The fate claim is the single arbiter between an attempt that wants to commit and anyone who wants to remove its
files (its own abort, a newer try of the task, the failed run's teardown): each creates the claim first, and only
the one whose claim holds may act. An attempt recorded ``failed`` can therefore never commit later, whatever it was
doing when it was recorded (a zombie waking after the teardown is denied, not accepted with an empty file list),
and an attempt that claimed ``committing`` is never emptied under its commit. Hadoop's committer has no such
record: it relies on the AM to kill attempts, which Airflow cannot do to a zombie.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from .layout import JobLayout, parse_attempt_name
from .stores import Store

COMMITTING = "committing"
FAILED = "failed"
STARTED_SUFFIX = ".started"
#: the most lower try numbers :meth:`AttemptLedger.earlier` looks up one by one before it lists instead
PROBE_LIMIT = 32


@dataclass(frozen=True)
class AttemptTrace:
    """What the ledger knows of one attempt: its fate (``None`` while it has none: running, killed or lost)."""

    task: int
    attempt: int
    fate: str | None


class AttemptLedger:
    """The ``_attempts/`` directories of one job: every read and write of an attempt's state goes through here."""

    def __init__(self, store: Store, layout: JobLayout) -> None:
        self.store = store
        self.layout = layout

    def start(self, app: int, task: int, attempt: int) -> None:
        """Leave the trace that this attempt exists (idempotent). Where a directory exists on its own (the local
        disk), the attempt's work directory, made now, is that trace: it is removed only after the attempt has a
        fate (its commit, or its failure recorded), which then is the trace. Elsewhere (object stores, where an
        attempt that wrote nothing has no directory): an empty ``.started`` file beside the claim."""
        if self.store.has_directories:
            self.store.makedirs(self.layout.attempt_dir(app, task, attempt))
        else:
            self.store.touch(self.layout.attempt_claim(app, task, attempt) + STARTED_SUFFIX)

    def _started(self, app: int, task: int, attempt: int) -> bool:
        """Whether the attempt left a trace of its start: its ``.started`` file (every store, and earlier releases
        on the local disk too), or its work directory where that is the trace."""
        return self.store.exists(self.layout.attempt_claim(app, task, attempt) + STARTED_SUFFIX) or (
            self.store.has_directories and self.store.exists(self.layout.attempt_dir(app, task, attempt)))

    def earlier(self, app: int, task: int, attempt: int) -> list[AttemptTrace]:
        """The task's attempts numbered below *attempt*, with their fates: what a new try fences.

        Where the store lists by prefix (an object store's request returns the task's names only), one listing.
        Elsewhere a listing would read the whole directory, which holds every task's traces and grows with the
        job; each lower try number is looked up instead (Airflow's try numbers are small and start at 1), unless
        there are more than :data:`PROBE_LIMIT` of them."""
        if self.store.lists_by_prefix or attempt > PROBE_LIMIT:
            return [t for t in self.traces(app, task) if t.attempt < attempt]
        out = []
        for earlier in range(attempt):
            fate = self.fate(app, task, earlier)
            if fate is not None or self._started(app, task, earlier):
                out.append(AttemptTrace(task, earlier, fate))
        return out

    def claim(self, app: int, task: int, attempt: int, fate: str) -> str:
        """Exclusively set the attempt's fate to *fate*; return the fate that holds (ours, or the earlier one)."""
        return self.try_claim(app, task, attempt, fate)[0]

    def try_claim(self, app: int, task: int, attempt: int, fate: str,
                  record: bytes | None = None) -> tuple[str, bool]:
        """:meth:`claim`, and whether this very call set the fate (``False``: it was set before, by anyone).
        A claim to commit may hold the attempt's task commit *record* instead of the word (see :func:`fate_of`)."""
        rel = self.layout.attempt_claim(app, task, attempt)
        data = record if record is not None and fate == COMMITTING else fate.encode()
        if self.store.create_exclusive(rel, data):
            return fate, True
        return fate_of(self.store.read_bytes(rel)), False

    def overrule(self, app: int, task: int, attempt: int) -> None:
        """Record a committed attempt as failed: only for a v2 abort, which removes the commit itself (record
        first, then the visible files), so that the attempt can never present its commit again."""
        self.store.write_bytes(self.layout.attempt_claim(app, task, attempt), FAILED.encode())

    def traces(self, app: int, task: int | None = None, leave_out: Collection[str] = ()) -> list[AttemptTrace]:
        """Every attempt of the application attempt (of one *task* only, when given) with its fate: one listing
        (two on the local disk: the work directories too, see :meth:`start`), and one read per fate. *leave_out*:
        names (:func:`~.layout.attempt_name`) of attempts the caller does not want, neither parsed nor read: job
        commit's winners, 10,000 of them, whose fate it knows."""
        directory = self.layout.attempts_dir(app)
        prefix = f"attempt_{task:05d}_" if task is not None else "attempt_"
        started: set[tuple[int, int]] = set()
        unread: list[tuple[int, int]] = []
        parsed: dict[str, tuple[int, int] | None] = {}  # mark, claim, work directory: one name, parsed once
        names = self.store.list_dir_prefix(directory, prefix)
        if leave_out:   # in C: job commit's 10,000 winners' claims are not gone through one by one (their marks are)
            names = set(names).difference(leave_out)
        for name in names:
            is_mark = name.endswith(STARTED_SUFFIX)
            base = name[: -len(STARTED_SUFFIX)] if is_mark else name
            if base in leave_out:
                continue
            key = parsed.get(base, False)
            if key is False:
                key = parsed[base] = parse_attempt_name(base)
            if key is None:
                continue
            if is_mark:
                started.add(key)
            else:
                unread.append(key)
        if self.store.has_directories:   # work directories are traces there (see :meth:`start`)
            for name in self.store.list_dir_prefix(self.layout.work_root(app), prefix):
                if name in leave_out:
                    continue
                key = parsed.get(name, False)   # the attempt's claim or mark was parsed already, as a rule
                if key is False:
                    key = parse_attempt_name(name)
                if key is not None:
                    started.add(key)
        fates: dict[tuple[int, int], str | None] = {}
        for key in unread:
            try:
                fates[key] = fate_of(self.store.read_bytes(self.layout.attempt_claim(app, *key)))
            except FileNotFoundError:  # removed by a cleanup meanwhile
                continue
        return [AttemptTrace(t, a, fates.get((t, a))) for t, a in sorted(started | set(fates))]

    def fate(self, app: int, task: int, attempt: int) -> str | None:
        try:
            return fate_of(self.store.read_bytes(self.layout.attempt_claim(app, task, attempt)))
        except FileNotFoundError:
            return None


def fate_of(claim: bytes) -> str:
    """The fate a claim's bytes say: ``failed``, or ``committing`` -- written as the word (earlier releases, and
    a claim that holds no record) or as the attempt's task commit record, a JSON object (this release: the
    record is then the same file under a second name, one file written for both)."""
    return COMMITTING if claim[:1] == b"{" else claim.decode()
