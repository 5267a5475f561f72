"""The lifecycle schedules with real worker processes, SIGKILLed at random moments (local disk).

Every protocol call of a schedule (tests/protocol/lifecycle.py) runs in a forked worker: each write try has its own
process, which lives across the try's steps (so a zombie resumed much later is the same process), and setup, the
job commit and the teardown each run in a fresh one. Before a call the schedule may arm a kill
(:meth:`ProcessLifecycle.kill_next`): SIGKILL at the *nth* time the worker reaches a fault point (armed in that
worker only, action ``kill``), or from a timer a few milliseconds into the call. The parent then reads what the
store shows through the committer's ``status()``, checks that it is a possible outcome of the interrupted call
(no record of a try that did not commit, no committed job whose winners differ from the model's, ...), brings the
model in line, and the schedule goes on: a kill is a try, a commit or a teardown that Airflow will retry, or a
zombie that never comes back. A call may also *pause* (:meth:`ProcessLifecycle.pause_next`: SIGSTOP at a fault
point) and be woken much later (:meth:`ProcessLifecycle.resume`, SIGCONT), after teardowns, clears and job
commits: a zombie stopped at the worst moment. What a woken call did must again be a possible outcome (a new
record only for its own try; a purge never deletes the job under a running commit; a job commit woken after the run
moved on commits the winners recovery picks now), and the same readers check every step.

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
from dataclasses import replace
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
from .lifecycle import Config, Driver, Gen, Killed, Lifecycle, Paused, Plan, Rec, Try

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
            op, args, point, action = conn.recv()
        except EOFError:
            return
        if op == "exit":
            return
        faults.disarm()
        if point:
            name, _, nth = point.partition("@")
            try:
                faults.arm(name, action, int(nth or 1))
            except ValueError:   # a protocol version without the 'stop' action: its 'kill' stops instead
                faults.os = _StopInsteadOfKill()   # type: ignore[attr-defined]
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


class _StopInsteadOfKill:
    """``os`` for the faults module of a version without the ``stop`` action: SIGKILL to itself becomes SIGSTOP."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def kill(pid: int, sig: int) -> None:
        os.kill(pid, signal.SIGSTOP if pid == os.getpid() and sig == signal.SIGKILL else sig)


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
    "abort_job": ("abort_job", "commit_job"),   # a v2 abort deletes visible files through commit_job.mid_delete
    "commit_job": ("commit_job", "recover_task", "commit_task"),
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
        self.pid, self.conn, self.alive, self.paused, self.op = pid, parent, True, False, ""

    def call(self, op: str, *args: Any, kill: str | None = None, stop: str | None = None) -> Any:
        """Run *op* in the worker; raises :class:`Killed` when it died (as armed by *kill*, or otherwise), and
        :class:`Paused` when it stopped itself at the fault point *stop* (``point@nth``)."""
        point, action = (kill, "kill") if kill and not kill.startswith("timer:") else (stop, "stop")
        self.conn.send((op, args, point, action))
        self.op = op
        killed = False
        if kill and kill.startswith("timer:") and not self.conn.poll(float(kill[6:]) / 1000):
            os.kill(self.pid, signal.SIGKILL)
            killed = True
        if stop and not kill:
            deadline = time.monotonic() + HANG_SECONDS
            while not self.conn.poll(0.002) and time.monotonic() < deadline:
                pid, status = os.waitpid(self.pid, os.WUNTRACED | os.WNOHANG)
                if pid and os.WIFSTOPPED(status):
                    self.paused = True
                    raise Paused(op)
        return self._answer(op, killed)

    def resume(self) -> Any:
        """Wake the paused worker; its call goes on from the fault point and answers as usual."""
        self.paused = False
        os.kill(self.pid, signal.SIGCONT)
        return self._answer(self.op, False)

    def _answer(self, op: str, killed: bool) -> Any:
        if not self.conn.poll(HANG_SECONDS):
            os.kill(self.pid, signal.SIGKILL)
            self._reap()
            raise lc.Violation("worker-hung", f"{op} did not answer in {HANG_SECONDS} s")
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
        if self.paused:   # a stopped process reads nothing: a zombie that never wakes
            os.kill(self.pid, signal.SIGKILL)
            self._reap()
            return
        try:
            self.conn.send(("exit", (), None, None))
        except (BrokenPipeError, OSError):
            pass
        self._reap()


