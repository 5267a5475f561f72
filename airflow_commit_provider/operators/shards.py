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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from ..protocol import FileOutputCommitter, InvalidOutputSpec, TaskAttemptWriter, TaskOutcome, run_task_attempt
from ..protocol.tasks.writer import AttemptAbandoned

log = logging.getLogger(__name__)

#: The keyword arguments a sharded write's callable may name to learn which shard it writes.
SHARD_KWARGS = ("shard_index", "shards_per_task", "task_number")
#: Shards run at once in one task instance unless ``shard_threads`` says otherwise.
DEFAULT_SHARD_THREADS = 4
#: how long an interrupted try waits for its running shards to stop (they stop at their next write) before it
#: raises anyway: Airflow's timeout must end a try whose shard is stuck in its own code; what such a straggler
#: writes afterwards may outlive the try (files under its attempt, for ``airflow-commit gc``; on S3 an upload)
INTERRUPT_GRACE = 30.0
#: How a task instance's shards commit (``shard_commit``): ``"each"`` (the default), each shard a protocol task of
#: its own, committed and recovered alone; ``"together"``, the task instance one protocol task whose shards write
#: side by side and commit in one record (:func:`run_shards_together`).
SHARD_COMMITS = ("each", "together")


def check_shard_commit(shard_commit: Any) -> str:
    """*shard_commit*, validated; raises :class:`InvalidOutputSpec` saying what it may be."""
    if shard_commit not in SHARD_COMMITS:
        raise InvalidOutputSpec(f"shard_commit={shard_commit!r}: give 'each' (every shard committed and recovered "
                                "alone: a retry runs only the shards that did not commit) or 'together' (a task "
                                "instance's shards committed in one record: fewer requests per file, a retry runs "
                                "every shard again)")
    return shard_commit


def tasks_per_instance(shards_per_task: int, shard_commit: str) -> int:
    """Protocol tasks per write task instance: its shards, or one when they commit together."""
    return shards_per_task if shard_commit == "each" else 1


def shard_labels(shards_per_task: int, shard_commit: str) -> dict[str, int]:
    """What the job record's labels say of the stage's shards (nothing for an unsharded stage, the shape every
    earlier release wrote): ``shards_per_task`` numbers the protocol tasks (shards committed each alone), and
    ``shards_in_task`` says how many shards one protocol task's files come from (committed together)."""
    if shards_per_task == 1:
        return {}
    return {"shards_per_task" if shard_commit == "each" else "shards_in_task": shards_per_task}


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


