"""The protocol core imports without Airflow; the provider is registered; the protocol demo runs."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

from ..conftest import REPO


def test_protocol_does_not_import_airflow():
    code = "import sys, airflow_commit_provider.protocol; assert 'airflow' not in sys.modules, 'airflow imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_provider_entry_point():
    eps = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_commit_provider")]
    assert len(eps) == 1
    info = eps[0].load()()
    assert info["package-name"] == "airflow-commit-provider"


def test_protocol_demo_kills_a_worker_and_recovers(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "airflow_commit_provider.demo", "--protocol-only", "--out",
                           str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "SIGKILLed midway" in proc.stdout
    assert proc.stdout.count("(user code ran: False)") == 4
    assert "4000 rows, 4000 distinct event ids - exactly once" in proc.stdout