def one_shot(h: ProcessLifecycle, op: str, *args: Any) -> Any:
    """*op* in a fresh worker (setup, job commit, teardown), which then exits (or stays paused, a zombie)."""
    w = Worker(h.cfg, h.target)
    try:
        return w.call(op, *args, kill=h.take_kill(op), stop=h.take_stop(op))
    except Paused:
        h.paused_worker = w
        raise
    finally:
        if not w.paused:
            w.stop()


# ---------------------------------------------------------------------------------------------------- lifecycle
class ProcessLifecycle(Lifecycle):
    """:class:`Lifecycle` whose protocol calls run in worker processes that the schedule may SIGKILL."""

    def __init__(self, cfg: Config, target: lc.Target | None = None, *, bucket: str | None = None) -> None:
        assert cfg.store != "memory", "worker processes share the store: local disk or S3"
        # an audited stage's schedules run in one process (lifecycle.py); its kills and zombie audits are the
        # fault matrix's (tests/protocol/test_audit_faults.py)
        cfg = replace(cfg, audit=None)
        self.workers: dict[int, Worker] = {}
        self.armed: str | None = None
        self.armed_stop: str | None = None
        self.paused_worker: Worker | None = None
        #: calls paused in the middle, by number: (rule, its arguments, the fault point, the worker)
        self.paused: dict[int, tuple[str, dict[str, Any], str, Worker]] = {}
        self.pauses = 0
        self.woken = ""
        self.expected_commit = ""
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

    def take_stop(self, op: str) -> str | None:
        stop = self.armed_stop
        if stop is None or stop.split(".")[0] not in REACHES[op]:
            return None
        self.armed_stop = None
        return stop

    @lc.step
    def kill_next(self, spec: str) -> None:
        """The next worker call dies: ``<point>@<nth>`` (SIGKILL at that fault point) or ``timer:<ms>``."""
        self.armed = spec

    @lc.step
    def pause_next(self, spec: str) -> None:
        """The next worker call that reaches ``<point>@<nth>`` stops there (SIGSTOP): a zombie paused at the worst
        moment, which :meth:`resume` may wake after anything else happened."""
        self.armed_stop = spec

    @lc.step
    def resume(self, k: int) -> None:
        """Paused call *k* wakes (SIGCONT) and goes on from where it stopped."""
        if k not in self.paused:
            return lc.SKIP
        rule, kwargs, point, w = self.paused.pop(k)
        t = self.tries.get(kwargs.get("n", -1))
        job_before = self.job
        committing = job_before is not None and job_before.plan is not None
        self.expected_commit = self._predict_commit(t)[0] if t is not None else ""
        try:
            answer: Any = w.resume()
        except Killed:
            answer = Killed
        except Exception as exc:  # noqa: BLE001 - a woken zombie may fail in many ways; the store tells the truth
            answer = exc
        self.events[f"resumed {rule} paused at {point.split('@')[0]}"] += 1
        if t is not None:
            op = w.op
            ok = answer is not Killed and not isinstance(answer, Exception)
            t.stage = {"write": "written", "close": "closed", "setup_task": "new"}.get(op, "killed") \
                if ok else "killed"
            if op == "setup_task" and ok:
                t.app = answer[0]
            if op == "commit" and ok:
                t.stage = "committed"
            if t.stage == "killed":
                w.stop()
                self.workers.pop(t.n, None)
        if rule == "teardown" and kwargs.get("purge") and committing:
            self._expect(self.c.job_record() is not None or self.c.commit_log() is not None, "resumed-purge",
                         "a purge woken during a job commit deleted the job under it")
        self.after_kill(rule, kwargs, woken=point)

    # -------------------------------------------------------------------- calls, in workers
    def _try_worker(self, t: Try) -> Worker:
        if t.n not in self.workers:
            self.workers[t.n] = Worker(self.cfg, self.target)
        return self.workers[t.n]

    def _try_call(self, t: Try, op: str, *args: Any) -> Any:
        w = self._try_worker(t)
        if not w.alive:
            raise Killed(op)
        try:
            return w.call(op, *args, kill=self.take_kill(op), stop=self.take_stop(op))
        except Paused:
            self.paused_worker = w
            raise

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
        for w in list(self.workers.values()) + [w for *_, w in self.paused.values()]:
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
    def after_pause(self, rule: str, kwargs: dict[str, Any]) -> None:
        w, self.paused_worker = self.paused_worker, None
        assert w is not None
        self.pauses += 1
        point = next((a[1]["spec"] for a in reversed(self.actions) if a[0] == "pause_next"), "?")
        self.paused[self.pauses] = (rule, kwargs, point, w)
        t = self.tries.get(kwargs.get("n", -1))
        if t is not None:
            t.stage = "paused"
        self.after_kill(rule, kwargs, paused=True)

    def after_kill(self, rule: str, kwargs: dict[str, Any], *, paused: bool = False, woken: str = "") -> None:
        """The call of *rule* died (or stopped, *paused*; or a stopped one finished, *woken* at that point): the
        model takes what the store shows, once it is a possible outcome of that call."""
        t = self.tries.get(kwargs.get("n", -1))
        if t is not None and rule in ("start", "write", "close", "commit", "fail", "recommit") \
                and not paused and not woken:
            t.stage = "killed"
        self.woken = woken
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
            app = self.c.job.current_app_attempt()
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
        job = self.job
        if job is None:
            return
        if st["state"] == "committed" and st["job_uuid"] == job.uuid:
            self.committed(self._plan_of(st), {"tasks": st["tasks"]})
            self.expect_markers = set()   # a commit killed after its cleanup: _SUCCESS was written before
            return
        if st["state"] == "committing" and job.plan is None:
            job.plan = self.pending_plan if not self.woken else self._plan_of(
                {"tasks": [{"task": t, "attempt": r.n} for t, r in
                           ((t, self.winner(t)) for t in range(self.cfg.tasks)) if r is not None]})
        self._sync_records("commit_job", None, st)

    def _plan_of(self, st: dict[str, Any]) -> Plan:
        """The plan a job commit followed, from the winners it names (the commit log's tasks): each must be a try
        of that task, of this job, that committed; and (I1) the one recovery picks."""
        job = self.job
        assert job is not None
        winners: dict[int, Rec] = {}
        for entry in st["tasks"]:
            t = self.tries.get(entry["attempt"])
            self._expect(t is not None and t.task == entry["task"] and t.serial == job.serial
                         and t.claim == "committing", "kill-sync: job commit",
                         f"the job committed try {entry['attempt']} for task {entry['task']}, which never committed "
                         f"in this job ({t})")
            winners[entry["task"]] = Rec(entry["attempt"], t.app if t else -1)
        now = {task: r.n for task in range(self.cfg.tasks) if (r := self.winner(task)) is not None}
        if self.woken:
            self._expect({t: r.n for t, r in winners.items()} == now, "resumed-commit_job: stale winners",
                         f"a job commit woken after the run moved on committed {({t: r.n for t, r in winners.items()})}"
                         f", recovery picks {now} now")
        new = self.rows_of(winners.values())
        return Plan(job.app, winners, new, self.target_after(new))

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
                # the interrupted try's own commit; a woken one that had claimed its commit before it stopped
                # finishes it even in an application attempt that is no longer the current one, and it counts
                ok = (t is not None and rule in ("commit", "recommit") and t.task == task and after.n == t.n
                      and t.claim != "failed" and (before is None or self.woken))
                if ok and self.woken.startswith("commit_task.before_record"):   # stopped before anything: as usual
                    ok = self.expected_commit == "commit"
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

    #: where a paused zombie hurts most: inside a task commit, a teardown, a job commit, a setup
    PAUSE_POINTS: ClassVar[list[str]] = [p for p in faults.POINTS if p.startswith(
        ("commit_task.", "abort_job.", "commit_job.", "setup_job.", "setup_task.", "recover_task."))]

    def one(self) -> None:
        h: ProcessLifecycle = self.h   # type: ignore[assignment]
        if h.paused and self.rng.random() < 0.12:
            h.resume(self.rng.choice(sorted(h.paused)))
            return
        if self.rng.random() < 0.2:
            h.pause_next(f"{self.rng.choice(self.PAUSE_POINTS)}@{self.rng.choice([1, 1, 2])}")
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



