"""The commit protocol core: pure Python over fsspec and pyarrow, with no Airflow import.

Hadoop users will recognise it::

    from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt

    committer = FileOutputCommitter("/data/events", "events-2024-01-01", algorithm=1, mode="dynamic",
                                    partition_by=["day"])
    committer.setup_job()
    for task in range(4):
        run_task_attempt(committer, task, attempt=1, produce=lambda w: w.write(table_for(task)))
    manifest = committer.commit_job(expected_tasks=4)   # writes _SUCCESS last
"""

from .committer import FileOutputCommitter, OutputCommitter, make_committer
from .config import CommitConfig, RunOwner, normalize_algorithm
from .errors import (
    AuditFailed,
    CommitDenied,
    CommitFilesGone,
    CommitProtocolError,
    CorruptRecord,
    GenerationPurged,
    InputsChanged,
    InputsClaimed,
    InvalidOutputSpec,
    JobAlreadyCommitted,
    JobConfigMismatch,
    JobIdentityCollision,
    JobIncomplete,
    JobNotSetUp,
    MarkerChanging,
    OverlappingRun,
    OwnedByTable,
    StagedDataExpired,
    StorageCapabilityError,
    TaskInputsChanged,
)
from .job import Job
from .jobsetup import JobContext
from .layout import JobLayout, check_job_id
from .modes import MODES
from .records.success import read_success_marker
from .runner import TaskOutcome, run_task_attempt
from .stores import LocalStore, Store, store_for
from .tasks.context import TaskAttemptContext
from .tasks.writer import TaskAttemptWriter

__all__ = [
    "AuditFailed",
    "MODES", "CommitConfig", "CommitDenied", "CommitFilesGone", "CommitProtocolError", "CorruptRecord", "FileOutputCommitter", "InputsChanged",
    "GenerationPurged", "InputsClaimed", "InvalidOutputSpec",
    "JobAlreadyCommitted", "JobConfigMismatch", "Job", "JobContext", "JobIdentityCollision", "JobIncomplete",
    "JobLayout", "JobNotSetUp", "MarkerChanging", "OverlappingRun", "OwnedByTable", "RunOwner", "make_committer",
    "LocalStore", "OutputCommitter", "StagedDataExpired", "StorageCapabilityError", "Store", "TaskAttemptContext", "TaskAttemptWriter",
    "TaskInputsChanged",
    "TaskOutcome", "check_job_id", "normalize_algorithm", "read_success_marker", "run_task_attempt", "store_for",
]
