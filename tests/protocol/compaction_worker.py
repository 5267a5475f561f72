"""One compaction run in its own process, as an Airflow worker runs ``CompactOutputOperator``; or one write job.

``python -m tests.protocol.compaction_worker ROOT JOB ATTEMPT TARGET_SIZE``: exits 0 and prints the result as
JSON, or exits :data:`REFUSED` and prints ``<error class>: <message>`` on stderr when the protocol refused (any
:class:`CommitProtocolError`). ``... write ROOT JOB ALGORITHM FIRST_ID DAY[,DAY...]``: an append job of this provider
(:func:`.compaction_tables.write_job`). Fault points come from ``COMMIT_PROVIDER_FAULTS``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFUSED = 3


def command(root: str, job: str, attempt: int, target_size: int = 10**6) -> list[str]:
    return [sys.executable, "-m", "tests.protocol.compaction_worker", root, job, str(attempt), str(target_size)]


def run(root: str, job: str, attempt: int, target_size: int = 10**6, faults: str = "",
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command(root, job, attempt, target_size), cwd=REPO, capture_output=True, text=True,
                          env=worker_env(faults, env), timeout=300)


def start(root: str, job: str, attempt: int, target_size: int = 10**6, faults: str = "") -> subprocess.Popen:
    return subprocess.Popen(command(root, job, attempt, target_size), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=worker_env(faults))


def start_write(root: str, job: str, algorithm: int, first_id: int, days: tuple[str, ...],
                faults: str = "") -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.protocol.compaction_worker", "write", root, job, str(algorithm),
           str(first_id), ",".join(days)]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=worker_env(faults))


def overlapping_compactions_one_commits(root: str) -> None:
    """A compaction stopped after its plan while a second one over the same files runs: the second is refused
    naming the first, and the first, resumed, commits."""
    from ..support import resume, wait_stopped

    first = start(root, "compact-first", 1, faults="compact.after_plan=stop")
    wait_stopped(first)
    second = run(root, "compact-second", 1)
    assert second.returncode == REFUSED and "compact-first" in second.stderr, second.stderr
    code, _, err = resume(first)
    assert code == 0, err


def worker_env(faults: str, env: dict[str, str] | None = None) -> dict[str, str]:
    import os

    out = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
    out.pop("COMMIT_PROVIDER_FAULTS", None)
    if faults:
        out["COMMIT_PROVIDER_FAULTS"] = faults
    return out


def main(argv: list[str]) -> int:
    from airflow_commit_provider.protocol import CommitProtocolError, FileOutputCommitter
    from airflow_commit_provider.protocol.maintenance.compaction import compact

    if argv[0] == "write":
        from .compaction_tables import write_job

        write_job(argv[1], argv[2], "append", int(argv[3]), int(argv[4]), tuple(argv[5].split(",")))
        return 0
    root, job, attempt, target = argv[0], argv[1], int(argv[2]), int(argv[3])
    try:
        result = compact(FileOutputCommitter(root, job, algorithm=1, mode="append"), attempt, target)
    except CommitProtocolError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return REFUSED
    print(json.dumps({k: v for k, v in result.items() if k != "files"}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
