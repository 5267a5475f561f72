"""Jobs that replace a target's ``_SUCCESS``, for the tests of readers that verify it (test_marker_reads.py and
the sensor's): one job's whole commit, and the same in a child process stopped at every fault point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_commit_provider.protocol import FileOutputCommitter, faults, run_task_attempt
from airflow_commit_provider.protocol.paths import is_hidden

#: the checkout (not ``tests.conftest.REPO``: importing the conftest in a child process prepares an Airflow home)
REPO = Path(__file__).resolve().parents[2]
TASKS = 3


def days_of(mode: str, k: int) -> list[str]:
    """The partitions job *k* writes: in dynamic mode two of three (job 1 replaces d1, adds d2 and keeps job 0's
    d0), in overwrite mode d0 and d1 (replacing everything)."""
    return [f"d{k % 3}", f"d{(k + 1) % 3}"] if mode == "dynamic" else ["d0", "d1"]


def _table(k: int, task: int, day: str) -> pa.Table:
    return pa.table({"job": pa.array([k] * 4, pa.int32()), "task": pa.array([task] * 4, pa.int32()),
                     "row": pa.array(range(4), pa.int32()), "day": [day] * 4})


def commit_one(root: str, k: int, mode: str, algorithm: int) -> dict[str, Any]:
    """Job ``job-<k>``: TASKS tasks, then job commit; returns its manifest."""
    c = FileOutputCommitter(root, f"job-{k}", algorithm=algorithm, mode=mode, partition_by=["day"],
                            commit_threads=2)
    c.setup_job()
    days = days_of(mode, k)
    for t in range(TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(_table(k, t, days[t % len(days)])))
    return c.commit_job(TASKS)


def visible_files(root: str) -> dict[str, int]:
    """The files a reader that skips ``_`` and ``.`` names sees under *root*, with sizes (os.walk, not the store)."""
    out = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        for name in filenames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if not is_hidden(rel):
                out[rel] = os.path.getsize(os.path.join(dirpath, name))
    return out


class PausedWriter:
    """Job 1 (tasks and job commit) in a child process that stops itself (SIGSTOP) at every fault point of the
    protocol it reaches, each once: the test looks at the target between any two steps of a legitimate commit."""

    def __init__(self, root: str, mode: str, algorithm: int) -> None:
        env = {**os.environ, faults.ENV_VAR: ",".join(f"{p}=stop" for p in faults.POINTS),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        code = (f"from tests.protocol.marker_writer import commit_one; "
                f"commit_one({root!r}, 1, {mode!r}, {algorithm!r})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env)
        self.exited = False
        self._wait()

    def _wait(self) -> None:
        """Until the child stops at its next point or exits (the kernel reports each stop once)."""
        _pid, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            self.exited = True
            self.proc.returncode = os.waitstatus_to_exitcode(status)

    def advance(self) -> None:
        """On to the next point (or the end)."""
        os.kill(self.proc.pid, signal.SIGCONT)
        self._wait()

    def finish(self) -> None:
        while not self.exited:
            self.advance()
        assert self.proc.returncode == 0, f"job 1 exited with {self.proc.returncode}"