def check_job_shards(labels: Mapping[str, Any], shards_per_task: int, shard_commit: str, job_id: str,
                     owner: str, purge: str | None = None, committed: bool = False) -> None:
    """Refuse a write whose ``shards_per_task`` or ``shard_commit`` differs from what the job was set up with (its
    record's *labels*, :func:`shard_labels`; nothing, as every unsharded and earlier job): tasks are numbered by
    them, so a retry or a re-run after the DAG changed them would find other task instances' shards committed under
    its task numbers and "recover" them, and the job commit would then count the wrong tasks: rows silently lost
    or taken twice. A task instance whose shards commit together, recovered after its number of shards changed,
    would pass for one that wrote every shard. *purge*: the command that purges the job, which the advice names
    for a job whose ``job_key`` makes every run of it this job (a new run is no way out there). *committed*: the
    *labels* are the committed generation's, and the try comes after its commit (nothing to purge: a new run
    commits under the new values, a new generation of a keyed job)."""
    recorded = {k: labels[k] for k in ("shards_per_task", "shards_in_task") if k in labels}
    if recorded == shard_labels(shards_per_task, shard_commit):
        return
    was = recorded.get("shards_per_task") or recorded.get("shards_in_task") or 1
    how = "together" if "shards_in_task" in recorded else "each"
    if committed:
        way_out = ("this try comes after the job committed with them: restore them for its late tries, or run "
                   "the DAG again (a new run commits under the new values)")
    elif "job_key" in labels:
        way_out = (f"restore them, or start another job: another job_key (job_key {labels['job_key']!r} makes every "
                   f"run of it this job), or purge this job, after which its next run computes every task under "
                   f"the new values: {purge or 'airflow-commit abort <target> --job ' + job_id + ' --purge'}")
    else:
        way_out = "restore them, or start another job (a new run, or another job_key)"
    raise InvalidOutputSpec(
        f"{owner}: job {job_id} was set up with shards_per_task={was}"
        f"{f', shard_commit={how!r}' if was != 1 else ''}, this stage has shards_per_task={shards_per_task}"
        f"{f', shard_commit={shard_commit!r}' if shards_per_task != 1 else ''}. Its protocol tasks are "
        "numbered by them (map index x shards_per_task + shard, or the map index when shards commit together), "
        f"so they cannot change within a job: {way_out}")


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

    def one(task: int) -> TaskOutcome:
        shard = task - tasks.start
        return run_task_attempt(committer(), task, attempt, lambda writer: produce(shard, task, writer),
                                compression=compression, max_rows_per_file=max_rows_per_file, inputs=inputs)

    results, failed = _in_pool(tasks, one, threads, f"task instance {map_index}", "task", attempt,
                               stop_on_failure=False)
    outcomes = [results[t] for t in tasks if t in results]
    if failed:
        # no retry cures a fatal error of one shard, whatever the others' errors are
        first = next((failed[t] for t in sorted(failed) if isinstance(failed[t], fatal)), failed[min(failed)])
        if isinstance(first, fatal):
            raise first
        raise ShardsFailed(failed, outcomes) from first
    return ShardsOutcome(map_index, shards_per_task, attempt, outcomes)


def run_shards_together(committer: FileOutputCommitter, map_index: int, shards_per_task: int, attempt: int,
                        produce: ShardProduce, *, threads: int | None = None, compression: str = "snappy",
                        max_rows_per_file: int | None = None, fatal: tuple[type[BaseException], ...] = (),
                        inputs: str | None = None, interrupt_grace: float = INTERRUPT_GRACE) -> TaskOutcome:
    """Attempt *attempt* of task instance *map_index* as **one** protocol task (task number *map_index*) whose
    files its *shards_per_task* shards write side by side (``shard_commit="together"``), at most *threads* at once.

    Each shard writes through a part of the attempt's writer (:meth:`~..protocol.TaskAttemptWriter.part`: names
    ``part-<map index>-<uuid>-s<shard>-c<n>``); once every shard has closed its part the attempt commits them in
    one task commit: one record, one claim, one recovery for the task instance. That is what makes the requests
    per file approach the data's own (the per-task reads, claim, record and job commit read are paid once per task
    instance, not once per shard); the price is that a try that fails in one shard writes every shard again.

    The first failure stops the shards not started yet and abandons the writer, so the running ones stop at their
    next write; once they have ended, the attempt is aborted and a *fatal* failure (no retry cures it) is raised if
    any shard had one, else the first. An interruption (Airflow's timeout, a signal) abandons the writer too and is
    raised once the running shards have stopped, after the abort, so that nothing a shard writes outlives it; a
    shard that does not stop within *interrupt_grace* seconds (stuck in its own code) is left behind, so that the
    timeout still ends the try.
    *produce(shard_index, task_number, writer)* as for :func:`run_shards`: *task_number* (``map_index * N +
    shard``) still tells the shards of the whole stage apart, although only *map_index* is a protocol task.
    """
    shards = range(shards_per_task)

    def write(writer: TaskAttemptWriter) -> None:
        parts = [writer.part(shard) for shard in shards]

        def one(shard: int) -> None:
            with parts[shard]:
                produce(shard, map_index * shards_per_task + shard, parts[shard])

        _results, failed = _in_pool(shards, one, threads, f"task instance {map_index}", "shard", attempt,
                                    stop_on_failure=True, on_interrupt=writer.abandon, grace=interrupt_grace)
        if failed:   # the shards a failure abandoned say so; the failure itself is what the try fails with
            failed = {s: e for s, e in failed.items() if not isinstance(e, AttemptAbandoned)} or failed
            raise next((failed[s] for s in sorted(failed) if isinstance(failed[s], fatal)), failed[min(failed)])
        writer.adopt(parts)

    return run_task_attempt(committer, map_index, attempt, write, compression=compression,
                            max_rows_per_file=max_rows_per_file, inputs=inputs)


