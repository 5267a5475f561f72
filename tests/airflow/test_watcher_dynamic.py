"""The asset watcher (``CommittedOutputTrigger``) over ``dynamic`` jobs, driven as the triggerer drives it (see
``test_committed_output_trigger.py``), over real commits on a local disk.

- A watcher of one partition (``p=x``) fires for every commit that wrote files there, whatever its mode: an
  ``append`` into the partition withdraws the partition's ``_SUCCESS`` and writes none back (a partition marker
  is a dynamic commit's), yet its rows changed, so it fires, from the commit log; the next dynamic commit writes
  the marker again and fires with it. Commits that wrote only other partitions fire nothing.
- A watcher of the root fires once per dynamic commit, whatever partitions it replaced, also for commits made
  between two polls and for a new generation of a job: none lost, none doubled.
"""

from __future__ import annotations

import os

import pytest

from airflow_commit_provider.protocol import read_success_marker
from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger

from ..protocol import scenario as sc
from .test_committed_output_trigger import fired_between_polls, watch, write_job  # noqa: F401 (the fixture)

pytestmark = pytest.mark.airflow


def day_rows(root: str, day: str) -> list[tuple[int, int]]:
    """The (task, row) pairs a reader of the partition reads."""
    return sorted((r["task"], r["row"]) for r in sc.read_rows(os.path.join(root, f"day={day}")))


def test_a_partition_watcher_fires_for_an_append_into_it_and_again_for_the_next_dynamic_commit(tmp_path,
                                                                                           watch):  # noqa: F811
    root = str(tmp_path / "events")
    marker = os.path.join(root, "day=1", "_SUCCESS")
    w = watch(CommittedOutputTrigger(target=f"{root}/day=1", poke_interval=0))
    assert w.pending() == []

    write_job(root, "dyn-1", mode="dynamic", days=("1", "2"))
    first = w.next()
    assert (first["job_id"], first["partition"], first["totals"]["rows"]) == ("dyn-1", "day=1", 6)
    assert first["commit_id"] == read_success_marker(marker.removesuffix("/_SUCCESS"))["job_uuid"]

    write_job(root, "append-1", mode="append", days=("1",))
    assert not os.path.exists(marker), "an append withdraws the partition's marker and writes none back"
    second = w.next()
    assert (second["job_id"], second["partition"], second["totals"]["rows"]) == ("append-1", "day=1", 6)
    assert all(f["path"].startswith("day=1/") for f in second["files"]) and len(second["files"]) == 2
    assert second["retained_files"] is None, "no marker to count the other files by: the commit log's manifest"
    assert len(day_rows(root, "1")) == 12, "the append added its rows to the partition"
    assert w.pending() == [], "one event for the append"

    write_job(root, "dyn-other-day", mode="dynamic", days=("2",))
    assert w.pending() == [], "a commit that wrote only another partition does not fire"

    write_job(root, "dyn-2", mode="dynamic", days=("1",))
    third = w.next()
    assert (third["job_id"], third["partition"], third["retained_files"]) == ("dyn-2", "day=1", 0)
    assert third["commit_id"] == read_success_marker(marker.removesuffix("/_SUCCESS"))["job_uuid"]
    assert day_rows(root, "1") == [(t, r) for t in (0, 1) for r in range(3)], "dynamic replaced the partition"
    assert len({first["commit_id"], second["commit_id"], third["commit_id"]}) == 3
    assert w.pending() == []


def test_a_root_watcher_fires_once_per_dynamic_commit(tmp_path, watch):  # noqa: F811
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0))
    fired = fired_between_polls(w, root, ("dyn-a",), ("dyn-b", "dyn-c"), mode="dynamic", days=("1", "2"))
    write_job(root, "dyn-d", mode="dynamic", days=("3",))
    write_job(root, "dyn-a", mode="dynamic", days=("1",))   # a new generation of job a (a clear after success)
    fired += [w.next(), w.next()]
    assert w.pending() == [], "none doubled"
    assert [e["job_id"] for e in fired] == ["dyn-a", "dyn-b", "dyn-c", "dyn-d", "dyn-a"], "none lost, in order"
    assert len({e["commit_id"] for e in fired}) == 5
    assert [e["generation"] for e in fired] == [0, 0, 0, 0, 1]
    assert fired[-1]["commit_id"] == read_success_marker(root)["job_uuid"]
    assert fired[-1]["replaced_generation"] == fired[0]["commit_id"]
