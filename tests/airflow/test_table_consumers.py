"""``SuccessMarkerSensor`` (poke and deferrable) on a Delta or Iceberg table's data root (Delta: its location;
Iceberg: ``<location>/data``), where the job commit leaves its ``_SUCCESS``.

A table keeps the files an overwrite removed from its current version (older versions, time travel, still list
them), so the directory holds more Parquet files than a reader of the table reads. The marker of a table commit
therefore lists, besides the job's files, as ``retained`` the other files *the table version it produced*
references, not every file under the data root; and *verify_files* checks what that means for a table: every file
the marker lists is there with its size (files no version of the marker references do not make it wrong). A job
commit resumed after its transaction landed (``already_committed``) satisfies the sensor once, with one
transaction in the table, and fires the asset watcher once; also when the table's maintenance made the history
forget that transaction before the resume (it added every row a second time then). A sensor waiting for a job
whose rows a later overwrite removed from the table fails with ``CommitFilesGone`` under *verify_files*, as for
a directory.
"""

from __future__ import annotations

import os

import pytest

from airflow_commit_provider.protocol import read_success_marker
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE
from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger

from ..protocol.tables_worker import committer_for, run_job
from ..protocol.test_tables import (delta_table, expected, iceberg_table, parquet_files, referenced_now, rows, run,
                                    table_id, transactions)
from .test_committed_output_trigger import watch  # noqa: F401 (the fixture)
from .test_sensor_history import deferred_result, poke

FORMATS = ["delta", "iceberg"]


@pytest.fixture(params=FORMATS)
def table(request, tmp_path) -> dict:
    """A job's configuration for a Delta table at a path, or an Iceberg table in a SQLite catalog."""
    fmt = request.param
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[fmt])
    where = {"location": str(tmp_path / "events")} if fmt == "delta" else \
        {"location": str(tmp_path / "warehouse"), "table_name": "ns.events"}
    return {"format": fmt, **where, "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 2,
            "rows": 4, "gen": 0}


def data_root(cfg: dict) -> str:
    return committer_for(cfg).store.url()


def listed(manifest: dict) -> set[str]:
    return {f["path"] for f in manifest["files"]} | {f["path"] for f in manifest.get("retained", [])}


def parquet_under(root: str) -> set[str]:
    base = root.removeprefix("file://")
    return {os.path.relpath(path, base) for path in parquet_files(base)}


@pytest.mark.parametrize("verify_files", [False, True])
def test_after_an_overwrite_the_sensor_gets_the_transaction_and_the_files_the_table_reads(table, verify_files):
    """Job 1 appends, job 2 overwrites: job 1's files stay under the data root (the table's first version lists
    them) but the current version does not; the marker, and so the sensor's manifest, lists exactly the files the
    current version references, and verify_files accepts it."""
    run_job(table)
    run_job({**table, "job_id": "events-2", "mode": "overwrite", "gen": 1})
    root = data_root(table)
    assert parquet_under(root) > referenced_now(table), "the overwritten files stay for the table's first version"
    for manifest in (poke(root, verify_files=verify_files), deferred_result(root, verify_files=verify_files)):
        assert manifest is not None and manifest["job_id"] == "events-2"
        assert table_id(manifest["table"]) == (1 if table["format"] == "delta" else
                                               iceberg_table(table).current_snapshot().snapshot_id)
        assert listed(manifest) == referenced_now(table), "the marker lists what the table's version reads"
        assert manifest["retained_files"] == 0 and manifest["totals"]["rows"] == 8


@pytest.mark.parametrize("verify_files", [False, True])
def test_after_two_appends_the_marker_retains_the_first_jobs_files(table, verify_files):
    run_job(table)
    run_job({**table, "job_id": "events-2", "gen": 1})
    manifest = poke(data_root(table), verify_files=verify_files)
    assert manifest["job_id"] == "events-2" and manifest["retained_files"] == 4
    assert listed(manifest) == referenced_now(table) == parquet_under(data_root(table))


def test_a_marker_whose_listed_file_is_gone_still_fails_verify_files(table):
    """verify_files still means something on a table: a file the version references that is gone (or changed) is
    a wrong marker, not one to trust."""
    from airflow_commit_provider.protocol import CorruptRecord

    run_job(table)
    root = data_root(table)
    victim = sorted(referenced_now(table))[0]
    os.remove(os.path.join(root.removeprefix("file://"), victim))
    assert poke(root)["job_id"] == "events-1", "without verify_files the marker is read as it is"
    with pytest.raises(CorruptRecord, match="no such file"):
        read_success_marker(root, verify_files=True)


