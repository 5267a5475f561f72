"""The ways out a stage's tasks print: what a failed run's teardown leaves, and the command that purges a job
whatever run it belongs to (the advice of a refused overlap, too)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from ..protocol import FileOutputCommitter


def leftover_hint(committer: FileOutputCommitter, conn_id: str | None, target: Any, kept: Sequence[int]) -> str:
    """What a failed run's teardown leaves under ``_temporary/<job>`` (kept for a clear of the run), and the
    command that removes it when the run will not be cleared (Hadoop's abortJob: the target as before the job)."""
    where = committer.store.url(committer.layout.job_dir)
    remove = purge_command(committer, conn_id)
    if kept:
        return (f"kept {len(kept)} committed task(s) ({', '.join(map(str, kept))}) of job {committer.job_id} hidden "
                f"under {where}: clear this DAG run to recover them (their code is not called again). If the run "
                f"will not be cleared, remove them and the job's records with: {remove}")
    return (f"nothing of job {committer.job_id} was committed; its records stay under {where} so that a clear of "
            f"this DAG run continues the job. If the run will not be cleared, remove them with: {remove} "
            f"(purge_on_failure=True on the stage removes them at every failure)")


def purge_command(committer: FileOutputCommitter, conn_id: str | None, force: bool = False) -> str:
    """The ``airflow-commit`` line that purges *committer*'s job (:mod:`..cli`), quoted for a shell (*force*: for
    a job whose run Airflow still calls running, which the command refuses without it)."""
    return abort_command(committer.store.url(), committer.job_id, conn_id, force=force)


def abort_command(target: str, job_id: str, conn_id: str | None, purge: bool = True, force: bool = False) -> str:
    """The ``airflow-commit abort`` line for job *job_id* at *target* (a URL; ``--purge``: its committed tasks go
    too), quoted for a shell."""
    return cli_command("abort", target, conn_id, "--job", job_id, *(["--purge"] if purge else []),
                       *(["--force"] if force else []))


def cli_command(command: str, target: str, conn_id: str | None, *options: str) -> str:
    """An ``airflow-commit`` line (:mod:`..cli`), quoted for a shell, with the connection that reaches *target*:
    a line printed without it fails on a remote target when followed as printed."""
    return shlex.join(["airflow-commit", command, target, *options, *(["--conn-id", conn_id] if conn_id else [])])
