"""Deferrable waiting for ``_SUCCESS``: runs in the triggerer, polls the store without holding a worker slot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..hooks.storage import CommitStorageHook


class SuccessMarkerTrigger(BaseTrigger):
    """Fires when the commit the sensor waits for is there: a valid ``_SUCCESS`` under *target*, or with *job_id*
    that job's commit, found in its commit history even when a later commit replaced its marker (the decision is
    the poke's: :meth:`~..hooks.storage.CommitStorageHook.committed_manifest`).

    A marker being replaced by a newer job while it is read counts as not there yet (polling goes on); a corrupt
    one, with *verify_files* a stable one whose files differ, or a job's files a later commit replaced, ends the
    wait with an error event naming the error's type (``error``), which the deferred task raises."""

    def __init__(self, target: str, conn_id: str | None = None, job_id: str | None = None,
                 verify_files: bool = False, poke_interval: float = 5.0) -> None:
        super().__init__()
        self.target = target
        self.conn_id = conn_id
        self.job_id = job_id
        self.verify_files = verify_files
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("airflow_commit_provider.triggers.success_marker.SuccessMarkerTrigger",
                {"target": self.target, "conn_id": self.conn_id, "job_id": self.job_id,
                 "verify_files": self.verify_files, "poke_interval": self.poke_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = CommitStorageHook(self.conn_id)
        while True:
            try:
                manifest = await asyncio.to_thread(hook.committed_manifest, self.target, job_id=self.job_id,
                                                   verify_files=self.verify_files)
            except Exception as exc:  # a corrupt manifest is an answer, not a reason to keep waiting
                yield TriggerEvent({"status": "error", "error": type(exc).__name__,
                                    "message": f"{type(exc).__name__}: {exc}"})
                return
            if manifest is not None:
                yield TriggerEvent({"status": "success", "manifest": manifest})
                return
            await asyncio.sleep(self.poke_interval)