def _wait_running(futures: set[Future[Any]], grace: float) -> None:
    """Wait up to *grace* seconds for the running *futures*, through any further interruption (a second Ctrl-C):
    the first one is what the caller raises, once they stopped or the grace ran out."""
    deadline = time.monotonic() + grace
    running = {f for f in futures if not f.cancelled()}
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("%s shard(s) still running %.0f s after the interruption are left behind", len(running),
                        grace)
            return
        try:
            _done, running = wait(running, timeout=left)
        except BaseException:   # noqa: BLE001 - the first interruption is raised once the shards stopped
            continue


#: what an item the pool did not start (a failure came first) returns
_NOT_STARTED = object()


def _in_pool(items: range, call: Callable[[int], Any], threads: int | None, name: str, item_name: str,
             attempt: int, *, stop_on_failure: bool, on_interrupt: Callable[[], None] | None = None,
             grace: float = INTERRUPT_GRACE) -> tuple[dict[int, Any], dict[int, BaseException]]:
    """``call(item)`` for every item, at most *threads* at once (``min(len(items), DEFAULT_SHARD_THREADS)`` by
    default; 1: in order in this thread): the results and the exceptions, by item. *stop_on_failure*: once one
    failed (whichever finishes first), the items not started yet are not started. An interruption (Airflow's
    timeout, a signal, or a shard's own ``SystemExit``) cancels the items not started and propagates; with
    *on_interrupt* (also called on the first failure when *stop_on_failure*), that is called first and the running
    items are waited for, up to *grace* seconds, whatever further interruption comes meanwhile; without it they
    are left to finish in their threads."""
    workers = min(len(items), threads or DEFAULT_SHARD_THREADS)
    results: dict[int, Any] = {}
    failed: dict[int, BaseException] = {}
    stop = threading.Event()   # set by the first failure, in its own thread: no item starts after it

    def guarded(item: int) -> Any:
        if stop.is_set():
            return _NOT_STARTED
        try:
            return call(item)
        except Exception:
            if stop_on_failure:
                stop.set()
            raise

    def settle(item: int, result: Callable[[], Any]) -> None:
        try:
            value = result()
        except Exception as exc:   # a shard's attempt is aborted already (run_task_attempt); the others go on
            log.error("%s: %s %s attempt %s failed: %s: %s", name, item_name, item, attempt, type(exc).__name__,
                      exc)
            failed[item] = exc
            return
        if value is not _NOT_STARTED:
            results[item] = value

    if workers == 1:
        for item in items:
            settle(item, lambda item=item: guarded(item))
        return results, failed
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name.replace(" ", "-"))
    futures: dict[Future[Any], int] = {}
    pending: set[Future[Any]] = set()
    try:   # an interruption may come while the items are submitted, from one that started already
        for item in items:
            future = pool.submit(guarded, item)
            futures[future] = item
            pending.add(future)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in sorted(done, key=futures.__getitem__):
                if not future.cancelled():
                    settle(futures[future], future.result)
            if failed and stop_on_failure:
                pending = {f for f in pending if not f.cancel()}   # the running ones are waited for
                if on_interrupt is not None:
                    on_interrupt()
    except BaseException:
        for future in pending:
            future.cancel()
        if on_interrupt is not None:
            on_interrupt()
            _wait_running(pending, grace)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results, failed
