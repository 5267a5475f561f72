"""The lifecycle schedules with real worker processes, SIGKILLed at random moments (local disk).

Every protocol call of a schedule (tests/protocol/lifecycle.py) runs in a forked worker: each write try has its own
process, which lives across the try's steps (so a zombie resumed much later is the same process), and setup, the
job commit and the teardown each run in a fresh one. Before a call the schedule may arm a kill
(:meth:`ProcessLifecycle.kill_next`): SIGKILL at the *nth* time the worker reaches a fault point (armed in that
worker only, action ``kill``), or from a timer a few milliseconds into the call. The parent then reads what the
store shows through the committer's ``status()``, checks that it is a possible outcome of the interrupted call
(no record of a try that did not commit, no committed job whose winners differ from the model's, ...), brings the
model in line, and the schedule goes on: a kill is a try, a commit or a teardown that Airflow will retry, or a
zombie that never comes back. The same readers check every step.

CI runs ``COMMIT_PROCESS_SCHEDULES`` schedules (default 6, ~20 s); ``python -m tests.schedules --processes 500`` is
the long run.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from airflow_commit_provider.protocol import (
    CommitDenied,
    CorruptRecord,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    JobIncomplete,
    JobNotSetUp,
    TaskAttemptWriter,
    faults,
)

from . import lifecycle as lc
from .lifecycle import Config, Driver, Gen, Killed, Lifecycle, Rec, Try

COUNT = int(os.environ.get("COMMIT_PROCESS_SCHEDULES", "6"))
STEPS = int(os.environ.get("COMMIT_PROCESS_SCHEDULE_STEPS", "30"))
SEED = int(os.environ.get("COMMIT_SCHEDULES_SEED", "0"))
#: how long the parent waits for a worker's answer before calling it hung
HANG_SECONDS = 120

_ERRORS: dict[str, type[Exception]] = {e.__name__: e for e in (
    JobAlreadyCommitted, JobNotSetUp, InvalidOutputSpec, CorruptRecord, faults.InjectedFault)}


class WorkerError(Exception):
    """An exception in a worker with no counterpart here: the parent reports it like an in-process one."""


# ---------------------------------------------------------------------------------------------------- workers
def _serve(conn: Any, cfg: Config, target: lc.Target) -> None:
    """The worker's loop: one protocol call per message, answered with its outcome."""
    c = target.committer(cfg)
    state: dict[str, Any] = {}
    while True:
        try:
            op, args, point = conn.recv()
        except EOFError:
            return
        if op == "exit":
            return
        faults.disarm()
        if point:
            name, _, nth = point.partition("@")
            faults.arm(name, "kill", int(nth or 1))
        try:
            answer: tuple[str, Any] = ("ok", _OPS[op](c, cfg, state, *args))
        except CommitDenied as denied:
            answer = ("denied", (str(denied), denied.task, denied.attempt, denied.winner, denied.attempt_failed))
        except JobIncomplete as exc:
            answer = ("incomplete", (str(exc), exc.missing))
        except Exception as exc:  # noqa: BLE001 - every outcome goes back to the parent
            answer = ("error", (type(exc).__name__, f"{exc}"))
        faults.disarm()
        conn.send(answer)


def _op_setup_task(c: Any, cfg: Config, state: dict[str, Any], task: int, n: int) -> tuple[int, str]:
    ta = state["ta"] = c.setup_task(task, n)
    state["w"] = TaskAttemptWriter(c, ta, partition_by=cfg.partition_by, max_rows_per_file=cfg.max_rows_per_file)
    return ta.app_attempt, ta.job_uuid


def _op_commit(c: Any, cfg: Config, state: dict[str, Any]) -> dict[str, Any]:
    w = state["w"]
    kwargs = {"sizes": w.sizes} if getattr(w, "sizes", None) is not None else {}
    return c.commit_task(state["ta"], w.rows, **kwargs)