@pytest.mark.parametrize("purge", [False, True])
def test_a_zombie_teardown_woken_after_the_clear_stands_down(purge: bool) -> None:
    """The teardown of the failed run pauses right after reading the job (SIGSTOP at abort_job.after_read); the user
    clears the run, which recovers the v2 task and commits (or, for the purge, dies after fixing its plan); then
    the teardown wakes. It must not delete the committed output, nor the job under a running commit. (Found from
    outside and fixed in 4a2d10c; pinned here as a schedule.)"""
    h = ProcessLifecycle(Config(store="local", algorithm=2, mode="append", tasks=1, partition_by=("p",)))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[["a"]])
        h.write(n=1)
        h.close(n=1)
        h.commit(n=1)
        h.pause_next("abort_job.after_read@1")
        h.teardown(purge=purge)
        h.setup()
        if purge:
            h.kill_next("commit_job.after_plan@1")
        h.commit_job()
        h.resume(1)
        h.commit_job()
        assert h.events["resumed teardown paused at abort_job.after_read"] == 1
    finally:
        h.dispose()


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("point", ["commit_job.after_deletes@1", "commit_job.after_commit_log@1",
                                   "commit_job.after_success@1"])
def test_a_zombie_job_commit_woken_after_the_next_generation_was_set_up_changes_nothing(algorithm: int,
                                                                                          point: str) -> None:
    """The commit task pauses after a stage (SIGSTOP at *point*); its retry commits the job; the user clears the
    run, so a new generation is set up; then the old commit wakes. It used to go on with its remaining stages,
    and its cleanup moved the new generation's job record and application attempt away: the new generation then
    counted as committed, with the old generation's output (found by ``python -m tests.schedules --processes``,
    seed 20035). Each stage now first checks that the job record is still its generation's."""
    h = ProcessLifecycle(Config(store="local", algorithm=algorithm, mode="append", tasks=1, partition_by=()))
    try:
        h.setup()
        h.pause_next(point)
        h.start(n=3, task=0, parts=[[]])
        h.write(n=3)
        h.close(n=3)
        h.commit(n=3)
        h.commit_job()
        h.commit_job()
        h.setup()
        h.resume(1)
        h.start(n=4, task=0, parts=[[]])   # the new generation goes on: its task, then its commit
        h.write(n=4)
        h.close(n=4)
        h.commit(n=4)
        h.commit_job()
    finally:
        h.dispose()


