"""Many protocol tasks (shards) in one Airflow task instance: their numbering and the bounded pool that runs them.

Every Airflow task instance costs the scheduler and the executor 0.5-3 s whatever it writes, so a stage of many
small writes spends most of its time in Airflow. With ``shards_per_task=N`` one write task instance runs N
protocol tasks, each a full Hadoop task (its own task attempt, its own task commit, its own recovery):

- **numbering**: shard *s* (0 .. N-1) of the write task instance with map index *i* (0 when unmapped) is protocol
  task ``i * N + s``; a stage of *n* task instances commits ``n * N`` tasks;
- **attempts**: every shard's attempt number is the task instance's try number, so a try and its successor never
  share an attempt of any shard, and a zombie try is fenced shard by shard exactly as an unsharded one is;
- **recovery**: each shard first asks the committer to recover it (``recover_task``), so a retry, or a clear of the
  run, calls the user's code only for the shards that did not commit.

No Airflow import: the fault matrix and the lifecycle schedules run these shards in bare worker processes.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..protocol import FileOutputCommitter, InvalidOutputSpec, TaskAttemptWriter, TaskOutcome, run_task_attempt

log = logging.getLogger(__name__)

#: The keyword arguments a sharded write's callable may name to learn which shard it writes.
SHARD_KWARGS = ("shard_index", "shards_per_task", "task_number")
#: Shards run at once in one task instance unless ``shard_threads`` says otherwise.
DEFAULT_SHARD_THREADS = 4


def check_shards(shards_per_task: Any, shard_threads: Any) -> tuple[int, int | None]:
    """The validated pair; raises :class:`InvalidOutputSpec` saying which one is wrong (the caller names the
    operator)."""
    for name, value in (("shards_per_task", shards_per_task), ("shard_threads", shard_threads)):
        if value is None and name == "shard_threads":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidOutputSpec(f"{name}={value!r}: give a positive integer")
    return shards_per_task, shard_threads


def check_shard_callable(func: Callable[..., Any] | None, shards_per_task: int, owner: str) -> None:
    """A callable of a stage with several shards per task must be able to tell its shards apart: without a
    ``shard_index`` (or ``task_number``) parameter, or ``**kwargs``, every shard would write the same rows."""
    if func is None or shards_per_task == 1:
        return
    params = inspect.signature(func).parameters.values()
    if any(p.kind == p.VAR_KEYWORD or p.name in ("shard_index", "task_number") for p in params):
        return
    name = getattr(func, "__name__", repr(func))
    raise InvalidOutputSpec(f"{owner}: shards_per_task={shards_per_task} runs {name}() {shards_per_task} times per "
                            f"task instance, but it takes no shard_index (nor task_number) parameter: every shard "
                            f"would write the same rows. Add a shard_index parameter (0 .. {shards_per_task - 1}) "
                            f"and write that shard's part of the data")


def check_job_shards(labels: Mapping[str, Any], shards_per_task: int, job_id: str, owner: str) -> None:
    """Refuse a write whose ``shards_per_task`` differs from the one the job was set up with (its record's
    *labels*; 1 when absent, as every unsharded and earlier job is): tasks are numbered by it, so a retry or a
    re-run after the DAG changed it would find other task instances' shards committed under its task numbers and
    "recover" them, and the job commit would then count the wrong tasks: rows silently lost or taken twice."""
    recorded = labels.get("shards_per_task", 1)
    if recorded != shards_per_task:
        raise InvalidOutputSpec(
            f"{owner}: job {job_id} was set up with shards_per_task={recorded}, this stage has shards_per_task="
            f"{shards_per_task}. Its protocol tasks are numbered by it (map index x shards_per_task + shard), so "
            "it cannot change within a job: restore shards_per_task, or start another job (a new run, or "
            "another job_key)")


def shard_tasks(map_index: int, shards_per_task: int) -> range:
    """The protocol tasks of the write task instance *map_index*."""
    return range(map_index * shards_per_task, (map_index + 1) * shards_per_task)


def task_instance_of(task: int, shards_per_task: int) -> tuple[int, int]:
    """``(map_index, shard_index)`` of protocol task *task*."""
    return divmod(task, shards_per_task)


class ShardsFailed(RuntimeError):
    """Some shards of a task instance failed; the others committed (a retry runs only the failed ones).

    Raised from the first failed shard's own exception (``__cause__``); a deterministic error of any shard (a bad
    specification) is raised itself instead, so that it fails the task without retries."""

    def __init__(self, failed: dict[int, BaseException], outcomes: Sequence[TaskOutcome]) -> None:
        self.failed = failed
        self.outcomes = list(outcomes)
        first = min(failed)
        super().__init__(f"{len(failed)} of {len(failed) + len(outcomes)} shards failed (tasks "
                         f"{', '.join(map(str, sorted(failed)))}); the other {len(outcomes)} are committed and a retry "
                         f"does not run them again. First, task {first}: {type(failed[first]).__name__}: {failed[first]}")


@dataclass
class ShardsOutcome:
    """What one try of a task instance did, shard by shard (in task order)."""

    map_index: int
    shards_per_task: int
    attempt: int
    outcomes: list[TaskOutcome]

    def to_dict(self) -> dict[str, Any]:
        """The write task's XCom value: the totals of its shards and each shard's outcome."""
        shards = [{**o.to_dict(), "shard_index": o.task - self.map_index * self.shards_per_task}
                  for o in self.outcomes]
        ran = [s["shard_index"] for s in shards if s["ran_callable"]]
        return {"map_index": self.map_index, "shards_per_task": self.shards_per_task, "attempt": self.attempt,
                "tasks": [s["task"] for s in shards], "ran_shards": ran,
                "statuses": {st: sum(s["status"] == st for s in shards) for st in sorted({s["status"]
                                                                                          for s in shards})},
                "files": sum(s["files"] for s in shards), "rows": sum(s["rows"] for s in shards),
                "bytes": sum(s["bytes"] for s in shards), "shards": shards}


ShardProduce = Callable[[int, int, TaskAttemptWriter], Any]


def run_shards(committer: Callable[[], FileOutputCommitter], map_index: int, shards_per_task: int, attempt: int,
               produce: ShardProduce, *, threads: int | None = None, compression: str = "snappy",
               max_rows_per_file: int | None = None,
               fatal: tuple[type[BaseException], ...] = (), inputs: str | None = None) -> ShardsOutcome:
    """Run attempt *attempt* of every shard of task instance *map_index*, at most *threads* at once (default
    ``min(shards_per_task, DEFAULT_SHARD_THREADS)``; 1 runs them in order in this thread).

    *committer* makes one committer per shard (they share the store; a committer is not shared between threads).
    *produce(shard_index, task, writer)* writes one shard; it is called only for shards not committed yet. Every
    shard runs even when another fails, so that a retry has only the failed ones left; then the first failure is
    raised: a *fatal* one (no retry can cure it: the operator passes its deterministic errors) itself, any other as
    :class:`ShardsFailed` from the first. *inputs*: the digest of what the task instance was given, which is what
    each of its shards was given (:func:`~..protocol.run_task_attempt`): when it changed, every shard runs again.
    """
    tasks = shard_tasks(map_index, shards_per_task)
    workers = min(shards_per_task, threads or DEFAULT_SHARD_THREADS)

    def one(task: int) -> TaskOutcome:
        shard = task - tasks.start
        return run_task_attempt(committer(), task, attempt, lambda writer: produce(shard, task, writer),
                                compression=compression, max_rows_per_file=max_rows_per_file, inputs=inputs)

    results: dict[int, TaskOutcome] = {}
    failed: dict[int, BaseException] = {}

    def settle(task: int, call: Callable[[], TaskOutcome]) -> None:
        try:
            results[task] = call()
        except Exception as exc:   # the shard's attempt is aborted already (run_task_attempt); the others go on
            log.error("shard %s (task %s) attempt %s failed: %s: %s", task - tasks.start, task, attempt,
                      type(exc).__name__, exc)
            failed[task] = exc

    if workers == 1:
        for task in tasks:
            settle(task, lambda task=task: one(task))
    else:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"shard-{map_index}")
        try:
            futures = {task: pool.submit(one, task) for task in tasks}
            for task, future in futures.items():
                settle(task, future.result)
        except BaseException:   # Airflow's timeout, a signal: the shards not started yet are not started
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    outcomes = [results[t] for t in tasks if t in results]
    if failed:
        # no retry cures a fatal error of one shard, whatever the others' errors are
        first = next((failed[t] for t in sorted(failed) if isinstance(failed[t], fatal)), failed[min(failed)])
        if isinstance(first, fatal):
            raise first
        raise ShardsFailed(failed, outcomes) from first
    return ShardsOutcome(map_index, shards_per_task, attempt, outcomes)
