"""The setup task's XCom value, typed: what ``CommitSetupOperator`` established and every reader reads back.

The setup operator returns :meth:`SetupContext.to_xcom`; the Commit status view finds a run's write stages through
those values and rebuilds each stage's committer from them with :meth:`SetupContext.from_xcom`. Nothing of the
protocol's state is read from here (the storage is the authority; XComs are wiped at every try): the context says
*where* and *how* a stage writes, and what its setup saw.

The XCom shape is a plain JSON dict whose keys are the field names, plus ``commit_provider_setup: True`` (how a
reader tells a setup context from other XComs of the run) and ``setup_context_version``. A value written before
the version key existed (provider releases up to this one wrote the same keys without it) reads as version 1, so
a run set up before an upgrade is still shown after it.

No Airflow import: the api-server plugin reads it too.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..protocol.config import CommitConfig, normalize_algorithm, partition_columns
from ..protocol.errors import InvalidOutputSpec
from ..protocol.modes import check_mode

#: Set (``True``) in every setup context: marks a run's ``return_value`` XCom as one.
SETUP_MARKER = "commit_provider_setup"
VERSION_KEY = "setup_context_version"
#: The XCom key under which a refused setup leaves its error (``{"error": class name, "message": ...}``) for the
#: Commit status view: the setup then has no context to return
REFUSED_KEY = "commit_setup_refused"
#: The shape written now. Version 1 is also what a value without ``VERSION_KEY`` is (the same keys).
VERSION = 1


class InvalidSetupContext(InvalidOutputSpec):
    """A setup task's XCom value that cannot be read as a :class:`SetupContext` (says which key and why)."""


def _check(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise InvalidSetupContext(f"setup context: {key} must be {expected}, got {value!r}")


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _count(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


@dataclass(frozen=True, kw_only=True)
class SetupContext:
    """One write stage as its setup task saw it: the job (``JobContext``'s fields) and the stage's configuration.

    ``algorithm`` is the committer's label (``"v1"``, ``"v2"``, ``"magic"``) and ``algorithm_value`` what the
    committer is built with (``1``, ``2``, ``"magic"``); ``target`` is the store's URL. Only what rebuilding the
    committer needs is required (``job_id``, ``target``, ``algorithm_value``, ``mode``); the rest describes the
    setup (``None`` when unknown). Fields are in the order of the XCom dict.
    """

    job_id: str
    job_uuid: str | None = None
    generation: int | None = None
    app_attempt: int | None = None
    first_app_attempt: int | None = None
    #: the job's state when setup ran: ``"running"``, or ``"committing"`` if a job commit had already started
    state: str | None = None
    job_name: str | None = None
    target: str
    conn_id: str | None = None
    algorithm: str | None = None
    algorithm_value: int | str
    mode: str
    partition_by: tuple[str, ...] = ()
    #: the DAG run's clear number (0 for its first run) and the setup task's try
    clear_number: int | None = None
    setup_try: int | None = None
    #: protocol tasks per write task instance (shards): task ``i * N + s`` is shard ``s`` of map index ``i``.
    #: Written only when not 1, so an unsharded stage's value is the shape earlier versions wrote (and read)
    shards_per_task: int = 1

    def __post_init__(self) -> None:
        _check(_text(self.job_id), "job_id", self.job_id, "a non-empty string")
        _check(_text(self.target), "target", self.target, "a non-empty URL")
        try:
            object.__setattr__(self, "algorithm_value", normalize_algorithm(self.algorithm_value))
            check_mode(self.mode)
            partition_by = [self.partition_by] if isinstance(self.partition_by, str) else self.partition_by
            _check(isinstance(partition_by, Collection), "partition_by", partition_by, "a list of column names")
            object.__setattr__(self, "partition_by", partition_columns(partition_by))
        except InvalidSetupContext:
            raise
        except InvalidOutputSpec as exc:
            raise InvalidSetupContext(f"setup context: {exc}") from exc
        for key in ("conn_id", "job_name", "algorithm", "job_uuid", "state"):
            value = getattr(self, key)
            _check(value is None or isinstance(value, str), key, value, "a string or None")
        for key in ("generation", "app_attempt", "first_app_attempt", "clear_number", "setup_try"):
            value = getattr(self, key)
            _check(_count(value), key, value, "a non-negative integer or None")
        _check(_count(self.shards_per_task) and self.shards_per_task is not None and self.shards_per_task >= 1,
               "shards_per_task", self.shards_per_task, "a positive integer")

    def config(self) -> CommitConfig:
        """The job's configuration as the setup task set it up (what rebuilding its committer needs)."""
        return CommitConfig(algorithm=self.algorithm_value, mode=self.mode, partition_by=self.partition_by)

    @classmethod
    def from_xcom(cls, value: Any) -> SetupContext:
        """Read a setup task's XCom value (a dict, or its JSON text) of any version up to :data:`VERSION`.

        Keys this version does not know are ignored (a reader may add its own, such as the setup task id); a
        missing ``algorithm_value`` is taken from the ``algorithm`` label. Raises :class:`InvalidSetupContext`
        naming the bad key.
        """
        data = _as_mapping(value)
        if data is None:
            raise InvalidSetupContext(f"setup context: expected a dict, got {type(value).__name__}")
        version = data.get(VERSION_KEY, 1)
        _check(isinstance(version, int) and not isinstance(version, bool) and version >= 1, VERSION_KEY, version,
               "a positive integer")
        if version > VERSION:
            raise InvalidSetupContext(f"setup context version {version} was written by a newer provider; this one "
                                      f"reads up to version {VERSION}")
        known = {f.name for f in fields(cls)}
        missing = [k for k in ("job_id", "target", "mode") if k not in data]
        if "algorithm_value" not in data and "algorithm" not in data:
            missing.append("algorithm_value")
        if missing:
            raise InvalidSetupContext(f"setup context: missing {', '.join(missing)}")
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs.setdefault("algorithm_value", data.get("algorithm"))
        kwargs["partition_by"] = kwargs.get("partition_by") or ()
        return cls(**kwargs)

    @classmethod
    def from_job(cls, job: Any, **stage: Any) -> SetupContext:
        """The context of a stage whose ``setup_job()`` returned *job* (a ``JobContext``)."""
        return cls(**{key: getattr(job, key) for key in _JOB_FIELDS}, **stage)

    def to_xcom(self) -> dict[str, Any]:
        """The JSON dict the setup task returns: the keys (and their order) every earlier version wrote, the
        marker after the job's fields, ``shards_per_task`` when not 1, and the version key last."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.shards_per_task == 1:   # an unsharded stage's value is the shape every earlier version wrote
            del values["shards_per_task"]
        return {**{key: values.pop(key) for key in _JOB_FIELDS}, SETUP_MARKER: True, **values,
                "partition_by": list(self.partition_by), VERSION_KEY: VERSION}


#: ``JobContext``'s fields, first in the XCom dict.
_JOB_FIELDS = ("job_id", "job_uuid", "generation", "app_attempt", "first_app_attempt", "state")


def setup_xcom(value: Any) -> dict[str, Any] | None:
    """The setup context dict in an XCom value (a dict, or its JSON text), or ``None`` for another task's XCom."""
    data = _as_mapping(value)
    return dict(data) if data is not None and data.get(SETUP_MARKER) is True else None


def _as_mapping(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, Mapping) else None
