"""Random schedules of sharded task instances in real worker processes: exactly once after any of them.

A schedule (reproducible from its seed) draws a stage of 2-3 task instances x 2-5 shards (algorithm 1 or 2,
``append`` or ``overwrite``) and runs it as Airflow might: each try of a task instance in its own worker process
(``shard_scenario``), which is SIGKILLed or ``os._exit``-ed at the n-th time it reaches a random task-side fault
point, or paused there (SIGSTOP: a zombie) and woken (SIGCONT) steps later, perhaps after its retry, a clear of the
run (a new application attempt) or the job commit; clears; the job commit (which may find tasks missing); until
every task instance has succeeded and the job has committed. Then every zombie is woken, and the output read back
row by row must hold every task's rows once, from one attempt.

After every try that ran while no zombie was awake, the user code it called must be exactly that of the shards
not committed when it started (a try killed midway: a subset of them).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_commit_provider.operators.shards import shard_tasks
from airflow_commit_provider.protocol import JobIncomplete

from . import scenario as sc
from . import shard_scenario as ss


@dataclass
class Schedule:
    seed: int
    cfg: dict[str, Any]
    steps: list[str] = field(default_factory=list)
    tries: dict[int, int] = field(default_factory=dict)     # map index -> last try number
    done: set[int] = field(default_factory=set)             # task instances whose last try succeeded
    zombies: list[Any] = field(default_factory=list)        # paused worker processes
    committed: bool = False


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def _run_try(s: Schedule, rng: random.Random, i: int) -> str | None:
    """One try of task instance *i*: plain, killed or paused at a random fault point. A violation, or None."""
    s.tries[i] = s.tries.get(i, 0) + 1
    attempt = s.tries[i]
    n = s.cfg["shards"]
    tasks = set(shard_tasks(i, n))
    before_committed = ss.committed_tasks(s.cfg) & tasks
    before_calls = sc.calls(s.cfg)
    kind = rng.choice(["plain", "plain", "kill", "exit", "stop"])
    fault = None if kind == "plain" else f"{rng.choice(ss.SHARD_POINTS)}={kind}@{rng.randint(1, 2 * n)}"
    s.steps.append(f"try {attempt} of instance {i}" + (f" ({fault})" if fault else ""))
    if kind == "stop":
        proc = ss.spawn(s.cfg, i, attempt, fault, wait=False)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _stopped(proc.pid):
            if time.monotonic() > deadline:
                proc.kill()
                return f"try {attempt} of instance {i} neither stopped nor ended"
            time.sleep(0.005)
        if proc.poll() is None:
            s.zombies.append(proc)
            return None
        rc, out = proc.returncode, proc.stdout.read() if proc.stdout else ""
    else:
        done = ss.spawn(s.cfg, i, attempt, fault)
        rc, out = done.returncode, done.stdout
    ran = {t for t in (sc.calls(s.cfg) - before_calls) if t in tasks}   # a paused zombie calls nothing
    if not ran <= tasks - before_committed:
        return f"try {attempt} of instance {i} ran committed shards: ran {sorted(ran)}, " \
               f"committed before {sorted(before_committed)}"
    if rc == 0 and '"ok": true' in out:
        s.done.add(i)
        if not s.committed and ran != tasks - before_committed:
            return f"try {attempt} of instance {i} skipped uncommitted shards: ran {sorted(ran)}"
    else:
        s.done.discard(i)
    return None


def _wake(s: Schedule, rng: random.Random) -> None:
    proc = s.zombies.pop(rng.randrange(len(s.zombies)))
    s.steps.append(f"wake zombie pid {proc.pid}")
    os.kill(proc.pid, signal.SIGCONT)
    proc.communicate(timeout=120)


def _commit(s: Schedule) -> None:
    s.steps.append("job commit")
    try:
        sc.committer(s.cfg).commit_job(s.cfg["instances"] * s.cfg["shards"])
        s.committed = True
    except JobIncomplete:
        pass


def run_schedule(seed: int, base: str, max_steps: int = 14) -> tuple[str | None, Schedule]:
    """One schedule; returns its violation (None when exactly once held) and the schedule (its steps)."""
    rng = random.Random(seed)
    root, work = tempfile.mkdtemp(dir=base), tempfile.mkdtemp(dir=base)
    cfg = {"root": os.path.join(root, "out"), "work": work, "algorithm": rng.choice([1, 2]),
           "mode": rng.choice(["append", "overwrite"]), "instances": rng.randint(2, 3), "shards": rng.randint(2, 5),
           "shard_threads": rng.choice([1, 1, 2])}
    s = Schedule(seed, cfg)
    try:
        sc.committer(cfg).setup_job()
        for _ in range(max_steps):
            if s.committed:
                break
            action = rng.choice(["try"] * 6 + ["wake"] * 2 + ["clear", "commit"])
            if action == "wake" and s.zombies:
                _wake(s, rng)
            elif action == "clear" and not s.committed:
                s.steps.append("clear of the run: setup again")   # every task instance runs again
                sc.committer(cfg).setup_job()
                s.done.clear()
            elif action == "commit" and len(s.done) == cfg["instances"]:
                _commit(s)
            else:
                violation = _run_try(s, rng, rng.randrange(cfg["instances"]))
                if violation:
                    return violation, s
        while not s.committed:   # Airflow retries until the stage succeeds
            for i in range(cfg["instances"]):
                for _ in range(3):
                    if i in s.done:
                        break
                    violation = _run_try(s, _NoFault(), i)
                    if violation:
                        return violation, s
                else:
                    return f"instance {i}: three tries without a fault did not succeed", s
            _commit(s)
            if not s.committed:
                s.done.clear()
        while s.zombies:
            _wake(s, rng)
        sc.assert_exactly_once(sc.read_rows(cfg["root"]), tasks=cfg["instances"] * cfg["shards"])
        return None, s
    except AssertionError as exc:
        return f"{exc}", s
    finally:
        for proc in s.zombies:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


class _NoFault(random.Random):
    """Draws the plain kind of try (the first choice): the run's last retries."""

    def choice(self, seq: Any) -> Any:
        return seq[0]
