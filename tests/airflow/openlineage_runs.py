"""Test DAGs run in a process of their own whose OpenLineage events go to a file: the OpenLineage provider decides at
import whether it is enabled (a transport configured), so a run that reports through it needs a fresh interpreter.

Shared by the lineage, audit and composition tests; importing it needs no OpenLineage (a test that reads the
events skips itself when the provider is absent), so the modules using it run on an Airflow without the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ..conftest import DAGS_FOLDER, REPO


def run_code(code: str, **env: str) -> subprocess.CompletedProcess:
    """*code* (dedented) in a fresh interpreter with the checkout importable and *env* added to the environment."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(REPO), **env})


_PRELUDE = """import os, sys
def report(state):
    sys.stdout.flush()
    os.write(1, f"STATE {state}\\n".encode())
"""


def run_dags(module: str, runs: str, events_file: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """*runs* (Python lines using *module*, a module of the test DAGs, each reporting a run with ``report(state)``,
    which prints ``STATE <state>``) in a process whose OpenLineage events go to *events_file* through the file
    transport; the process and the events.

    ``report`` writes its line in one system call: ``print("STATE", state)`` writes its pieces one by one, and the
    OpenLineage client's thread logging to the same stdout landed between them in one CI run."""
    events_file.unlink(missing_ok=True)
    proc = run_code(f"{_PRELUDE}sys.path.insert(0, {str(DAGS_FOLDER)!r})\nimport {module}\n{textwrap.dedent(runs)}",
                    AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "log_file_path": str(events_file),
                                                                 "append": True}),
                    AIRFLOW__OPENLINEAGE__NAMESPACE="commit-tests", **env)
    lines = events_file.read_text().splitlines() if events_file.exists() else []
    return proc, [json.loads(line) for line in lines if line.strip()]