#: the points of a v2 teardown between removing a task's record and its last visible file: right after task 0's
#: record, after task 0's first visible file (of three), right after task 1's record (task 0 fully withdrawn)
BETWEEN_RECORD_AND_FILES = ["abort_job.after_task_record@1", "commit_job.mid_delete@1",
                            "abort_job.after_task_record@2"]


@pytest.mark.parametrize("point", BETWEEN_RECORD_AND_FILES)
def test_a_v2_teardown_killed_between_a_record_and_its_files_needs_one_clear(point: str) -> None:
    """v2: the failed run's teardown is SIGKILLed between removing a committed task's record and its visible files
    (issue 19): those files carry the job uuid and the names every try of the task writes again. One clear of the
    run (setup, a new try of every task whose commit went, job commit) must be enough: the new tries commit over
    the failed run's files, the job commit sweeps what they did not replace, and the output holds every committed
    row exactly once under a true ``_SUCCESS``. (Before the fix every try of the task was refused as a clobber,
    "would replace 1 visible file(s)", until a second teardown swept the strays.)"""
    import pyarrow.dataset as ds

    from airflow_commit_provider.protocol import read_success_marker

    h = ProcessLifecycle(Config(store="local", algorithm=2, mode="append", tasks=2, partition_by=("p",)))
    try:
        h.setup()
        for n, task in ((1, 0), (2, 1)):   # both tasks commit, three partitions (three visible files) each
            h.start(n=n, task=task, parts=[["a"], ["b"], ["c"]])
            h.write(n=n)
            h.close(n=n)
            h.commit(n=n)
        h.kill_next(point)
        h.teardown()
        assert h.events["worker killed in teardown"] == 1, "the teardown was not killed where armed"
        stray_task = 1 if point == "abort_job.after_task_record@2" else 0   # record gone, visible files not
        st = h.c.status()
        assert not [t for t in st["tasks"] if t["task"] == stray_task and t.get("attempt") is not None], \
            f"task {stray_task}'s record should be gone"
        assert any(f"part-{stray_task:05d}-" in rel for rel in h.target.visible()), \
            f"no visible file of task {stray_task} left: the kill did not leave a stray"
        h.setup()                                              # the one clear
        for n, task in ((3, 0), (4, 1)):   # fewer partitions: some of the failed run's files are not replaced
            h.start(n=n, task=task, parts=[["a"], ["b"]])
            if h.tries[n].stage == "noop":
                continue   # task 1, when the teardown died before its record: recovered
            h.write(n=n)
            h.close(n=n)
            h.commit(n=n)
            assert h.tries[n].stage == "committed", f"try {n} of task {task} did not commit"
        h.commit_job()
        assert h.events["commit_job: committed"] == 1 and h.job is None
        manifest = read_success_marker(h.target.path, verify_files=True)
        winners = {t["task"]: t["attempt"] for t in manifest["tasks"]}
        assert winners == ({0: 3, 1: 4} if stray_task == 1 else {0: 3, 1: 2})   # task 1 recovered if it could be
        rows = ds.dataset(h.target.path, format="parquet", partitioning="hive").to_table().to_pylist()
        ours = [(r["task"], r["attempt"], r["row"], r["p"]) for r in rows if r["task"] in winners]
        assert len(ours) == len(set(ours)), "a row is visible twice"
        assert set(ours) == {r[:3] + (r[3][0],) for n in winners.values() for r in h.tries[n].rows}, \
            "the committed tries' rows are not all visible"
        assert {(task, attempt) for task, attempt, *_ in ours} == set(winners.items()), \
            "rows of a try that is not the committed one are visible"
        assert not [rel for rel in h.target.visible() if "part-0000" in rel and rel not in
                    {f["path"] for f in manifest["files"]}], "a visible file of the job that _SUCCESS does not list"
    finally:
        h.dispose()


