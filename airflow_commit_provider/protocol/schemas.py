"""One schema per job: the Parquet files of a job's committed tasks share one Arrow schema (DESIGN section 10).

A job's code may change the schema it writes between a failed run and its clear (or between two tries of a task).
Recovery would then publish the failed run's tasks (the old schema) beside the new code's: one output with two
schemas, which readers take apart (pyarrow.dataset and pyarrow.parquet.read_table keep the first file's schema and
drop, or null-fill, the other columns; duckdb's glob either refuses the files or drops the columns, unless asked
for ``union_by_name``). The same rule as for a table holds: recovery recovers only what can still commit.

The writer knows its files' schema, so a task commit records its digest (:attr:`~.records.task.TaskCommitRecord.
schema`), and the check costs the job commit no footer read. Only Parquet written through the writer's ``write`` is
covered: a callable writing files of its own (``open_file``) records no digest, nor do records of earlier releases,
and those are not checked. Partition columns are not in a directory job's files (the writer leaves them out), so
they are not in the digest either.

- v1 and magic: the job commit checks before its plan is fixed, so a refusal changes nothing visible. There is no
  reference schema (unlike a table), so the rule of a table not created yet decides: the schema of the tasks
  committed in the current application attempt (the code of now) wins and the others are refused; every task is
  refused when the current ones disagree too, or none ran now. The refused tasks are recorded
  (:mod:`.records.refused`): the next application attempt runs them again instead of recovering them.
- v2 publishes each task commit at once, so the only point before visibility is the task commit: the generation's
  first task commit fixes the job's schema (``_temporary/<job>/_schema_<job uuid>.json``, exclusively), and one of
  another schema is refused before it publishes (its attempt recorded failed, its files removed), naming the way
  out. The record goes with the job directory (commit, purge) and with the teardown that withdraws the job's
  published files. Its bytes follow from the schema alone, so on S3 the task commit's listing of the job
  directory (which it makes anyway) tells by the ETag that the schema is the same: no request more per task.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import pyarrow as pa

from . import records
from .errors import CorruptRecord, InvalidOutputSpec
from .job import Job
from .records.job import JobRecord
from .records.refused import refused_note
from .records.task import TaskCommitRecord
from .tables.common import SchemaMismatch, describe_difference, parquet_schema

KIND = "job-schema"


def schema_digest(schema: pa.Schema) -> str:
    """A short digest of *schema* as files carry it: names, types, nullability, order; metadata left out (pandas
    writes its index range there, which differs from task to task)."""
    text = schema.to_string(show_field_metadata=False, show_schema_metadata=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(eq=False)
class SchemaGroup:
    """The task records whose files share one schema (*path*: one of those files), by task. *schema* is the Arrow
    schema where it was read (the table path reads footers), *digest* the recorded one (a directory job)."""

    schema: pa.Schema | None
    path: str
    recs: dict[int, TaskCommitRecord] = field(default_factory=dict)
    digest: str | None = None


def file_path(rec: TaskCommitRecord, rel: str) -> str:
    """Where a committed task's file *rel* lies until the job commit publishes it."""
    return f"{rec.data_dir}/{rel}" if rec.data_dir else rel


def without_reference(groups: Sequence[SchemaGroup]) -> list[SchemaGroup]:
    """The groups refused when no schema is given (a directory, a table not created yet): all but the one group
    of the tasks committed in the current application attempt (the code of now); all of them when the current
    tasks disagree among themselves, or none ran now."""
    if len(groups) < 2:
        return []
    now = [g for g in groups if any(not rec.adopted for rec in g.recs.values())]
    keep = now[0] if len(now) == 1 else None
    return [g for g in groups if g is not keep]


def compared(groups: Sequence[SchemaGroup], refused: Sequence[SchemaGroup]) -> tuple[SchemaGroup, SchemaGroup]:
    """The two groups a refusal's message compares: the one kept (else the first) and another."""
    ref = next((g for g in groups if g not in refused), groups[0])
    return ref, next(g for g in groups if g is not ref)


def refuse(scope: Job, job: JobRecord, refused: Iterable[SchemaGroup], error: SchemaMismatch, then: str) -> NoReturn:
    """Record the commits of the *refused* groups' tasks as refused for good (:meth:`~.job.Job.refuse_tasks`) and
    raise *error* saying so: they are re-run on the next clear with the stage's setup, *then*."""
    bad = sorted({t: rec for g in refused for t, rec in g.recs.items()}.values(), key=lambda r: r.task)
    scope.refuse_tasks(job, bad, str(error))
    raise SchemaMismatch(f"{error}. {refused_note(bad, then)}") from error


