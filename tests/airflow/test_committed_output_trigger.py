"""``CommittedOutputTrigger``, the AssetWatcher trigger, driven directly (asyncio) over real commits on a local
disk: one event per committed job generation, none twice, none while a marker is withdrawn by a committing job,
none for a corrupt marker (and the watcher goes on), the manifest in the event; what fired survives a new trigger
instance through the asset state store.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import faults, make_committer, read_success_marker, run_task_attempt
from airflow_commit_provider.protocol.faults import InjectedFault
from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger


def write_job(root: str, job_id: str, *, mode: str = "append", tasks: int = 2, commit: bool = True) -> Any:
    """One job of *tasks* tasks (3 rows each) set up and written; committed unless *commit* is false."""
    committer = make_committer(root, job_id, mode=mode)
    committer.setup_job()
    for task in range(tasks):
        run_task_attempt(committer, task, 1, lambda w, t=task: w.write(pa.table({"task": [t] * 3, "row": [0, 1, 2]})))
    if commit:
        committer.commit_job(tasks)
    return committer


def poll(trigger: CommittedOutputTrigger) -> dict | None:
    event = asyncio.run(trigger.poll())
    return None if event is None else event.payload


def test_one_event_per_committed_generation(tmp_path):
    root = str(tmp_path / "events")
    trigger = CommittedOutputTrigger(target=root, poke_interval=0)
    assert poll(trigger) is None, "nothing committed yet"

    write_job(root, "job-a")
    first = poll(trigger)
    marker = read_success_marker(root)
    assert first["job_uuid"] == marker["job_uuid"] and first["job_id"] == "job-a"
    assert first["totals"]["rows"] == 6 and [f["path"] for f in first["files"]] == [f["path"] for f in
                                                                                 marker["files"]]
    assert first["files_truncated"] is False and "retained" not in first
    assert [poll(trigger) for _ in range(3)] == [None] * 3, "never twice for one generation"

    # job b withdraws a's marker, then dies before publishing: no marker, so no event
    committer = write_job(root, "job-b", commit=False)
    faults.arm("commit_job.after_withdraw", "raise")
    with pytest.raises(InjectedFault):
        committer.commit_job(2)
    assert not (tmp_path / "events" / "_SUCCESS").exists()
    assert [poll(trigger) for _ in range(3)] == [None] * 3, "a withdrawn marker is no event"
    committer.commit_job(2)   # resumed
    second = poll(trigger)
    assert second["job_id"] == "job-b" and second["totals"]["rows"] == 6
    assert second["retained_files"] == 2, "job a's files stayed (append): counted, not listed"
    assert poll(trigger) is None

    # a corrupt marker is skipped, and the watcher goes on to the next commit
    (tmp_path / "events" / "_SUCCESS").write_text("{not json")
    assert poll(trigger) is None
    write_job(root, "job-b")   # a re-run of the committed job b: a new generation, a new uuid
    third = poll(trigger)
    assert third["job_id"] == "job-b" and third["generation"] == 1 and third["job_uuid"] != second["job_uuid"]
    assert third["replaced_generation"] == second["job_uuid"]


def test_run_yields_each_commit_once(tmp_path):
    """The loop the triggerer runs: each ``anext`` is the next committed generation, in order."""
    root = str(tmp_path / "events")

    async def scenario() -> list[str]:
        events = CommittedOutputTrigger(target=root, poke_interval=0).run()
        seen = []
        for job in ("job-a", "job-b", "job-c"):
            await asyncio.to_thread(write_job, root, job)
            event = await asyncio.wait_for(anext(events), timeout=60)
            seen.append(event.payload["job_id"])
        await events.aclose()
        return seen

    assert asyncio.run(scenario()) == ["job-a", "job-b", "job-c"]


class DictStateStore:
    """What the triggerer injects as ``asset_state_store`` (Airflow 3.3: one asset's key/value state), in memory."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_what_fired_survives_a_new_trigger_instance(tmp_path):
    """A restarted triggerer builds a new trigger instance: with the asset's state store it does not fire again."""
    root = str(tmp_path / "events")
    store = DictStateStore()
    write_job(root, "job-a")
    before = CommittedOutputTrigger(target=root)
    before.asset_state_store = store
    assert poll(before)["job_id"] == "job-a"

    after = CommittedOutputTrigger(**before.serialize()[1])   # as the triggerer rebuilds it from the database
    after.asset_state_store = store
    assert poll(after) is None, "job a fired before the restart"
    write_job(root, "job-b")
    assert poll(after)["job_id"] == "job-b"


def test_an_asset_watcher_takes_it():
    from airflow.sdk import Asset, AssetWatcher

    trigger = CommittedOutputTrigger(target="s3://lake/events", conn_id="aws_lake", verify_files=True)
    asset = Asset("lake_events", watchers=[AssetWatcher(name="committed", trigger=trigger)])
    classpath, kwargs = asset.watchers[0].trigger.serialize()
    assert classpath == "airflow_commit_provider.triggers.committed_output.CommittedOutputTrigger"
    assert kwargs == {"target": "s3://lake/events", "conn_id": "aws_lake", "verify_files": True,
                      "poke_interval": 30.0}