def _op_abort(c: Any, cfg: Config, state: dict[str, Any], close_first: bool) -> bool:
    if close_first:
        try:
            state["w"].close()
        except Exception:  # noqa: BLE001, S110 - run_task_attempt's `with writer` closes it, errors or not
            pass
    return c.abort_task(state["ta"])


def _op_commit_job(c: Any, cfg: Config, state: dict[str, Any]) -> dict[str, Any]:
    manifest = c.commit_job(cfg.tasks)
    return {"job_uuid": manifest["job_uuid"], "tasks": manifest["tasks"]}


def _op_setup_job(c: Any, cfg: Config, state: dict[str, Any]) -> dict[str, Any]:
    return c.setup_job().to_dict()


_OPS: dict[str, Callable[..., Any]] = {
    "setup_job": _op_setup_job,
    "recover": lambda c, cfg, state, task: c.recover_task(task),
    "setup_task": _op_setup_task,
    "write": lambda c, cfg, state, rows: state["w"].write(lc.make_table(rows, cfg.partition_by)),
    "close": lambda c, cfg, state: state["w"].close(),
    "commit": _op_commit,
    "abort": _op_abort,
    "abort_job": lambda c, cfg, state, purge: c.abort_job(keep_committed=not purge),
    "commit_job": _op_commit_job,
}


#: the parent's ends of every live worker's pipe: a new worker closes its copies, so that a worker sees EOF when
#: the parent goes away, and only the parent holds them
_PARENT_ENDS: set[Any] = set()


#: the fault points each call can reach (by prefix)
REACHES: dict[str, tuple[str, ...]] = {
    "setup_job": ("setup_job",), "recover": ("recover_task",), "setup_task": ("setup_task", "abort_task"),
    "write": ("writer",), "close": ("writer",), "commit": ("commit_task",), "abort": ("abort_task",),
    "abort_job": ("abort_job",), "commit_job": ("commit_job", "recover_task", "commit_task"),
}


class Worker:
    """A forked process running protocol calls for the schedule; SIGKILLed when the schedule says so."""

    def __init__(self, cfg: Config, target: lc.Target) -> None:
        parent, child = multiprocessing.Pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code (pytest, the driver)
            code = 0
            try:
                parent.close()
                for other in _PARENT_ENDS:
                    other.close()
                _serve(child, cfg, target)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        child.close()
        _PARENT_ENDS.add(parent)
        self.pid, self.conn, self.alive = pid, parent, True

    def call(self, op: str, *args: Any, kill: str | None = None) -> Any:
        """Run *op* in the worker; raises :class:`Killed` when it died (as armed by *kill*, or otherwise)."""
        point = kill if kill and not kill.startswith("timer:") else None
        self.conn.send((op, args, point))
        killed = False
        if kill and kill.startswith("timer:") and not self.conn.poll(float(kill[6:]) / 1000):
            os.kill(self.pid, signal.SIGKILL)
            killed = True
        if not self.conn.poll(HANG_SECONDS):
            os.kill(self.pid, signal.SIGKILL)
            self._reap()
            raise lc.Violation("worker-hung", f"{op}{args} did not answer in {HANG_SECONDS} s")
        try:
            kind, value = self.conn.recv()
        except (EOFError, ConnectionResetError):
            self._reap()
            raise Killed(op) from None
        if killed:   # the answer came just before the signal: the call is done, the worker is not
            self._reap()
        if kind == "ok":
            return value
        if kind == "denied":
            msg, task, attempt, winner, failed = value
            raise CommitDenied(msg, task=task, attempt=attempt, winner=winner, attempt_failed=failed)
        if kind == "incomplete":
            raise JobIncomplete(value[0], value[1])
        name, msg = value
        raise _ERRORS.get(name, WorkerError)(f"{name}: {msg}" if name not in _ERRORS else msg)

    def _reap(self) -> None:
        self.alive = False
        _PARENT_ENDS.discard(self.conn)
        self.conn.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def stop(self) -> None:
        if not self.alive:
            return
        try:
            self.conn.send(("exit", (), None))
        except (BrokenPipeError, OSError):
            pass
        self._reap()


