"""The task attempt state machine and its one owner: ``started -> committing | failed``.

Every task attempt leaves a trace under its application attempt, in ``_attempts/``:

- ``attempt_<task>_<try>.started``: written when the attempt is set up, so that a try killed with SIGKILL (or lost
  with its worker) is known to have existed, even on S3, where an attempt that wrote nothing has no directory;
- ``attempt_<task>_<try>``: the attempt's **fate**, created exclusively, holding ``committing`` or ``failed``.

The fate claim is the single arbiter between an attempt that wants to commit and anyone who wants to remove its
files (its own abort, a newer try of the task, the failed run's teardown): each creates the claim first, and only
the one whose claim holds may act. An attempt recorded ``failed`` can therefore never commit later, whatever it was
doing when it was recorded (a zombie waking after the teardown is denied, not accepted with an empty file list),
and an attempt that claimed ``committing`` is never emptied under its commit. Hadoop's committer has no such
record: it relies on the AM to kill attempts, which Airflow cannot do to a zombie.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..layout import JobLayout, parse_attempt_name
from ..stores import Store

COMMITTING = "committing"
FAILED = "failed"
STARTED_SUFFIX = ".started"


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
        """Leave the trace that this attempt exists (idempotent)."""
        self.store.write_bytes(self.layout.attempt_claim(app, task, attempt) + STARTED_SUFFIX, b"")

    def claim(self, app: int, task: int, attempt: int, fate: str) -> str:
        """Exclusively set the attempt's fate to *fate*; return the fate that holds (ours, or the earlier one)."""
        return self.try_claim(app, task, attempt, fate)[0]

    def try_claim(self, app: int, task: int, attempt: int, fate: str) -> tuple[str, bool]:
        """:meth:`claim`, and whether this very call set the fate (``False``: it was set before, by anyone)."""
        rel = self.layout.attempt_claim(app, task, attempt)
        if self.store.create_exclusive(rel, fate.encode()):
            return fate, True
        return self.store.read_bytes(rel).decode(), False

    def overrule(self, app: int, task: int, attempt: int) -> None:
        """Record a committed attempt as failed: only for a v2 abort, which removes the commit itself (record
        first, then the visible files), so that the attempt can never present its commit again."""
        self.store.write_bytes(self.layout.attempt_claim(app, task, attempt), FAILED.encode())

    def traces(self, app: int, task: int | None = None,
               known: Mapping[tuple[int, int], str] | None = None) -> list[AttemptTrace]:
        """Every attempt of the application attempt (of one *task* only, when given) with its fate: one listing,
        and one read per fate not in *known* (``(task, attempt) -> fate`` the caller already has, e.g. winners)."""
        known = known or {}
        directory = self.layout.attempts_dir(app)
        prefix = f"attempt_{task:05d}_" if task is not None else "attempt_"
        started: set[tuple[int, int]] = set()
        fates: dict[tuple[int, int], str | None] = {}
        unread: list[tuple[int, int]] = []
        parsed: dict[str, tuple[int, int] | None] = {}  # an attempt's mark and claim share the name: parse once
        for name in self.store.list_dir_prefix(directory, prefix):
            is_mark = name.endswith(STARTED_SUFFIX)
            base = name[: -len(STARTED_SUFFIX)] if is_mark else name
            key = parsed.get(base, False)
            if key is False:
                key = parsed[base] = parse_attempt_name(base)
            if key is None:
                continue
            if is_mark:
                started.add(key)
            elif key in known:
                fates[key] = known[key]
            else:
                unread.append(key)
        for key in unread:
            try:
                fates[key] = self.store.read_bytes(self.layout.attempt_claim(app, *key)).decode()
            except FileNotFoundError:  # removed by a cleanup meanwhile
                continue
        return [AttemptTrace(t, a, fates.get((t, a))) for t, a in sorted(started | set(fates))]

    def fate(self, app: int, task: int, attempt: int) -> str | None:
        try:
            return self.store.read_bytes(self.layout.attempt_claim(app, task, attempt)).decode()
        except FileNotFoundError:
            return None
