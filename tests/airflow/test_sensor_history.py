"""``SuccessMarkerSensor`` and its trigger decide from the commit history, not from the marker of the moment.

Two jobs append into one target (a backfill), B committing after A: B's ``_SUCCESS`` replaced A's before the
sensor waiting for A poked, yet A did commit, and the sensor says so with A's manifest (its commit log's). With
*verify_files* A's listed files must still be there with their sizes; once B overwrote them, the sensor fails with
an error naming the way out, at once, instead of waiting forever. A compaction is a commit that changes no row: a
sensor without *job_id* is not satisfied by one alone.

The poke (poke and reschedule mode run it) and the deferrable trigger are driven directly; the trigger's
``run()`` on an event loop, with a timeout that only guards against a hang.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import CommitFilesGone, InvalidOutputSpec, read_success_marker
from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor
from airflow_commit_provider.triggers.success_marker import SuccessMarkerTrigger

from ..protocol import scenario as sc
from .test_committed_output_trigger import compaction, write_job
from .test_dag_test import dags  # noqa: F401 (the fixture: commit_test_dags, with a clean root and work dir)


def poke(root: str, **kwargs: Any) -> Any:
    """The sensor's answer in poke mode: the manifest, or ``None`` for "not yet"."""
    found = SuccessMarkerSensor(task_id="wait", target=root, deferrable=False, **kwargs).poke({})
    return found.xcom_value if found.is_done else None


def deferred(root: str, **kwargs: Any) -> dict[str, Any]:
    """The trigger's first event (it polls until it has one)."""
    trigger = SuccessMarkerTrigger(root, poke_interval=0, **kwargs)
    return asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=60)).payload


def deferred_result(root: str, **kwargs: Any) -> Any:
    """What the deferred task returns (or raises) once the trigger fired."""
    sensor = SuccessMarkerSensor(task_id="wait", target=root, deferrable=True, **kwargs)
    return sensor.execute_complete({}, deferred(root, **kwargs))


def files_of(manifest: dict[str, Any]) -> set[str]:
    return {f["path"] for f in manifest["files"]}


@pytest.fixture
def a_then_b(tmp_path):
    """``(root, a_files)``: job A committed (two files), then job B appended two more: the marker is B's."""
    root = str(tmp_path / "events")
    write_job(root, "job-a")
    a_files = files_of(read_success_marker(root))
    write_job(root, "job-b")
    assert read_success_marker(root)["job_id"] == "job-b"
    return root, a_files


@pytest.mark.parametrize("verify_files", [False, True])
def test_a_sensor_for_a_job_whose_marker_was_replaced_returns_its_commit(a_then_b, verify_files):
    root, a_files = a_then_b
    for manifest in (poke(root, job_id="job-a", verify_files=verify_files),
                     deferred_result(root, job_id="job-a", verify_files=verify_files)):
        assert manifest is not None, "job A committed: the sensor must not wait for a marker B replaced"
        assert manifest["job_id"] == "job-a" and files_of(manifest) == a_files
        assert manifest["commit_id"] == manifest["job_uuid"] and manifest["totals"]["rows"] == 6
        assert manifest["retained_files"] is None, "from A's commit log: what A's marker retained is unknown"
    b = poke(root, job_id="job-b", verify_files=verify_files)
    assert b["job_id"] == "job-b" and b["retained_files"] == 2, "B's own marker: as before, with its count"


def test_a_job_that_has_not_committed_is_still_waited_for(a_then_b):
    root, _ = a_then_b
    assert poke(root, job_id="job-c") is None
    write_job(root, "job-c", commit=False)
    assert poke(root, job_id="job-c", verify_files=True) is None, "set up and written, not committed"


def test_files_a_later_overwrite_removed_fail_the_sensor_with_the_way_out(tmp_path):
    """B overwrote the target: A's files are gone for good, so a verifying wait for A fails at once (poke and
    trigger alike), naming the missing file and what to do; the advice works: without *verify_files* the sensor
    returns A's manifest as it committed, without *job_id* it returns B's marker, verified."""
    root = str(tmp_path / "events")
    write_job(root, "job-a")
    a_files = files_of(read_success_marker(root))
    write_job(root, "job-b", mode="overwrite")
    assert not a_files & set(sc.visible_files(root))
    advice = "wait for the target's current commit without job_id, or without verify_files"
    with pytest.raises(CommitFilesGone, match=f"job job-a .* lists .* no longer there .*job-b.*{advice}"):
        poke(root, job_id="job-a", verify_files=True)
    event = deferred(root, job_id="job-a", verify_files=True)
    assert event["status"] == "error" and "CommitFilesGone" in event["message"]
    with pytest.raises(CommitFilesGone, match=advice):
        deferred_result(root, job_id="job-a", verify_files=True)
    assert files_of(poke(root, job_id="job-a")) == a_files
    current = poke(root, verify_files=True)
    assert current["job_id"] == "job-b" and files_of(current) == set(sc.visible_files(root))


