"""Compaction and deduplication on fsspec's ``memory://`` (the in-process store: the protocol level only, since a
stage under Airflow refuses it): the composition table's S x X ``memory`` cells. Two append jobs' output is
deduplicated (nothing to delete: no file is a copy of another) and compacted into one file; every row stays once,
the marker verifies against the listing, and a second compaction of the compacted output changes nothing."""

from __future__ import annotations

import uuid
from collections import Counter

from airflow_commit_provider.protocol import FileOutputCommitter, read_success_marker
from airflow_commit_provider.protocol.maintenance.compaction import compact
from airflow_commit_provider.protocol.maintenance.dedup import remove_duplicates
from airflow_commit_provider.protocol.stores import store_for

from . import scenario as sc
from ..airflow.test_committed_output_trigger import write_job


def test_deduplication_then_compaction_on_memory_keep_every_row_once():
    root = f"memory:///maintenance-{uuid.uuid4().hex[:8]}/events"
    write_job(root, "job-a")
    write_job(root, "job-b")
    expected = Counter((r["task"], r["row"]) for r in sc.read_rows(root))
    assert sum(expected.values()) == 12 and len(sc.visible_files(root)) == 4

    assert remove_duplicates(store_for(root))["delete"] == [], "two jobs' files are not copies of each other"
    result = compact(FileOutputCommitter(root, "compact-1", mode="append"), 1, target_size=2**20)
    assert result["state"] == "committed", result
    assert len(sc.visible_files(root)) == 1
    assert Counter((r["task"], r["row"]) for r in sc.read_rows(root)) == expected
    assert read_success_marker(root, verify_files=True)["maintenance"] == "compaction"

    again = compact(FileOutputCommitter(root, "compact-2", mode="append"), 1, target_size=2**20)
    assert again["state"] == "nothing_to_compact", again
    assert len(sc.visible_files(root)) == 1
    assert Counter((r["task"], r["row"]) for r in sc.read_rows(root)) == expected