@pytest.mark.parametrize("rerun", ["clear, woken before the job commit", "clear, woken after the job commit",
                                   "retry in the same application attempt"])
def test_a_v2_teardown_paused_between_a_record_and_its_files_spares_the_rerun(rerun: str) -> None:
    """v2: the failed run's teardown stops (SIGSTOP) right after removing task 0's record, before its visible files;
    the task runs again, after a clear of the run (a new application attempt) or retried in the same one (a clear
    of only the failed tasks), and the new try commits over those files (same names). When the teardown wakes, the
    files at those names are the new try's, whose attempt nobody recorded failed (I10): after a clear the teardown
    stands down, in the same application attempt it leaves the commit it never saw alone; either way the job
    commit then finds every committed file (it used to fail with CorruptRecord, or lose the rows after the job
    commit) and only the new try's rows are visible."""
    from airflow_commit_provider.protocol import read_success_marker

    h = ProcessLifecycle(Config(store="local", algorithm=2, mode="append", tasks=1, partition_by=("p",)))
    try:
        h.setup()
        h.start(n=1, task=0, parts=[["a"], ["b"]])
        h.write(n=1)
        h.close(n=1)
        h.commit(n=1)
        h.pause_next("abort_job.after_task_record@1")
        h.teardown()
        assert h.paused, "the teardown did not stop at abort_job.after_task_record"
        if rerun.startswith("clear"):
            h.setup()
        h.start(n=2, task=0, parts=[["a"]])
        h.write(n=2)
        h.close(n=2)
        h.commit(n=2)
        assert h.tries[2].stage == "committed"
        if rerun.endswith("after the job commit"):
            h.commit_job()
        h.resume(1)
        assert h.events["resumed teardown paused at abort_job.after_task_record"] == 1
        h.commit_job()
        manifest = read_success_marker(h.target.path, verify_files=True)
        assert [(t["task"], t["attempt"]) for t in manifest["tasks"]] == [(0, 2)]
        assert not [rel for rel in h.target.visible() if "part-00000-" in rel and rel not in
                    {f["path"] for f in manifest["files"]}], "a file of the failed run is still visible"
    finally:
        h.dispose()