def test_a_partition_sensor_for_a_replaced_job_gets_that_partitions_files(tmp_path):
    """Dynamic mode: A wrote days 1 and 2, B rewrote day 1 only; a sensor of day 2 for A finds A's own marker
    there, one of day 1 for A gets A's day-1 files from its commit log, and with verify_files fails (B replaced
    them)."""
    root = str(tmp_path / "events")
    write_job(root, "job-a", mode="dynamic", days=("1", "2"))
    write_job(root, "job-b", mode="dynamic", days=("1",))
    day1 = poke(f"{root}/day=1", job_id="job-a")
    assert day1["partition"] == "day=1" and day1["totals"]["files"] == 2
    assert all(p.startswith("day=1/") for p in files_of(day1)) and day1["retained_files"] is None
    day2 = poke(f"{root}/day=2", job_id="job-a", verify_files=True)
    assert day2["job_id"] == "job-a" and day2["partition"] == "day=2" and day2["retained_files"] == 0
    with pytest.raises(CommitFilesGone, match="day=1/"):
        poke(f"{root}/day=1", job_id="job-a", verify_files=True)


def small_files(root: str, n: int = 3) -> None:
    """*n* small Parquet files written by hand (no job of this provider): what a compaction merges."""
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        pq.write_table(pa.table({"task": [i], "row": [0]}), f"{root}/small-{i}.parquet")


def test_a_compaction_alone_does_not_satisfy_a_sensor_without_job_id(tmp_path):
    """Files written without this provider, then compacted: the compaction's marker is the only one, and it
    changed no row, so the sensor waiting for a commit keeps waiting; a job's commit then satisfies it. A
    compaction after that commit leaves the sensor satisfied, with the marker that describes the files now."""
    root = str(tmp_path / "events")
    small_files(root)
    compaction(root)
    assert read_success_marker(root)["maintenance"] == "compaction"
    assert poke(root) is None and poke(root, verify_files=True) is None
    write_job(root, "job-a")
    assert poke(root)["job_id"] == "job-a"
    compaction(root, "compact-2")
    after = poke(root, verify_files=True)
    assert after["maintenance"] == "compaction" and after["job_id"] == "compact-2"
    assert deferred_result(root, verify_files=True)["job_id"] == "compact-2"
    with pytest.raises(CommitFilesGone, match="job job-a .* lists"):
        poke(root, job_id="job-a", verify_files=True)
    assert poke(root, job_id="job-a")["job_id"] == "job-a", "A committed; its files were merged since"


@pytest.mark.airflow
def test_poke_reschedule_and_deferrable_find_a_replaced_jobs_commit_under_dag_test(dags):  # noqa: F811
    """The three ways of waiting, under a real Airflow: each returns job A's manifest (XCom) although job B's
    marker replaced A's before the DAG ran."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from .test_dag_test import states, target

    root = target("ct_sensor_history")
    write_job(root, "job-a")
    a_files = files_of(read_success_marker(root))
    write_job(root, "job-b")
    dr = dags.ct_sensor_history.test()
    assert dr.state == "success", states(dr)
    with create_session() as session:
        values = {x.task_id: x.value for x in session.query(XComModel).filter_by(
            dag_id="ct_sensor_history", run_id=dr.run_id, key="return_value")}
    assert set(values) == {"wait_poke", "wait_reschedule", "wait_deferred"}
    for value in values.values():
        manifest = value if isinstance(value, dict) else json.loads(value)
        assert manifest["job_id"] == "job-a" and files_of(manifest) == a_files


def test_a_job_id_no_job_can_have_is_refused_with_its_form(a_then_b):
    """A job id names the job's commit log file: one that could name another file is refused, by the poke and the
    deferred task alike, saying what a job id looks like; the job id as the job has it works."""
    root, _ = a_then_b
    with pytest.raises(InvalidOutputSpec, match="job id '../job-a' .* letters, digits"):
        poke(root, job_id="../job-a")
    with pytest.raises(InvalidOutputSpec, match="letters, digits"):
        deferred_result(root, job_id="../job-a")
    assert poke(root, job_id="job-a")["job_id"] == "job-a"


def test_a_partition_the_jobs_own_rerun_no_longer_writes_is_answered_not_waited_for(tmp_path):
    """Dynamic mode: A's first generation wrote days 1 and 2, its re-run (a clear after success) only day 2 and
    replaced all of the first one's files. For day 1, A's newest commit there is the first generation, of which
    only the summary is left: the sensor returns it (no files, ``replaced_by`` naming the re-run), and with
    verify_files says its files are gone; it does not wait for a manifest that cannot come."""
    root = str(tmp_path / "events")
    write_job(root, "job-a", mode="dynamic", days=("1", "2"))
    write_job(root, "job-a", mode="dynamic", days=("2",))
    rerun = read_success_marker(f"{root}/day=2")
    found = poke(f"{root}/day=1", job_id="job-a")
    assert found["generation"] == 0 and found["files"] == [] and found["replaced_by"] == rerun["job_uuid"]
    with pytest.raises(CommitFilesGone, match=f"its next generation {rerun['job_uuid']} replaced its files"):
        poke(f"{root}/day=1", job_id="job-a", verify_files=True)
    assert deferred(f"{root}/day=1", job_id="job-a", verify_files=True)["status"] == "error"
