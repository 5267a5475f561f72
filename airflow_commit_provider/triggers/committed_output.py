"""An event trigger for ``AssetWatcher``: an asset event per committed job of a target, no sensor task needed.

::

    events = Asset("lake_events", watchers=[AssetWatcher(name="events_committed",
                                                         trigger=CommittedOutputTrigger(target="s3://lake/events",
                                                                                        conn_id="aws_lake"))])
    with DAG("downstream", schedule=[events]): ...   # runs once per upstream commit

The triggerer polls ``_SUCCESS`` under the target (an output root, or one partition of a ``dynamic`` table) and
fires once per job generation that committed there: a marker is known by its job's uuid (a re-run of a committed
job is a new generation, with a new uuid). It never fires twice for one generation, nor while a marker is absent,
being withdrawn or replaced by a committing job (those read as "not there yet", see
:meth:`~airflow_commit_provider.hooks.storage.CommitStorageHook.committed_manifest`); a corrupt marker is logged
and skipped. The event's payload, which Airflow puts in the asset event's ``extra["payload"]``, is the marker's
manifest with its file list capped (:func:`event_manifest`).

The first marker a watcher sees fires (it is new to the watcher, as a file already there fires Airflow's own file
triggers). Which generation fired last is kept in the watched asset's state store where the triggerer provides
one (Airflow 3.3+, one asset per watcher): a restarted triggerer does not fire again for it. Without a state store
(Airflow 3.1, 3.2) it is kept in memory, so a triggerer restart fires once more for the marker present then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..hooks.storage import CommitStorageHook
from ..operators.summary import MAX_FILES
from ..protocol import CorruptRecord

#: The asset state store key holding the uuid of the job generation this watcher fired for last.
STATE_KEY = "commit_last_fired_job_uuid"


def event_manifest(manifest: dict[str, Any], max_files: int = MAX_FILES) -> dict[str, Any]:
    """The manifest as an asset event carries it: at most *max_files* of its files (``files_truncated`` says if
    there were more), and the count of retained files instead of their list (a table's every other file)."""
    files = manifest.get("files", [])
    out = {k: v for k, v in manifest.items() if k not in ("files", "retained")}
    return {**out, "files": files[:max_files], "files_truncated": len(files) > max_files,
            "retained_files": len(manifest.get("retained", []))}


class CommittedOutputTrigger(BaseEventTrigger):
    """Fires once per new committed ``_SUCCESS`` generation under *target*; for ``AssetWatcher``.

    :param target: an output root or one partition directory of it (a local path or URL)
    :param conn_id: the Airflow connection of a remote target
    :param verify_files: check the visible files against the marker before firing (one listing per new marker)
    :param poke_interval: seconds between two reads of ``_SUCCESS``
    """

    def __init__(self, target: str, conn_id: str | None = None, verify_files: bool = False,
                 poke_interval: float = 30.0) -> None:
        super().__init__()
        self.target = target
        self.conn_id = conn_id
        self.verify_files = verify_files
        self.poke_interval = poke_interval
        #: the uuid of the generation fired for last (also in the asset state store, when there is one)
        self.last_fired: str | None = None
        self._state_read = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("airflow_commit_provider.triggers.committed_output.CommittedOutputTrigger",
                {"target": self.target, "conn_id": self.conn_id, "verify_files": self.verify_files,
                 "poke_interval": self.poke_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            event = await self.poll()
            if event is not None:
                yield event
            await asyncio.sleep(self.poke_interval)

    async def poll(self) -> TriggerEvent | None:
        """One read of the marker: the event for a generation not fired for yet, else ``None``."""
        if not self._state_read:
            self.last_fired = await self._stored("aget", STATE_KEY)
            self._state_read = True
        hook = CommitStorageHook(self.conn_id)
        try:
            manifest = await asyncio.to_thread(hook.committed_manifest, self.target, verify_files=self.verify_files)
        except CorruptRecord as exc:   # not an event, and not the end of the watcher: the next commit replaces it
            self.log.warning("_SUCCESS under %s is unreadable, skipped: %s", self.target, exc)
            return None
        if manifest is None or manifest["job_uuid"] == self.last_fired:
            return None
        self.last_fired = manifest["job_uuid"]
        await self._stored("aset", STATE_KEY, self.last_fired)
        self.log.info("new committed generation under %s: job %s (uuid %s, generation %s), %s files, %s rows",
                      self.target, manifest["job_id"], manifest["job_uuid"], manifest["generation"],
                      manifest["totals"]["files"], manifest["totals"]["rows"])
        return TriggerEvent(event_manifest(manifest))

    async def _stored(self, method: str, *args: Any) -> Any:
        """Read or write the watched asset's state store; without one (Airflow < 3.3, the trigger run directly),
        or when it fails, the state stays in memory (a lookup error must not end the watcher)."""
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            return await getattr(store, method)(*args)
        except Exception as exc:   # several assets on one trigger (ValueError), or the store unreachable
            self.log.warning("asset state store not usable (%s): which generation fired is kept in memory", exc)
            return None