def test_a_job_commit_resumed_after_its_transaction_landed_satisfies_once(table, watch):  # noqa: F811
    """Killed right after the table transaction (before the commit log and the marker): no sensor is satisfied,
    no event fires; the resumed commit finds its transaction (``already_committed``), adds none, writes the
    marker: the sensor gets that one transaction and the watcher fires once."""
    root = data_root(table)
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0))
    assert w.pending() == []
    killed = run({**table, "tasks": 3}, "table_commit.after=exit")
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    killed_uuid = committer_for(table).job_record().job_uuid
    assert transactions(table) == 1 and rows(table) == expected()
    assert poke(root) is None and poke(root, verify_files=True) is None, "no marker before the commit finished"
    assert w.pending() == []
    again = run({**table, "tasks": 3, "phase": "commit"})
    assert again.returncode == 0, again.stderr
    assert transactions(table) == 1, "the resumed commit made a second transaction"
    for manifest in (poke(root), poke(root, verify_files=True), deferred_result(root, verify_files=True)):
        assert manifest["job_id"] == "events-1" and manifest["table"]["already_committed"] is True
        assert table_id(manifest["table"]) == table_id(read_success_marker(root)["table"])
        assert listed(manifest) == referenced_now(table)
    event = w.next()
    assert event["job_id"] == "events-1" and event["table"]["already_committed"] is True
    assert event["commit_id"] == read_success_marker(root)["job_uuid"] == killed_uuid, \
        "the event carries the generation's commit id, the one the killed commit started"
    assert w.pending() == [], "one event for one transaction"
    assert run({**table, "tasks": 3, "phase": "commit"}).returncode == 0
    assert w.pending() == [] and transactions(table) == 1


@pytest.mark.parametrize("replaced", [False, True], ids=["appended-after", "overwritten-after"])
def test_a_sensor_for_a_job_whose_table_rows_a_later_transaction_removed_fails_with_the_way_out(table, replaced):
    """Job 1's files stay under the data root after job 2's overwrite (the table's first version lists them),
    but no reader of the table reads them now: with verify_files a sensor waiting for job 1 fails with
    CommitFilesGone, as for a directory whose files an overwrite deleted; after an append job 1's files are still
    read, and it gets job 1's manifest. The advice works: without job_id the current commit, without
    verify_files job 1's manifest as it committed."""
    from airflow_commit_provider.protocol import CommitFilesGone

    run_job(table)
    run_job({**table, "job_id": "events-2", "gen": 1, **({"mode": "overwrite"} if replaced else {})})
    root = data_root(table)
    if not replaced:
        for manifest in (poke(root, job_id="events-1", verify_files=True),
                         deferred_result(root, job_id="events-1", verify_files=True)):
            assert manifest["job_id"] == "events-1" and len(manifest["files"]) == 4
        return
    with pytest.raises(CommitFilesGone, match="without job_id, or without verify_files"):
        poke(root, job_id="events-1", verify_files=True)
    with pytest.raises(CommitFilesGone):
        deferred_result(root, job_id="events-1", verify_files=True)
    assert poke(root, verify_files=True)["job_id"] == "events-2"
    assert poke(root, job_id="events-1")["job_id"] == "events-1"


def expire_the_first_version(cfg: dict) -> None:
    """The table's own maintenance forgets its first version: Iceberg expires the snapshot; Delta checkpoints
    and cleans up the log entries before it (retention set to nothing)."""
    if cfg["format"] == "iceberg":
        first = iceberg_table(cfg).metadata.snapshots[0].snapshot_id
        iceberg_table(cfg).maintenance.expire_snapshots().by_id(first).commit()
        return
    import deltalake
    delta_table(cfg).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    table = delta_table(cfg)
    table.create_checkpoint()
    table.cleanup_metadata()
    with pytest.raises(deltalake.exceptions.TableNotFoundError):
        deltalake.DeltaTable(cfg["location"], version=0)


def test_a_commit_resumed_after_its_version_expired_adds_nothing_and_lists_what_the_table_reads_now(table):
    """Killed after its transaction; another job appends, and the table's maintenance forgets the first version
    (Iceberg: the snapshot, and the job tag in its summary, with it) before the resume: the resumed commit
    recognises its transaction (Delta: the application transaction survives the checkpoint; Iceberg: the current
    snapshot references the generation's own files) and adds nothing, which added every row twice before; its
    marker lists what the current version references, the other job's files as retained."""
    killed = run(table, "table_commit.after=exit")
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    run_job({**table, "job_id": "events-2", "gen": 1})
    expire_the_first_version(table)
    again = run({**table, "phase": "commit"})
    assert again.returncode == 0, again.stderr
    assert rows(table) == sorted(expected(tasks=2) + expected(tasks=2, gen=1)), "rows twice, or lost"
    marker = read_success_marker(data_root(table), verify_files=True)
    assert marker["job_id"] == "events-1" and marker["table"]["already_committed"] is True
    assert listed(marker) == referenced_now(table) and len(marker["retained"]) == 4