def check_one_schema(scope: Job, job: JobRecord, recs: Iterable[TaskCommitRecord]) -> None:
    """A directory job's commit, before its plan: one recorded schema among the committed tasks (see the module's
    docstring), else :class:`SchemaMismatch`, the tasks refused recorded (v2: nothing recorded, the files are
    visible; the way out is the purge)."""
    groups: dict[str, SchemaGroup] = {}
    for rec in recs:
        if rec.schema is not None and rec.files:
            group = groups.setdefault(rec.schema, SchemaGroup(None, file_path(rec, rec.files[0].path),
                                                              digest=rec.schema))
            group.recs[rec.task] = rec
    refused = without_reference(list(groups.values()))
    if not refused:
        return
    first, other = compared(list(groups.values()), refused)
    error = SchemaMismatch(f"the Parquet files of task {min(first.recs)} and of task {min(other.recs)} of job "
                           f"{scope.job_id} have different schemas: {_difference(scope, first, other)}")
    if scope.publisher.publishes_at_task_commit:
        raise SchemaMismatch(f"{error}; with algorithm 2 both are visible already. {purge_advice(scope)}")
    refuse(scope, job, refused, error, "with the code of then: one schema with the tasks kept")


def _difference(scope: Job, expected: SchemaGroup, got: SchemaGroup) -> str:
    """The difference in words, from one footer of each group where the files can be read (not a magic job's
    pending uploads); else the digests."""
    try:
        return describe_difference(parquet_schema(scope.store, expected.path), parquet_schema(scope.store, got.path))
    except (OSError, InvalidOutputSpec):
        return f"schema digests {expected.digest} and {got.digest}"


def purge_advice(scope: Job) -> str:
    """The way out when a v2 job's published files and a task of another schema meet."""
    command = shlex.join(["airflow-commit", "abort", scope.store.url(), "--job", scope.job_id, "--purge"])
    return ("Either restore the code that wrote the job's committed tasks, or start the job over with the new "
            f"code: purge it (`{command}`, with --conn-id <the stage's connection> for a remote target; it removes "
            "the files its task commits published), then clear the whole DAG run: every task runs again")


def hold_job_schema(scope: Job, job: JobRecord, task: int, schema: pa.Schema,
                    listing: Mapping[str, str | None]) -> None:
    """v2, before a task commit publishes: fix the generation's schema to *schema* if no task commit did, else
    :class:`SchemaMismatch` when it is another one. *listing*: the job directory's
    (:meth:`~.stores.Store.list_dir_digests`), just made by the task commit."""
    rel = scope.layout.job_schema(job.job_uuid)
    plain = pa.schema([f.remove_metadata() for f in schema])
    ours = records.dumps(KIND, {"job_uuid": job.job_uuid, "schema": schema_digest(plain),
                                "arrow": base64.b64encode(plain.serialize().to_pybytes()).decode()})
    name, where = rel.rsplit("/", 1)[-1], scope.store.url(rel)
    if name in listing and listing[name] == hashlib.md5(ours, usedforsecurity=False).hexdigest():
        return
    for _ in range(3):   # bounded: a record that keeps going between the create and the read is not waited for
        if name not in listing and scope.store.create_exclusive(rel, ours):
            return
        doc = records.read(scope.store, rel, KIND)
        if doc is not None:
            break
        listing = {}   # a teardown withdrew the published tasks meanwhile: nothing published to agree with
    else:
        raise CorruptRecord(f"{where} was created and removed three times during one task commit; try again")
    held = records.get_field(doc, "schema", str, where, KIND)
    if held == schema_digest(plain):
        return
    try:
        theirs = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(records.get_field(doc, "arrow", str, where, KIND))))
    except (ValueError, pa.ArrowInvalid) as exc:
        raise CorruptRecord(f"{where}: field 'arrow' is not a serialised Arrow schema; the record is corrupt") from exc
    raise SchemaMismatch(
        f"task {task}'s files have another schema than those the earlier task commits of job {scope.job_id} "
        f"published (algorithm 2 publishes at each task commit): {describe_difference(theirs, plain)}. Nothing of "
        f"task {task} was published; its attempt is recorded failed. {purge_advice(scope)}")


__all__ = ["SchemaGroup", "check_one_schema", "compared", "file_path", "hold_job_schema", "refuse", "schema_digest",
           "without_reference"]
