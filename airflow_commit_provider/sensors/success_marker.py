"""Wait for a committed output: ``_SUCCESS`` present, valid, optionally of a given job, files checked."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

try:  # the Task SDK exports conf in newer Airflow (3.3)
    from airflow.sdk import conf
except ImportError:  # Airflow 3.1: the Task SDK does not export conf yet
    from airflow.configuration import conf

from ..hooks.storage import CommitStorageHook
from ..triggers.success_marker import SuccessMarkerTrigger


class SuccessMarkerSensor(BaseSensorOperator):
    """Waits for ``_SUCCESS`` under *target* (an output root or one partition of it) and returns its manifest.

    Works in ``poke`` and ``reschedule`` mode and deferrable (``deferrable=True``, default from ``[operators]
    default_deferrable``), in which case the waiting happens in the triggerer. A corrupt manifest fails the task
    with a message naming the problem. With *verify_files* the visible files must be exactly the listed ones, with
    their recorded sizes: a marker that stays the same while the files are listed and does not match them fails
    the task, one that a newer job withdraws or rewrites meanwhile is "not yet" and the sensor keeps waiting (see
    :func:`~airflow_commit_provider.protocol.read_success_marker`).

    With *job_id* the sensor waits for that job's commit, decided from its commit history, so a later job's commit
    that replaced its marker (a backfill, two jobs appending) does not hide it; it returns that commit's manifest
    (the commit log's once the marker is another's: ``retained_files`` is ``None``). *verify_files* then checks the
    job's own files, still there with their sizes; when a later commit removed them (an overwrite, a compaction)
    the task fails with :class:`CommitFilesGone`. Without *job_id*, a compaction's marker counts only once a
    commit of data finished there (:mod:`~airflow_commit_provider.protocol.waiting`).

    On a Delta or Iceberg table's data root (Delta: the table's location; Iceberg: ``<location>/data``) the marker
    lists the files the table version its commit produced references; *verify_files* checks that each is there with
    its size (files older versions list stay under the data root and do not count), and with *job_id* that the
    job's files are still in the table's current version.
    """

    template_fields = ("target", "conn_id", "job_id")
    ui_color = "#fdebd0"

    def __init__(self, *, target: Any, conn_id: str | None = None, job_id: str | None = None,
                 verify_files: bool = False,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.conn_id = conn_id
        self.job_id = job_id
        self.verify_files = verify_files
        self.deferrable = deferrable

    def execute(self, context: Mapping[str, Any]) -> Any:
        if not self.deferrable:
            return super().execute(context)
        found = self.poke(context)
        if found.is_done:
            return found.xcom_value
        self.defer(trigger=SuccessMarkerTrigger(str(self.target), self.conn_id, self.job_id, self.verify_files,
                                                self.poke_interval),
                   method_name="execute_complete",
                   timeout=timedelta(seconds=self.timeout) if self.timeout else None)

    def poke(self, context: Mapping[str, Any]) -> PokeReturnValue:
        manifest = CommitStorageHook(self.conn_id).committed_manifest(self.target, job_id=self.job_id,
                                                                        verify_files=self.verify_files)
        if manifest is None:
            self.log.info("no committed _SUCCESS under %s yet", self.target)
            return PokeReturnValue(is_done=False)
        self.log.info("found _SUCCESS of job %s: %s files, %s rows", manifest["job_id"],
                      manifest["totals"]["files"], manifest["totals"]["rows"])
        return PokeReturnValue(is_done=True, xcom_value=manifest)

    def execute_complete(self, context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
        if event.get("status") != "success":
            raise _error_class(event.get("error"))(f"waiting for _SUCCESS under {self.target} failed: "
                                                   f"{event.get('message')}")
        return event["manifest"]


def _error_class(name: Any) -> type[Exception]:
    """The protocol's error the trigger's error event names, so that the deferred task fails as the poke does;
    :class:`CorruptRecord` for any other (and for events of releases that named none)."""
    from ..protocol import errors

    found = getattr(errors, name, None) if isinstance(name, str) else None
    return found if isinstance(found, type) and issubclass(found, errors.CommitProtocolError) else errors.CorruptRecord
