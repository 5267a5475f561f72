"""What a task attempt costs on a local disk does not grow with the job (issue 22 item 1).

A new try fences the earlier tries of its task (records them failed, removes their files). On a local disk it finds
them by looking up each lower try number, not by listing the application attempt's ``_attempts/`` directory, which
holds every task's traces: at 10,000 tasks that listing made each set-up twice as slow. The store here is a real
local store that also notes which directories it lists.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import CommitDenied, TaskAttemptWriter, make_committer, run_task_attempt
from airflow_commit_provider.protocol.stores import LocalStore

TABLE = pa.table({"x": [1, 2, 3]})


class ListingStore(LocalStore):
    """A local store that records every directory it lists."""

    def __init__(self, root: str) -> None:
        super().__init__(root, durable=False)
        self.listed: list[str] = []

    def list_dir(self, rel: str) -> list[str]:
        self.listed.append(rel)
        return super().list_dir(rel)


def test_setup_lists_no_directory_of_every_tasks_traces(tmp_path):
    store = ListingStore(str(tmp_path / "out"))
    c = make_committer(store, "job", mode="append")
    c.setup_job()
    for t in range(20):
        assert run_task_attempt(c, t, 1, lambda w: w.write(TABLE)).status == "committed"
    store.listed.clear()
    c.setup_task(20, 1)
    c.setup_task(21, 3)   # a third try: tries 1 and 2 are looked up by name
    assert not [d for d in store.listed if d.endswith("/_attempts")], store.listed


def test_a_retry_still_fences_the_try_it_replaces(tmp_path):
    """The look-up by try number finds what the listing found: the earlier, unfinished try of the same task is
    recorded failed (its commit is refused later) and its files are removed; a committed try is left alone."""
    store = ListingStore(str(tmp_path / "out"))
    c = make_committer(store, "job", mode="append")
    c.setup_job()
    zombie = c.setup_task(0, 1)
    c.setup_task(0, 2)
    assert c.job.ledger.fate(zombie.app_attempt, 0, 1) == "failed"
    with TaskAttemptWriter(c, zombie) as w:   # the zombie wakes and writes on
        w.write(TABLE)
    with pytest.raises(CommitDenied, match="recorded as failed"):
        c.commit_task(zombie, w.rows, sizes=w.sizes)
    assert not [d for d in store.listed if d.endswith("/_attempts")], store.listed
