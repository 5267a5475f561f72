"""Which errors of a stage's tasks Airflow should retry, and which fail the task at once.

A retry helps when the cause can go away by itself: a store that did not answer, throttling, a worker lost. The
protocol's errors listed in :data:`DETERMINISTIC_ERRORS` cannot: a bad specification, a partition column missing
from the data, a non-empty target in ``error`` mode, a refused file name, a configuration that differs from the
job's, a store lacking an operation the committer needs. The same input gives the same error on every try, so
retrying only delays the failure (with Airflow's default 300 s retry delay, by minutes per try). Those fail the
task without retries, as :class:`AirflowFailException` with the same message (the original error is its cause, in
the task log). Everything else, the user's own code included, is retried as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

try:  # the Task SDK's (Airflow 3.2+)
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow 3.1
    from airflow.exceptions import AirflowFailException

from ..protocol.errors import (
    GenerationPurged,
    InvalidOutputSpec,
    JobConfigMismatch,
    OverlappingRun,
    StorageCapabilityError,
)

#: Errors that no retry can cure (InvalidOutputSpec covers the bad input of every kind). An overlap of two runs of
#: one job is refused until someone acts (the message says how): a retry would only refuse again, or, once the
#: other run ended, take the job over behind the author's back; a purged generation's run needs a clear of the whole
#: run (its setup included), which no retry of one task does
DETERMINISTIC_ERRORS = (InvalidOutputSpec, JobConfigMismatch, OverlappingRun, StorageCapabilityError, GenerationPurged)


def is_deterministic(error_name: str | None) -> bool:
    """Whether an error recorded by its class name (a failed job commit's summary) is one of
    :data:`DETERMINISTIC_ERRORS` or a subclass: the same input fails the same way again."""
    pending = list(DETERMINISTIC_ERRORS)
    while pending:
        cls = pending.pop()
        if cls.__name__ == error_name:
            return True
        pending.extend(cls.__subclasses__())
    return False


@contextmanager
def fail_fast_on_deterministic_errors() -> Iterator[None]:
    """Turn a :data:`DETERMINISTIC_ERRORS` error raised inside into :class:`AirflowFailException` (no retry),
    with the same message; let every other exception through unchanged (Airflow retries it)."""
    try:
        yield
    except DETERMINISTIC_ERRORS as exc:
        raise AirflowFailException(f"{type(exc).__name__}: {exc} (not retried: the same input fails the same "
                                   f"way on every try)") from exc
