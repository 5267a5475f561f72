"""Job commit pauses Python's cyclic garbage collector while it runs (:func:`~airflow_commit_provider.protocol.
jobcommit.cyclic_gc_paused`) and leaves it as it found it: on, after a commit that succeeds or fails; off, when the
caller had turned it off."""

from __future__ import annotations

import gc

import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, JobIncomplete, run_task_attempt
from airflow_commit_provider.protocol.faults import InjectedFault, arm, disarm


def job(tmp_path, tasks: int) -> FileOutputCommitter:
    c = FileOutputCommitter(str(tmp_path / "out"), "gc", algorithm=1, mode="append")
    c.setup_job()
    for task in range(tasks):
        run_task_attempt(c, task, 1, lambda w: w.open_file(extension="bin").close())
    return c


def collections_during(fn) -> list[int]:
    """The generations of the automatic collections that ran during ``fn()``."""
    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()   # the allocation count starts from zero: none of the set-up's allocations count here
    gc.callbacks.append(note)
    try:
        fn()
    finally:
        gc.callbacks.remove(note)
    return seen


def test_no_collection_runs_during_the_commit_and_the_collector_is_on_after_it(tmp_path):
    """Thousands of allocations, which with the collector on start a collection every 700: at most one runs,
    the one the first allocation after the collector is back on starts."""
    c = job(tmp_path, 200)
    assert len(collections_during(lambda: c.commit_job(200))) <= 1
    assert gc.isenabled()


def test_a_failed_commit_turns_it_back_on(tmp_path):
    c = job(tmp_path, 1)
    with pytest.raises(JobIncomplete):
        c.commit_job(2)
    assert gc.isenabled()
    arm("commit_job.after_moves")
    try:
        with pytest.raises(InjectedFault):
            c.commit_job(1)
    finally:
        disarm()
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(tmp_path):
    c = job(tmp_path, 1)
    gc.disable()
    try:
        c.commit_job(1)
        assert not gc.isenabled()
    finally:
        gc.enable()
