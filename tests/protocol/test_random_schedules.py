"""Random fault schedules (hypothesis, stateful) against a model of the expected output.

Each example is a schedule of task attempts started and committed in any order (attempts of an older application
attempt that commit late are zombies), aborts, application-attempt restarts, recoveries, and job commits killed at
a random injection point, on fsspec's memory file system. The model says which attempt of every task must be in
the output once a job commit succeeds; after every step the output must hold no duplicate and, before the job
commit, nothing at all (v1).

CI runs ``COMMIT_SCHEDULES`` examples (default 40); the full run is ``COMMIT_SCHEDULES=500 pytest
tests/protocol/test_random_schedules.py``.
"""

from __future__ import annotations

import os
import uuid

import fsspec
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from airflow_commit_provider.protocol import (
    CommitDenied,
    FileOutputCommitter,
    InvalidOutputSpec,
    JobIncomplete,
    TaskAttemptWriter,
    faults,
)

from . import scenario as sc

TASKS = 2
COMMIT_POINTS = [p for p in faults.POINTS if p.startswith("commit_job.")]


class Schedules(RuleBasedStateMachine):
    @initialize(algorithm=st.sampled_from([1, 2]))
    def start(self, algorithm: int) -> None:
        self.root = f"memory://sched-{uuid.uuid4().hex}/out"
        self.algorithm = algorithm
        self.c = FileOutputCommitter(self.root, "job", algorithm=algorithm, mode="append", partition_by=["day"])
        self.app = self.c.setup_job().app_attempt
        self.next_attempt = 1
        self.open: list[tuple] = []          # attempts written, not yet committed or aborted: (ta, rows)
        self.generation_uuid = self.c.job_record().job_uuid
        self.records: dict[int, dict[int, int]] = {}   # model: app -> task -> committed attempt
        self.failed: set[tuple[int, int]] = set()      # (app, attempt) recorded as failed
        self.committing: set[tuple[int, int]] = set()
        self.committed_output: dict[int, int] | None = None

    def teardown(self) -> None:
        fsspec.filesystem("memory").rm(self.root.split("://")[1].split("/")[0], recursive=True)
        faults.disarm()

    # ---------------------------------------------------------------- the model
    def expected_winner(self, task: int) -> int | None:
        """What recovery would give: the current application attempt's record, else the newest earlier one."""
        for app in sorted(self.records, reverse=True):
            if app <= self.app and task in self.records[app]:
                return self.records[app][task]
        return None

    # ---------------------------------------------------------------- rules
    @precondition(lambda self: self.committed_output is None)
    @rule(task=st.integers(0, TASKS - 1))
    def start_attempt(self, task: int) -> None:
        attempt = self.next_attempt
        self.next_attempt += 1
        for old, _rows in self.open:  # a new try records the earlier uncommitted tries of the task failed
            if (old.task, old.app_attempt, old.job_uuid) == (task, self.app, self.generation_uuid):
                self.failed.add((old.app_attempt, old.attempt))
        ta = self.c.setup_task(task, attempt)
        with TaskAttemptWriter(self.c, ta, partition_by=["day"]) as w:
            w.write(sc.task_table(task, attempt))
        self.open.append((ta, w.rows))

    @precondition(lambda self: self.committed_output is None)
    @rule(task=st.integers(0, TASKS - 1))
    def run_attempt_to_commit(self, task: int) -> None:
        """The common path: an attempt writes and asks to commit at once."""
        self.start_attempt(task)
        self.commit_attempt(len(self.open) - 1)

    @precondition(lambda self: self.open and self.committed_output is None)
    @rule(pick=st.integers(0, 10**6))
    def commit_attempt(self, pick: int) -> None:
        ta, rows = self.open.pop(pick % len(self.open))
        key = (ta.app_attempt, ta.attempt)
        app_records = self.records.setdefault(ta.app_attempt, {})
        try:
            rec = self.c.commit_task(ta, rows)
        except InvalidOutputSpec as refused:
            # v2 publishes at task commit and never over a visible file: re-running a task an earlier application
            # attempt committed (instead of recovering it) writes the same names and is refused, recorded failed
            assert self.algorithm == 2 and "would replace" in str(refused), refused
            assert any(a < ta.app_attempt and ta.task in recs for a, recs in self.records.items())
            self.failed.add(key)
            event("v2 re-run of a task committed earlier refused")
            return
        except CommitDenied as denied:
            if ta.job_uuid != self.generation_uuid:  # a zombie of a committed generation
                assert denied.winner is None
                event("zombie of an older generation denied")
                return
            if ta.app_attempt < self.app:
                assert denied.winner is None
                event("zombie of an older application attempt denied")
                return
            assert key in self.failed or ta.task in app_records, "denied without a reason"
            if denied.winner is not None:
                assert denied.winner["attempt"] == app_records[ta.task]
            return
        assert key not in self.failed, "an attempt recorded as failed committed"
        assert ta.app_attempt == self.app, "a zombie of an older application attempt committed"
        assert app_records.setdefault(ta.task, ta.attempt) == ta.attempt == rec["attempt"]
        self.committing.add(key)

    @precondition(lambda self: self.open and self.committed_output is None)
    @rule(pick=st.integers(0, 10**6))
    def abort_attempt(self, pick: int) -> None:
        ta, _rows = self.open.pop(pick % len(self.open))
        if ta.job_uuid != self.generation_uuid:
            return
        assert self.c.abort_task(ta) is True
        self.failed.add((ta.app_attempt, ta.attempt))

    @precondition(lambda self: self.committed_output is None)
    @rule()
    def restart_application_attempt(self) -> None:
        """A cleared DAG run: a new application attempt; open attempts of the old one become zombies."""
        ctx = self.c.setup_job()
        if ctx.state == "running":
            self.app = ctx.app_attempt

    @precondition(lambda self: self.committed_output is None)
    @rule(task=st.integers(0, TASKS - 1))
    def recover(self, task: int) -> None:
        rec = self.c.recover_task(task)
        winner = self.expected_winner(task)
        assert (rec and rec["attempt"]) == winner
        if rec is not None:
            self.records.setdefault(self.app, {})[task] = rec["attempt"]

    def _complete(self) -> bool:
        return all(self.expected_winner(t) is not None for t in range(TASKS))

    @precondition(lambda self: self.committed_output is None and not self._complete())
    @rule()
    def commit_incomplete_job(self) -> None:
        self.commit_job(None, 1)

    @precondition(lambda self: self.committed_output is None and self._complete())
    @rule(point=st.sampled_from(COMMIT_POINTS + [None]), nth=st.integers(1, 3))
    def commit_job(self, point: str | None, nth: int) -> None:
        complete = all(self.expected_winner(t) is not None for t in range(TASKS))
        for t in range(TASKS):  # job commit adopts every recoverable task into the current attempt first
            if self.expected_winner(t) is not None:
                self.records.setdefault(self.app, {})[t] = self.expected_winner(t)
        if point:
            faults.arm(point, "raise", nth)
        try:
            self.c.commit_job(TASKS)
        except JobIncomplete as exc:
            assert not complete and exc.missing
            event("job commit refused: incomplete")
            return
        except faults.InjectedFault:
            event("job commit killed, then resumed")
            assert complete
            faults.disarm()
            self.c.commit_job(TASKS)  # the retry finishes it
        finally:
            faults.disarm()
        assert complete
        self.committed_output = {t: self.expected_winner(t) for t in range(TASKS)}
        event("job committed")
        if any(a < self.app for a in self.records):
            event("job committed after an application-attempt restart")
        rows = sc.read_rows(self.root)
        sc.assert_exactly_once(rows, tasks=TASKS)
        assert {r["task"]: r["attempt"] for r in rows} == self.committed_output

    @precondition(lambda self: self.committed_output is not None)
    @rule()
    def rerun_after_commit(self) -> None:
        """A clear of the committed run: a new generation; attempts still open are zombies of the old one."""
        ctx = self.c.setup_job()
        assert ctx.generation >= 1 and ctx.job_uuid != self.generation_uuid
        self.generation_uuid, self.app = ctx.job_uuid, ctx.app_attempt
        self.records, self.failed, self.committed_output = {}, set(), None
        self.previous_output = True

    # ---------------------------------------------------------------- invariants
    @invariant()
    def output_is_never_duplicated(self) -> None:
        if not hasattr(self, "root"):
            return
        rows = sc.read_rows(self.root)
        if not (self.algorithm == 2 and getattr(self, "previous_output", False) and self.committed_output is None):
            # v2's documented exposure: during a re-run, new task commits sit next to the previous generation's
            # files until job commit replaces them; everything else must never show a row twice
            sc.check_no_duplicates(rows)
        if self.algorithm == 1 and self.committed_output is None and not getattr(self, "previous_output", False):
            assert rows == [], "v1: nothing visible before job commit"


TestSchedules = Schedules.TestCase
TestSchedules.settings = settings(max_examples=int(os.environ.get("COMMIT_SCHEDULES", "40")), stateful_step_count=30,
                                  deadline=None, suppress_health_check=list(HealthCheck))
