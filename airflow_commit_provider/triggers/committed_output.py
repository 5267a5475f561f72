"""An event trigger for ``AssetWatcher``: an asset event per commit into a target, no sensor task needed.

::

    events = Asset("lake_events", watchers=[AssetWatcher(name="events_committed",
                                                         trigger=CommittedOutputTrigger(target="s3://lake/events",
                                                                                        conn_id="aws_lake"))])
    with DAG("downstream", schedule=[events]): ...   # runs once per upstream commit

Events come from the target's commit history (:mod:`~airflow_commit_provider.protocol.history`), not from the
``_SUCCESS`` of the moment: every commit fires once, in commit order, whatever the polling interval, also when two
jobs (a backfill) or two generations of one job (a clear after success) committed between two polls. A commit
fires once it finished (markers written), never while a job is committing. The target is an output root (every
commit fires) or one partition directory of it (``.../day=2024-01-01``: the commits that wrote files under it).
A maintenance commit (a compaction: it rewrote files and changed no row) fires nothing, unless the trigger is
created with ``include_maintenance=True``; its cursor moves past it either way.

The event's payload, which Airflow puts in the asset event's ``extra["payload"]``, is the commit's manifest with its
file list capped (:func:`event_manifest`) and its ``commit_id`` (the generation's job uuid), which consumers
dedupe on. It is the manifest of the target's ``_SUCCESS`` while that marker is the commit's (then
``retained_files`` counts the other files under it), else the commit log's (``retained_files`` unknown: ``None``);
a generation the job's next one replaced before it was read has only its summary left (``files`` empty,
``files_truncated``, ``replaced_by``).

A new watcher fires for the newest commit there (it is new to the watcher, as a file already there fires Airflow's
own file triggers), then for every later one. What it emitted, its cursor, is kept in the watched asset's state
store where the triggerer provides one (Airflow 3.3+, one asset per watcher) and in :meth:`serialize`: a trigger
re-created from either misses no commit made while it was down. (Airflow itself never serializes a running
watcher's trigger again: after a triggerer restart the state store is what remembers; a trigger shared by several
assets gets no state store, as on Airflow before 3.3.) It is saved after the triggerer took the event,
so a triggerer killed in between fires that commit again after its restart: at least once, with the commit id to
dedupe on (exactly once would need the event and the cursor in one transaction, which a trigger does not get).
Without a state store (Airflow 3.1, 3.2) a watcher's trigger is re-created from its DAG-file arguments, which
carry no cursor: it starts as a new watcher, firing the newest commit again, and commits made while it was down
other than the newest do not fire.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..hooks.storage import CommitStorageHook
from ..operators.summary import MAX_FILES
from ..protocol import CorruptRecord, InvalidOutputSpec, MarkerChanging, Store, read_success_marker
from ..protocol.history import Commit, Cursor, HistoryReader
from ..protocol.records.success import retained_count

#: The asset state store key holding the watcher's cursor (:class:`~..protocol.history.Cursor`).
CURSOR_KEY = "commit_cursor"
#: Where releases before the cursor kept the uuid of the generation fired last: read once, to start from there.
LEGACY_KEY = "commit_last_fired_job_uuid"
#: What :meth:`CommittedOutputTrigger._marker` says when *verify_files* must wait for the marker (being replaced,
#: or not matching its files): that poll fires nothing.
HOLD = object()


def event_manifest(manifest: dict[str, Any], max_files: int = MAX_FILES) -> dict[str, Any]:
    """The manifest as an asset event carries it: at most *max_files* of its files (``files_truncated`` says if
    there were more), and the count of retained files instead of their list (the other files read with it; ``None``
    when the manifest does not come from a marker, which alone lists them)."""
    files = manifest.get("files", [])
    out = {k: v for k, v in manifest.items() if k not in ("files", "retained")}
    return {**out, "files": files[:max_files],
            "files_truncated": len(files) > max_files or bool(manifest.get("files_truncated")),
            "retained_files": retained_count(manifest)}


class CommittedOutputTrigger(BaseEventTrigger):
    """Fires once per commit into *target*, in commit order; for ``AssetWatcher``.

    :param target: an output root or one partition directory of it (a local path or URL)
    :param conn_id: the Airflow connection of a remote target
    :param verify_files: check the visible files against the target's marker before firing the commit it names;
        while it does not match, no event fires (a commit of the same target's next job puts it right)
    :param include_maintenance: fire for maintenance commits too (a compaction: it rewrote files, changed no row,
        and fires nothing by default, so that downstream DAGs do not run for it); their payload has
        ``"maintenance": "compaction"``
    :param poke_interval: seconds between two reads of the commit history
    :param cursor: what a running trigger had emitted, as :meth:`serialize` gives it; not for DAG files
    """

    def __init__(self, target: str, conn_id: str | None = None, verify_files: bool = False,
                 poke_interval: float = 30.0, cursor: dict[str, Any] | None = None,
                 include_maintenance: bool = False) -> None:
        super().__init__()
        self.target = target
        self.conn_id = conn_id
        self.verify_files = verify_files
        self.include_maintenance = include_maintenance
        self.poke_interval = poke_interval
        try:
            self.cursor = None if cursor is None else Cursor.from_doc(cursor, "the trigger's cursor argument")
        except CorruptRecord as exc:
            raise InvalidOutputSpec(f"{exc}: pass the cursor serialize() returned, or none to start as a new "
                                    "watcher") from None
        self.partition = ""   # the target's partition under the root that holds the commit logs, once found
        self._reader: HistoryReader | None = None
        self._target_store: Store | None = None
        self._state_read = False
        #: the uuid a release before the cursor fired last, read from the asset state store (:meth:`_restore`)
        self._legacy: str | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {"target": self.target, "conn_id": self.conn_id, "verify_files": self.verify_files,
                                  "poke_interval": self.poke_interval}
        if self.include_maintenance:   # absent when not asked for: a DAG file's trigger stays the same
            kwargs["include_maintenance"] = True
        if self.cursor is not None:   # absent before the first poll: a DAG file's trigger stays the same
            kwargs["cursor"] = self.cursor.to_doc()
        return ("airflow_commit_provider.triggers.committed_output.CommittedOutputTrigger", kwargs)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            for commit, event in await self.poll():
                assert self.cursor is not None   # set by the poll that returned *commit*
                self.cursor = self.cursor.after(commit)
                if event is not None:
                    try:
                        yield event
                    finally:   # the triggerer took the event: it resumes the generator, or closes it
                        await self._save()
            await asyncio.sleep(self.poke_interval)

    async def poll(self) -> list[tuple[Commit, TriggerEvent | None]]:
        """One read of the commit history: the commits not emitted yet, in commit order, each with its event
        (``None`` for a commit that wrote nothing under a watched partition, or a maintenance commit not asked
        for). It changes nothing in storage and advances no cursor over a commit: :meth:`run` does, as it emits."""
        if not self._state_read:
            await self._restore()
        reader = await asyncio.to_thread(self._history_reader)
        if reader is None:
            return []
        history = await asyncio.to_thread(reader.read)
        for job, why in history.unreadable.items():
            self.log.warning("commit log of job %s under %s is unreadable, skipped for now: %s", job,
                             reader.store.url(), why)
        if self.cursor is None:   # a new watcher: its start is saved at once, so a restart keeps it
            self.cursor = history.baseline(self.partition, upto=self._legacy,
                                           include_maintenance=self.include_maintenance)
            await self._save()
        new, self.cursor = history.since(self.cursor)
        if not any(self._concerns(c) for c in new):
            return [(c, None) for c in new]
        marker = await asyncio.to_thread(self._marker)
        if marker is HOLD:
            return []
        out = []
        for c in new:
            event = None
            if self._concerns(c):
                if isinstance(marker, dict) and marker["job_uuid"] == c.commit_id:
                    manifest = marker
                else:
                    manifest = (await asyncio.to_thread(reader.loaded, c)).view(self.partition)
                payload = {**event_manifest(manifest), "commit_id": c.commit_id}
                event = TriggerEvent(payload)
                self.log.info("commit into %s: job %s (commit id %s, generation %s), %s files, %s rows", self.target,
                              c.job_id, c.commit_id, payload["generation"], payload["totals"]["files"],
                              payload["totals"]["rows"])
            out.append((c, event))
        return out

    def _concerns(self, commit: Commit) -> bool:
        return commit.concerns(self.partition, self.include_maintenance)

    def _history_reader(self) -> HistoryReader | None:
        """The reader of the target's commit logs (:meth:`~..hooks.storage.CommitStorageHook.history_root`);
        ``None`` while there are none (nothing committed yet)."""
        if self._reader is None:
            found = CommitStorageHook(self.conn_id).history_root(self.target)
            if found is not None:
                self._reader = HistoryReader(found[0])
                self.partition = found[1]
        return self._reader

    def _marker(self) -> dict[str, Any] | None | object:
        """The target's ``_SUCCESS`` manifest (checked against the files with *verify_files*), ``None`` when there is
        none to use, :data:`HOLD` when *verify_files* must wait for it."""
        if self._target_store is None:
            self._target_store = CommitStorageHook(self.conn_id).get_store(self.target)
        try:
            return read_success_marker(self._target_store, verify_files=self.verify_files)
        except FileNotFoundError:   # absent (no marker in this mode, or withdrawn): nothing to check against
            return None
        except MarkerChanging as exc:
            self.log.info("%s", exc)
            return HOLD if self.verify_files else None
        except CorruptRecord as exc:
            self.log.warning("_SUCCESS under %s %s: %s", self.target,
                             "does not match its files, no event until it does" if self.verify_files else
                             "is unreadable; events carry the commit logs' manifests", exc)
            return HOLD if self.verify_files else None

    async def _restore(self) -> None:
        """The cursor the asset state store holds (newer than the one :meth:`serialize` gave, if both), or the
        commit a release before the cursor fired last (:data:`LEGACY_KEY`)."""
        self._state_read = True
        stored = await self._stored("aget", CURSOR_KEY)
        if stored is not None:
            try:
                self.cursor = Cursor.from_doc(stored, f"asset state {CURSOR_KEY!r}")
                return
            except CorruptRecord as exc:
                self.log.warning("%s; ignored", exc)
        if self.cursor is None:
            legacy = await self._stored("aget", LEGACY_KEY)
            self._legacy = legacy if isinstance(legacy, str) else None

    async def _save(self) -> None:
        if self.cursor is not None:
            await self._stored("aset", CURSOR_KEY, self.cursor.to_doc())

    async def _stored(self, method: str, *args: Any) -> Any:
        """Read or write the watched asset's state store; without one (Airflow < 3.3, the trigger run directly),
        or when it fails, the cursor stays in memory (a lookup error must not end the watcher)."""
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            return await getattr(store, method)(*args)
        except Exception as exc:   # several assets on one trigger (ValueError), or the store unreachable
            self.log.warning("asset state store not usable (%s): the watcher's cursor is kept in memory", exc)
            return None
