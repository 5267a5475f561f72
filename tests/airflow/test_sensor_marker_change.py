"""The ``_SUCCESS`` sensor and its trigger while a newer job replaces the marker: "not yet", then the new manifest.

Job 0 has committed; job 1 commits in a child process stopped at every fault point (tests/protocol/
marker_writer.py). The sensor's verifying read takes job 0's marker; the moment it lists the directory, job 1 has
withdrawn that marker and published its files (the store's first listing moves the writer on to that state: the
real local disk, listed after a real commit step). That is a marker being replaced, not a corrupt one: the sensor
keeps waiting and then returns job 1's manifest. Before, it failed the task with CorruptRecord.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_commit_provider.protocol import CorruptRecord, LocalStore
from airflow_commit_provider.sensors.success_marker import SuccessMarkerSensor
from airflow_commit_provider.triggers.success_marker import SuccessMarkerTrigger

from ..protocol.marker_writer import PausedWriter, commit_one, visible_files


def _mid_commit(writer: PausedWriter, root: str, old: set[str]) -> None:
    """Job 1 on until job 0's marker is withdrawn and job 1's files are visible."""
    while not writer.exited and (os.path.exists(os.path.join(root, "_SUCCESS")) or set(visible_files(root)) <= old):
        writer.advance()
    assert not writer.exited, "job 1 finished before reaching the middle of its commit"


@pytest.fixture
def replacing(tmp_path, monkeypatch):
    """``(root, writer, listed, hooks)``: job 0 committed, job 1 paused at its first point; the first verifying
    listing in this process moves job 1 to the middle of its commit, then calls ``hooks["after_first"]`` (if
    set) and sets ``listed``."""
    root = str(tmp_path / "out")
    commit_one(root, 0, "overwrite", 1)
    old = set(visible_files(root))
    writer = PausedWriter(root, "overwrite", 1)
    listed = threading.Event()
    hooks: dict[str, Callable[[], None]] = {}
    original = LocalStore.list_files

    def list_files(self, rel="", *, visible_only=False):
        if not listed.is_set():
            _mid_commit(writer, root, old)
            if "after_first" in hooks:
                hooks["after_first"]()
            listed.set()
        return original(self, rel, visible_only=visible_only)

    monkeypatch.setattr(LocalStore, "list_files", list_files)
    yield root, writer, listed, hooks
    if not writer.exited:
        writer.finish()


def test_the_sensor_pokes_again_while_the_marker_is_replaced_and_then_succeeds(replacing):
    root, writer, listed, _hooks = replacing
    sensor = SuccessMarkerSensor(task_id="wait", target=root, verify_files=True, deferrable=False)
    first = sensor.poke({})
    assert listed.is_set(), "the poke never listed the directory"
    assert first.is_done is False, f"accepted a marker that was being replaced: {first.xcom_value}"
    writer.finish()
    second = sensor.poke({})
    assert second.is_done is True
    manifest = second.xcom_value
    assert manifest["job_id"] == "job-1"
    assert {f["path"] for f in manifest["files"]} == set(visible_files(root))


def test_the_trigger_polls_on_while_the_marker_is_replaced_and_fires_with_the_new_one(replacing):
    """The first poll reads job 0's marker and lists mid-commit; job 1 then runs to its end in the background
    while the trigger polls. Whatever the number of polls, the one event is job 1's manifest: job 0's marker is
    gone for good after the first poll, so a success proves the trigger kept polling across the change."""
    root, writer, listed, hooks = replacing
    finisher = threading.Thread(target=writer.finish)
    hooks["after_first"] = finisher.start
    trigger = SuccessMarkerTrigger(root, verify_files=True, poke_interval=0.01)

    async def first_event():
        return await asyncio.wait_for(anext(trigger.run()), timeout=120)  # a hang guard, not a timing condition

    event = asyncio.run(first_event())
    assert listed.is_set()
    finisher.join()
    assert writer.exited and writer.proc.returncode == 0
    assert event.payload["status"] == "success", event.payload
    assert event.payload["manifest"]["job_id"] == "job-1"


def test_a_stable_wrong_marker_still_fails_the_sensor_and_the_trigger(tmp_path):
    """A listed file deleted by hand, the marker stable: the poke raises CorruptRecord naming the file, the
    trigger ends with an error event, and the deferred task fails with that message."""
    root = str(tmp_path / "out")
    commit_one(root, 0, "overwrite", 1)
    gone = json.loads((Path(root) / "_SUCCESS").read_bytes())["files"][0]["path"]
    os.remove(os.path.join(root, gone))
    sensor = SuccessMarkerSensor(task_id="wait", target=root, verify_files=True, deferrable=True)
    with pytest.raises(CorruptRecord, match=f"lists {gone} with .* no such file"):
        sensor.poke({})
    event = asyncio.run(asyncio.wait_for(anext(SuccessMarkerTrigger(root, verify_files=True).run()), timeout=60))
    assert event.payload["status"] == "error"
    assert f"CorruptRecord: file://{root}/_SUCCESS lists {gone}" in event.payload["message"]
    with pytest.raises(CorruptRecord, match=f"lists {gone} with .* no such file"):
        sensor.execute_complete({}, event.payload)


def test_a_marker_that_never_settles_keeps_the_sensor_waiting(tmp_path, monkeypatch, capsys):
    """Rewritten (validly) during every listing, the marker is MarkerChanging: the poke is "not yet", logged,
    not a failure; once the rewriting stops, the poke returns the manifest."""
    root = str(tmp_path / "out")
    commit_one(root, 0, "overwrite", 1)
    marker = Path(root) / "_SUCCESS"
    doc = json.loads(marker.read_bytes())
    original = LocalStore.list_files
    rewrites = []

    def list_files(self, rel="", *, visible_only=False):
        rewrites.append(1)
        marker.write_text(json.dumps({**doc, "labels": {"rewrite": len(rewrites)}}))
        return original(self, rel, visible_only=visible_only)

    monkeypatch.setattr(LocalStore, "list_files", list_files)
    sensor = SuccessMarkerSensor(task_id="wait", target=root, verify_files=True, deferrable=False)
    capsys.readouterr()
    assert sensor.poke({}).is_done is False
    assert "changed during each of 3 listings" in capsys.readouterr().out  # the task log (structlog, stdout)
    monkeypatch.undo()
    done = sensor.poke({})
    assert done.is_done and done.xcom_value["labels"] == {"rewrite": len(rewrites)}