def one_shot(h: ProcessLifecycle, op: str, *args: Any) -> Any:
    """*op* in a fresh worker (setup, job commit, teardown), which then exits."""
    w = Worker(h.cfg, h.target)
    try:
        return w.call(op, *args, kill=h.take_kill(op))
    finally:
        w.stop()


# ---------------------------------------------------------------------------------------------------- lifecycle
class ProcessLifecycle(Lifecycle):
    """:class:`Lifecycle` whose protocol calls run in worker processes that the schedule may SIGKILL."""

    def __init__(self, cfg: Config, target: lc.Target | None = None, *, bucket: str | None = None) -> None:
        assert cfg.store == "local", "worker processes share the store: local disk only"
        self.workers: dict[int, Worker] = {}
        self.armed: str | None = None
        super().__init__(cfg, target, bucket=bucket)

    @property
    def armed_purge(self) -> bool:
        return bool(self.actions) and self.actions[-1] == ("teardown", {"purge": True})

    def take_kill(self, op: str) -> str | None:
        """The armed kill, if the call *op* can reach it: a timer fires in any call, a fault point waits for a call
        that passes it."""
        kill = self.armed
        if kill is None or not (kill.startswith("timer:") or kill.split(".")[0] in REACHES[op]):
            return None
        self.armed = None
        return kill

    @lc.step
    def kill_next(self, spec: str) -> None:
        """The next worker call dies: ``<point>@<nth>`` (SIGKILL at that fault point) or ``timer:<ms>``."""
        self.armed = spec

    # -------------------------------------------------------------------- calls, in workers
    def _try_worker(self, t: Try) -> Worker:
        if t.n not in self.workers:
            self.workers[t.n] = Worker(self.cfg, self.target)
        return self.workers[t.n]

    def _try_call(self, t: Try, op: str, *args: Any) -> Any:
        w = self._try_worker(t)
        if not w.alive:
            raise Killed(op)
        return w.call(op, *args, kill=self.take_kill(op))

    def call_setup_job(self) -> Any:
        return _Ctx(one_shot(self, "setup_job"))

    def call_recover(self, t: Try) -> dict[str, Any] | None:
        return self._try_call(t, "recover", t.task)

    def call_setup_task(self, t: Try) -> tuple[int, str]:
        return tuple(self._try_call(t, "setup_task", t.task, t.n))  # type: ignore[return-value]

    def call_write(self, t: Try) -> None:
        self._try_call(t, "write", sorted(t.rows, key=repr))

    def call_close(self, t: Try) -> None:
        self._try_call(t, "close")

    def call_commit(self, t: Try) -> tuple[str, Any]:
        try:
            return "committed", self._try_call(t, "commit")
        except CommitDenied as denied:
            return "denied", denied
        except (JobAlreadyCommitted, JobNotSetUp) as exc:
            return "gone", exc

    def call_abort_task(self, t: Try, close_first: bool = False) -> bool:
        return self._try_call(t, "abort", close_first)

    def call_abort_job(self, purge: bool) -> dict[str, Any]:
        return one_shot(self, "abort_job", purge)

    def call_commit_job(self, point: str | None = None, nth: int = 1) -> dict[str, Any]:
        return one_shot(self, "commit_job")

    def dispose(self) -> None:
        for w in self.workers.values():
            w.stop()
        super().dispose()

    def check(self) -> None:
        # a try whose process is gone or done keeps no worker (zombies are resumed by their own, live, process)
        for n, w in list(self.workers.items()):
            if self.tries[n].stage in ("noop", "denied", "failed", "error", "killed"):
                w.stop()
                del self.workers[n]
        super().check()

    # -------------------------------------------------------------------- a kill, resolved from the store
    def after_kill(self, rule: str, kwargs: dict[str, Any]) -> None:
        t = self.tries.get(kwargs.get("n", -1))
        if t is not None and rule in ("start", "write", "close", "commit", "fail", "recommit"):
            t.stage = "killed"
        st = self.c.status()
        if rule == "commit_job":
            self._after_killed_commit_job(st)
            return
        if st["state"] in ("absent", "committed"):
            if self.job is not None and st.get("job_uuid") != self.job.uuid:
                self._expect(rule == "teardown", "kill-sync", f"the job record vanished in a killed {rule}")
                self.job = None   # a purge that got as far as the job record
            return
        if self.job is None or st["job_uuid"] != self.job.uuid:
            self._expect(rule == "setup", "kill-sync", f"a job record appeared in a killed {rule}: {st}")
            number = 0 if self.log_gen is None else self.log_gen + 1
            self.serial += 1
            self.job = Gen(self.serial, st["job_uuid"], number, -1)
        job = self.job
        try:
            app = self.c.current_app_attempt()
        except JobNotSetUp:
            app = -1   # a setup killed between the job record and its application attempt, or a purge midway
        if app != job.app:
            self._expect((rule == "setup" and app > job.app) or (rule == "teardown" and self.armed_purge),
                         "kill-sync", f"application attempt {job.app} -> {app} in a killed {rule}")
            job.app = app
            self.last_app = max(self.last_app, job.app)
        if st["state"] == "committing" and job.plan is None:
            self._fail("kill-sync", f"a job commit plan appeared in a killed {rule}")
        self._sync_records(rule, t, st)
        if rule == "teardown" and self.cfg.algorithm == 2:
            job.v2_maybe |= job.v2  # a v2 abort that died: some of its withdrawals happened, some not

    def _after_killed_commit_job(self, st: dict[str, Any]) -> None:
        job, plan = self.job, self.job.plan if self.job else None
        plan = plan or self.pending_plan
        if st["state"] == "committed" and job is not None and st["job_uuid"] == job.uuid:
            assert plan is not None
            self.committed(plan, {"tasks": st["tasks"]})
            self.expect_markers = set()   # a commit killed after its cleanup: _SUCCESS was written before
            return
        if job is None:
            return
        if st["state"] == "committing":
            job.plan = plan
        self._sync_records("commit_job", None, st)

    def _sync_records(self, rule: str, t: Try | None, st: dict[str, Any]) -> None:
        """Records and fates as the store shows them, checked against what the killed call could have done."""
        job = self.job
        assert job is not None
        seen: dict[int, dict[int, Rec]] = {}
        for e in st["tasks"]:
            if e.get("attempt") is not None:
                seen.setdefault(e["app_attempt"], {})[e["task"]] = Rec(e["attempt"], e.get("recovered_from_app")
                                                                         if e.get("recovered_from_app") is not None
                                                                         else e["app_attempt"])
        for task in range(self.cfg.tasks):
            before, after = self.winner(task), _winner(seen, job.app, task)
            if (before and before.n) == (after and after.n):
                continue
            if after is None:
                ok = rule == "teardown" and self.cfg.algorithm == 2   # a v2 abort withdraws commits
            else:
                ok = (before is None and t is not None and rule in ("commit", "recommit") and t.task == task
                      and after.n == t.n and t.claim != "failed")
            self._expect(ok, "kill-sync", f"task {task}: the model's winner {before} became {after} in a killed "
                         f"{rule}")
            if after is not None and t is not None:   # the killed try committed
                t.claim = "committing"
                if self.cfg.algorithm == 2:
                    job.v2_maybe.add(after.n)   # its files may be partly moved
                    job.v2.add(after.n)
        job.records = {a: dict(r) for a, r in seen.items()}
        for e in st["tasks"]:
            for key, fate in (("failed_attempts", "failed"), ("denied_attempts", "committing")):
                for name in e.get(key, []):
                    app, _, n = name.partition(".")
                    other = self.tries.get(int(n))
                    if other is None or other.app != int(app) or other.serial != job.serial:
                        continue
                    if fate == "failed" and other.claim == "committing":
                        # only a v2 abort records a committed try failed: it withdraws the commit
                        self._expect(rule == "teardown" and self.cfg.algorithm == 2, "kill-sync",
                                     f"try {n}, which committed, is recorded failed after a killed {rule}")
                        other.claim, other.files_gone = "failed", True
                    other.claim = other.claim or fate


