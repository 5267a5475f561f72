"""A job run as Airflow runs it, through a network that fails (the fault proxy of ``tests/s3/faultproxy.py``): the
harness the network-fault matrices share (``tests/s3/test_net_faults.py`` on S3, ``tests/clouds/
test_clouds_net_faults.py`` on Google Cloud Storage and Azure)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_commit_provider.protocol import run_task_attempt

from .protocol import scenario as sc

#: tries of one step (Airflow's retries); a step still failing after them is a test failure
TRIES = 3


class Steps:
    """A job's steps as Airflow runs them, each tried again (up to :data:`TRIES`) when it fails: a setup retry, a
    task's next try, a commit or abort retry. Every failure is recorded, and must be one of *errors* (the
    client's or the protocol's) with a message. *committer* makes the committer each step uses (a fresh one,
    as each Airflow task builds its own)."""

    def __init__(self, committer: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> None:
        self.committer, self.errors = committer, errors
        self.failures: list[str] = []
        self.next_attempt = {t: 1 for t in range(sc.TASKS)}

    def _try(self, name: str, step: Callable[[], Any]) -> Any:
        for _ in range(TRIES):
            try:
                return step()
            except self.errors as exc:
                assert str(exc).strip(), f"{name} failed with an empty {type(exc).__name__}"
                self.failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
        pytest.fail(f"{name} still failed after {TRIES} tries: {self.failures}")

    def setup(self) -> None:
        self._try("setup", lambda: self.committer().setup_job())

    def task(self, t: int, fail: bool = False) -> None:
        def attempt() -> Any:
            a = self.next_attempt[t]
            self.next_attempt[t] += 1

            def produce(w: Any) -> None:
                w.write(sc.task_table(t, a))
                if fail:
                    raise RuntimeError(f"user code of task {t} failed")

            return run_task_attempt(self.committer(), t, a, produce)

        if fail:
            with pytest.raises(RuntimeError, match="user code"):
                attempt()
            return
        self._try(f"task {t}", attempt)

    def commit(self) -> dict[str, Any]:
        return self._try("commit", lambda: self.committer().commit_job(sc.TASKS))

    def abort(self) -> dict[str, Any]:
        return self._try("abort", lambda: self.committer().abort_job())

    def failed_run_aborted(self, url: str) -> None:
        """A run whose task 2 fails after tasks 0 and 1 committed, and its teardown: the target at *url* holds
        exactly the old data again (the caller checks what the store must not keep)."""
        self.task(0)
        self.task(1)
        self.task(2, fail=True)
        self.abort()
        assert sorted((r["task"], r["row"]) for r in sc.read_rows(url)) == \
            sorted((sc.OLD_TASK, r) for rows in sc.OLD_FILES.values() for r in rows), "abort: the target as before"
