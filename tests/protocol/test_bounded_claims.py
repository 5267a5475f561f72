"""Every loop over "taken" is bounded: a claim that keeps being taken by others ends in a clear refusal, raised
before anything visible changes, and the advice it gives works.

The rivals are real writers on the local disk: a store whose every exclusive creation of the contested record
meets the rival's record, created at that very moment (another setup of the same job claiming the same application
attempt; another job claiming the target in mode ``error`` and aborting again).
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_commit_provider.protocol import CommitProtocolError, make_committer, run_task_attempt
from airflow_commit_provider.protocol.jobsetup import APP_CLAIM_TRIES
from airflow_commit_provider.protocol.layout import JobLayout
from airflow_commit_provider.protocol.stores.local import LocalStore
from airflow_commit_provider.protocol.targetclaim import CLAIM_TRIES

from . import scenario as sc

ERROR_CLAIM = JobLayout("any").error_claim


class RivalStore(LocalStore):
    """A local store on which a rival creates the contested record just before each of this writer's creations,
    *rivals* times: an application attempt marker (a concurrent setup of the job), or the ``error`` mode claim
    (another job, which aborts again and so frees it before it can be read)."""

    def __init__(self, root: str, rivals: int) -> None:
        super().__init__(root)
        self.rivals = rivals

    def _create_new(self, rel: str, data: bytes, like: str | None) -> None:
        contested = rel.endswith("/_app.json") or rel == ERROR_CLAIM
        if contested and self.rivals > 0:
            self.rivals -= 1
            rival = {**json.loads(data), "nonce": f"rival-{self.rivals}", "job_id": "rival"}
            super()._create_new(rel, json.dumps(rival).encode(), None)
            try:
                super()._create_new(rel, data, like)
            finally:
                if rel == ERROR_CLAIM:
                    os.unlink(self._p(rel))   # the rival job aborted: its claim is freed
        super()._create_new(rel, data, like)


def run_job(store: LocalStore, mode: str = "append") -> dict:
    c = make_committer(store, sc.JOB, algorithm=1, mode=mode, partition_by=["day"])
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    return make_committer(store, sc.JOB, algorithm=1, mode=mode, partition_by=["day"]).commit_job(sc.TASKS)


def test_setup_takes_the_next_attempt_when_others_take_some(tmp_path):
    store = RivalStore(str(tmp_path / "out"), APP_CLAIM_TRIES - 1)
    ctx = make_committer(store, sc.JOB, algorithm=1, mode="append", partition_by=["day"]).setup_job()
    assert ctx.app_attempt == APP_CLAIM_TRIES - 1


def test_setup_refuses_when_every_attempt_it_tries_is_taken_and_a_retry_sets_up(tmp_path):
    root = str(tmp_path / "out")
    sc.write_old_data(root)
    before = sc.visible_files(root)
    store = RivalStore(root, APP_CLAIM_TRIES)
    with pytest.raises(CommitProtocolError, match="other setups of this job are running at the same moment.*"
                                                  "retry this setup once the other runs' setups are done"):
        make_committer(store, sc.JOB, algorithm=1, mode="append", partition_by=["day"]).setup_job()
    assert sc.visible_files(root) == before, "nothing visible changed"
    # the advice: the other setups are done; this setup, retried, takes the next attempt and the job commits
    run_job(store)
    sc.assert_exactly_once(sc.read_rows(root), old=sc.old_rows_expected("append"))


def test_the_error_mode_claim_refuses_when_it_keeps_being_taken_and_freed_and_a_retry_commits(tmp_path):
    root = str(tmp_path / "out")
    store = RivalStore(root, 0)
    c = make_committer(store, sc.JOB, algorithm=1, mode="error", partition_by=["day"])
    c.setup_job()
    for t in range(sc.TASKS):
        run_task_attempt(c, t, 1, lambda w, t=t: w.write(sc.task_table(t, 1)))
    store.rivals = CLAIM_TRIES
    with pytest.raises(CommitProtocolError, match=f"taken and freed again {CLAIM_TRIES} times.*nothing visible "
                                                  "changed: retry the commit"):
        make_committer(store, sc.JOB, algorithm=1, mode="error", partition_by=["day"]).commit_job(sc.TASKS)
    assert sc.visible_files(root) == []
    make_committer(store, sc.JOB, algorithm=1, mode="error", partition_by=["day"]).commit_job(sc.TASKS)
    sc.assert_exactly_once(sc.read_rows(root))
