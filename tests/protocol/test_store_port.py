"""The store port: a store that implements only the primitives runs every job the protocol has.

:class:`~airflow_commit_provider.protocol.stores.base.Store` keeps its abstract primitives and, built on them, the
operations a store may do faster; what no store tunes is in :mod:`~airflow_commit_provider.protocol.stores.helpers`.
This store forwards the primitives, and nothing else, to a local disk: whatever the protocol needs beyond them must
come from the defaults, and a job through it must end as it ends on the local store itself.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import (
    JobIncomplete,
    LocalStore,
    make_committer,
    read_success_marker,
    run_task_attempt,
)
from airflow_commit_provider.protocol.stores.base import Store

#: The port's primitives: what a store author writes. Adding one is a decision (every store, and every user's
#: store, must then implement it), so the list is pinned here.
PRIMITIVES = {"url", "exists", "isdir", "read_bytes", "write_bytes", "makedirs", "list_files", "list_dir",
              "move_file", "delete_file", "delete_tree", "remove_dir_if_empty", "open_write"}


def primitives_only(root: str) -> Store:
    """A store class made of :data:`PRIMITIVES` and ``_create_new`` forwarded to a local disk, counting calls."""
    calls: Counter[str] = Counter()

    def forward(name: str):
        def method(self, *args, **kwargs):
            calls[name] += 1
            return getattr(self.disk, name)(*args, **kwargs)
        method.__name__ = name
        return method

    body = {name: forward(name) for name in PRIMITIVES | {"_create_new"}}
    body["has_directories"] = True  # its directories are the disk's: they exist on their own
    cls = type("PrimitivesOnly", (Store,), body)
    store = cls()
    store.disk = LocalStore(root, durable=False)
    store.calls = calls
    return store


def test_the_primitives_are_the_abstract_methods():
    assert Store.__abstractmethods__ == PRIMITIVES


def _rows(root) -> list[int]:
    files = sorted(p for p in root.rglob("*.parquet") if not any(part.startswith(("_", ".")) for part in
                                                                   p.relative_to(root).parts))
    return sorted(v for f in files for v in pq.read_table(f).column("v").to_pylist())


def _task(committer, task: int, attempt: int, values: list[int]) -> None:
    run_task_attempt(committer, task, attempt, lambda w: w.write(pa.table({"v": values})))


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_store_of_primitives_only_recovers_commits_overwrites_and_aborts(tmp_path, algorithm):
    out = tmp_path / "out"
    store = primitives_only(str(out))

    # application attempt 1: task 0 commits, task 1 fails; the job commit refuses an incomplete job
    first = make_committer(store, "j1", mode="append", algorithm=algorithm)
    first.setup_job()
    _task(first, 0, 1, [0, 1])
    with pytest.raises(ZeroDivisionError):
        run_task_attempt(first, 1, 1, lambda w: (w.write(pa.table({"v": [99]})), 1 / 0))
    with pytest.raises(JobIncomplete):
        first.commit_job(2)

    # application attempt 2: task 0 is recovered, not rerun; task 1 commits; the job commits once
    second = make_committer(store, "j1", mode="append", algorithm=algorithm)
    second.setup_job()
    assert second.recover_task(0) is not None
    _task(second, 1, 2, [2])
    manifest = second.commit_job(2)
    assert manifest["totals"]["files"] == 2
    assert _rows(out) == [0, 1, 2]
    assert read_success_marker(str(out), verify_files=True)["job_uuid"] == manifest["job_uuid"]

    # an overwrite replaces the whole output
    over = make_committer(store, "j2", mode="overwrite", algorithm=algorithm)
    over.setup_job()
    _task(over, 0, 1, [10])
    over.commit_job(1)
    assert _rows(out) == [10]

    # an aborted job leaves the output as it was, its committed task too
    aborted = make_committer(store, "j3", mode="append", algorithm=algorithm)
    aborted.setup_job()
    _task(aborted, 0, 1, [20])
    aborted.abort_job()
    assert _rows(out) == [10]
    assert len(list(out.rglob("*.parquet"))) == 1, "the aborted job's work is gone too"

    # only primitives were asked for, and the defaults built on them did the rest
    assert set(store.calls) <= PRIMITIVES | {"_create_new"}
    assert {"_create_new", "list_files", "list_dir", "move_file", "delete_file"} <= set(store.calls)
