"""The commit task's XCom value, typed: what a committed stage published, as a downstream task reads it.

``CommitJobOperator`` returns :meth:`CommitSummary.to_xcom`, a flat JSON dict whose keys are the field names below
(plus ``commit_summary_version``); a downstream ``@task`` receives that dict, and may read it back typed with
:meth:`CommitSummary.from_xcom`. The user guide's "The commit summary" table (docs/user-guide.md) documents the
same fields. The full record of the commit is ``_SUCCESS`` (its manifest, :func:`~airflow_commit_provider.protocol.read_success_marker`):
the summary is derived from it and capped in size (at most :data:`MAX_FILES` file entries), because XComs live in
the metadata database.

No Airflow import: the summary is built from the protocol's manifest alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..protocol.errors import InvalidOutputSpec

VERSION_KEY = "commit_summary_version"
#: The shape written now.
VERSION = 1
#: At most this many entries in ``file_list`` (``file_list_truncated`` says whether there were more).
MAX_FILES = 1000


@dataclass(frozen=True, kw_only=True)
class CommitSummary:
    """One committed job of a write stage: identity, what it published, and how it got there.

    Counts are of this job's files only (``_SUCCESS`` also lists, as ``retained``, what stayed from before).
    ``rows`` is ``None`` when a ``writer_callable`` wrote files other than Parquet (their rows are not counted).
    """

    #: the job (dag id + job key + stage name), its generation's uuid and number, the application attempt that
    #: committed it (0 unless the run was cleared after a failure)
    job_id: str
    job_uuid: str
    generation: int
    app_attempt: int
    #: the output root (the store's URL), the output mode, the committer's algorithm (1, 2 or "magic")
    target: str
    mode: str
    algorithm: int | str
    partition_by: list[str] = field(default_factory=list)
    #: what this job published
    rows: int | None
    files: int
    bytes: int
    #: committed tasks (one per mapped write task instance)
    tasks: int
    #: the partition directories written (``day=2024-01-01``), sorted; empty when not partitioned
    partitions: list[str] = field(default_factory=list)
    #: tasks committed by an earlier application attempt and recovered: their code did not run again
    tasks_recovered: list[int] = field(default_factory=list)
    #: attempts of this job's tasks that failed, were denied or never finished (retried tries, zombies)
    failed_attempts: int = 0
    #: old files the commit deleted (``overwrite``, ``dynamic``, or a re-run replacing an earlier generation)
    deleted_files: int = 0
    #: the uuid of the job generation this one replaced (a re-run of a committed job), else ``None``
    replaced_generation: str | None = None
    #: the commit resumed a job commit that had stopped midway (a retried commit task)
    resumed: bool = False
    started: str | None = None
    finished: str | None = None
    #: seconds per stage of the job commit
    durations: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: this job's files (``path`` relative to the target, ``size``, ``rows``, ``task``), at most MAX_FILES
    file_list: list[dict[str, Any]] = field(default_factory=list)
    file_list_truncated: bool = False
    #: the manifest's diagnostics (store, threads, requests, ...): for people, not a stable interface
    diagnostics: dict[str, Any] = field(default_factory=dict)
    #: a table target's transaction: ``format``, ``table``, ``version`` (Delta) or ``snapshot_id`` (Iceberg),
    #: ``files_added``, ``files_removed``, ``already_committed``; ``None`` for a directory of files
    table: dict[str, Any] | None = None

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], max_files: int = MAX_FILES) -> CommitSummary:
        """The summary of a job commit's manifest (``commit_job``'s result or a ``_SUCCESS``)."""
        totals = manifest["totals"]
        tasks = manifest.get("tasks", [])
        files = manifest.get("files", [])
        diagnostics = dict(manifest.get("diagnostics", {}))
        failed = sum(len(t.get(k, [])) for t in tasks
                     for k in ("failed_attempts", "denied_attempts", "unfinished_attempts"))
        return cls(job_id=manifest["job_id"], job_uuid=manifest["job_uuid"], generation=manifest["generation"],
                   app_attempt=manifest["app_attempt"], target=manifest["output"], mode=manifest["mode"],
                   algorithm=manifest["algorithm"], partition_by=list(manifest.get("partition_by", [])),
                   rows=totals["rows"], files=totals["files"], bytes=totals["bytes"], tasks=totals["tasks"],
                   partitions=list(manifest.get("partitions", [])),
                   tasks_recovered=sorted(t["task"] for t in tasks if t.get("recovered_from_app") is not None),
                   failed_attempts=failed, deleted_files=manifest.get("deleted", {}).get("files", 0),
                   replaced_generation=manifest.get("replaced_generation"),
                   resumed=bool(diagnostics.get("resumed", False)), started=manifest.get("started"),
                   finished=manifest.get("finished"), durations=dict(manifest.get("durations", {})),
                   warnings=list(diagnostics.get("warnings", [])), file_list=[dict(f) for f in files[:max_files]],
                   file_list_truncated=len(files) > max_files, diagnostics=diagnostics,
                   table=dict(manifest["table"]) if manifest.get("table") else None)

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> CommitSummary:
        """Read the commit task's XCom value back (in a downstream task: ``CommitSummary.from_xcom(summary)``).
        Raises :class:`~airflow_commit_provider.protocol.InvalidOutputSpec` for a value that is not one."""
        if not isinstance(value, Mapping) or VERSION_KEY not in value:
            raise InvalidOutputSpec(f"not a commit summary (no {VERSION_KEY!r}): {type(value).__name__}")
        if value[VERSION_KEY] != VERSION:
            raise InvalidOutputSpec(f"commit summary version {value[VERSION_KEY]!r}; this provider reads "
                                    f"version {VERSION}")
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in value.items() if k in known})

    def to_xcom(self) -> dict[str, Any]:
        """The JSON dict the commit task returns."""
        return {**asdict(self), VERSION_KEY: VERSION}

    def asset_extra(self) -> dict[str, Any]:
        """The ``extra`` of the commit task's asset events (its outlets), emitted only once the data is committed."""
        extra = {"job_id": self.job_id, "job_uuid": self.job_uuid, "app_attempt": self.app_attempt,
                 "generation": self.generation, "output": self.target, "files": self.files, "rows": self.rows,
                 "bytes": self.bytes}
        if self.table is not None:   # the table version / snapshot a consumer should read
            extra["table"] = {k: v for k, v in self.table.items() if k != "already_committed"}
        return extra
