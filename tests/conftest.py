"""Shared fixtures. Tests run from the repository root; worker processes import ``tests.*`` from there."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(autouse=True)
def _no_faults_leak() -> None:
    """A fault armed by one test must never fire in another."""
    from airflow_commit_provider.protocol import faults

    os.environ.pop(faults.ENV_VAR, None)
    faults.disarm()
    yield
    os.environ.pop(faults.ENV_VAR, None)
    faults.disarm()