def _winner(records: dict[int, dict[int, Rec]], app: int, task: int) -> Rec | None:
    for a in sorted(records, reverse=True):
        if a <= app and task in records[a]:
            return records[a][task]
    return None


class _Ctx:
    """A JobContext from its dict (sent back by the worker)."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)

    def __repr__(self) -> str:
        return f"JobContext({self.__dict__})"


class ProcessDriver(Driver):
    """:class:`Driver`, plus a kill armed before about one step in three; job commits die by kills too."""

    #: fault points to kill at, by weight (job commits: see commit_job)
    KILL_POINTS: ClassVar[list[tuple[int, list[str]]]] = [
                   (4, [p for p in faults.POINTS if p.startswith("commit_task.")]),
                   (2, [p for p in faults.POINTS if p.startswith(("writer.", "setup_task.", "recover_task.",
                                                                   "abort_task."))]),
                   (2, [p for p in faults.POINTS if p.startswith("abort_job.")]),
                   (1, [p for p in faults.POINTS if p.startswith("setup_job.")])]

    def commit_job(self) -> None:
        if self.rng.random() < 0.5:
            self.h.kill_next(f"{self.rng.choice(lc.COMMIT_POINTS)}@{self.rng.choice([1, 1, 2, 3])}")  # type: ignore
        self.h.commit_job()

    def one(self) -> None:
        if self.rng.random() < 0.3:
            if self.rng.random() < 0.6:
                weights, groups = zip(*self.KILL_POINTS)
                point = self.rng.choice(self.rng.choices(groups, weights)[0])
                spec = f"{point}@{self.rng.choice([1, 1, 2, 3])}"
            else:
                spec = f"timer:{self.rng.uniform(0.2, 25):.1f}"
            self.h.kill_next(spec)   # type: ignore[attr-defined]
        super().one()


ProcessLifecycle.driver = ProcessDriver   # type: ignore[attr-defined]


def run_processes(count: int, first_seed: int = 0, steps: int = STEPS) -> lc.Tally:
    return lc.run_many("local", count, first_seed=first_seed, steps=steps, lifecycle=ProcessLifecycle,
                       known=lc.known_open)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_random_schedules_with_sigkilled_workers() -> None:
    started = time.monotonic()
    tally = run_processes(COUNT, SEED)
    print(f"processes: {tally.schedules} schedules, {tally.steps} steps in {time.monotonic() - started:.1f} s")
    assert not tally.failures, lc.describe(tally.failures[0], lifecycle=ProcessLifecycle, shrink_it=False)
    if tally.known:
        pytest.xfail(f"{len(tally.known)} schedule(s) hit known open bug(s) {sorted({b for _, b in tally.known})}")


def test_a_try_killed_in_its_commit_is_recovered_or_rerun() -> None:
    """A worker SIGKILLed at every point of its task commit: the run's clear then recovers the task (the record was
    written) or runs it again (it was not); the output holds the task's rows once."""
    for point in [p for p in faults.POINTS if p.startswith("commit_task.")]:
        h = ProcessLifecycle(Config(store="local", algorithm=random.choice([1, 2]), mode="append", tasks=1,
                                    partition_by=("p",)))
        try:
            h.setup()
            h.start(n=1, task=0, parts=[["a"]])
            h.write(n=1)
            h.close(n=1)
            h.kill_next(f"{point}@1")
            h.commit(n=1)
            h.teardown()
            h.setup()
            h.start(n=2, task=0, parts=[["b"]])
            h.write(n=2)
            h.close(n=2)
            h.commit(n=2)
            h.kill_next("commit_job.mid_move@1")
            h.commit_job()
            h.commit_job()
        finally:
            h.dispose()

