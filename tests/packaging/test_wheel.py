"""The package as a user installs it: ``python -m build`` makes a wheel and an sdist; the wheel, installed into a
fresh virtual environment outside the checkout (not editable, with ``-c constraints.txt`` so pip resolves from
its cache without backtracking), runs the whole demo: the protocol part and the example DAGs, which the wheel
ships as package data (``airflow_commit_provider/example_dags``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from ..conftest import REPO
from ..support import source_copy

pytestmark = pytest.mark.slow


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}: {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # from a copy: a build writes into the tree it builds, and the compat venv may be building the checkout at once
    source = source_copy(tmp_path_factory.mktemp("source") / "src")
    _run([sys.executable, "-m", "build", "--outdir", out, source], timeout=600)
    return out


def test_build_makes_a_wheel_and_an_sdist_with_the_examples(dist):
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("airflow_commit_provider/example_dags/example_partitioned_write.py",
                 "airflow_commit_provider/example_dags/_demo_data.py",
                 "airflow_commit_provider/plugins/commit_status.py", "airflow_commit_provider/protocol/committer.py",
                 # the Commit status view's built React app: the api-server serves it; installing needs no node
                 "airflow_commit_provider/plugins/ui/dist/commit-status.js"):
        assert name in names, name
    assert not any(n.startswith("tests/") for n in names)
    assert not any("/plugins/ui/" in n and not n.endswith("/dist/commit-status.js") for n in names), \
        [n for n in names if "/plugins/ui/" in n]  # neither the TypeScript source nor node_modules
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "airflow.plugins" in text and "apache_airflow_provider" in text
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
    assert any(m.endswith("airflow_commit_provider/example_dags/example_retry_recover.py") for m in members)


def readme_install_lines() -> list[str]:
    """The README's install commands for an existing deployment, as printed (continuation lines joined): the
    ``pip install`` lines of the bash block under "## Install" (its ``python -m build`` line is the ``dist``
    fixture's command)."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Install"):]
    block = block[block.index("```bash") + len("```bash"):]
    block = block[:block.index("```")].replace("\\\n", " ")
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    return [line for line in lines if line.startswith("pip install")]


@pytest.mark.timeout(3600)  # a cold pip cache downloads Airflow; a warm one installs in a few minutes
def test_installed_wheel_runs_the_demo(dist, tmp_path):
    """The README's install line, run word for word in a deployment that has Airflow already (a fresh venv with
    Airflow installed first), from a folder holding ``dist/`` and ``constraints.txt`` as a checkout does."""
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    t0 = time.monotonic()
    _run([sys.executable, "-m", "venv", venv], timeout=300)
    python = venv / "bin" / "python"
    # --no-compile: Airflow's thousands of modules are byte-compiled on first import instead (about a third of
    # the install time)
    _run([python, "-m", "pip", "install", "-q", "--no-compile", "-c", REPO / "constraints.txt", "apache-airflow"],
         timeout=2400, cwd=tmp_path)
    site = tmp_path / "site"
    (site / "dist").mkdir(parents=True)
    (site / "dist" / wheel.name).symlink_to(wheel)
    (site / "constraints.txt").write_text((REPO / "constraints.txt").read_text())
    [line] = readme_install_lines()
    assert wheel.name in line, f"the README installs {line!r}, the build made {wheel.name}"
    env_path = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "PIP_NO_COMPILE": "1"}
    _run(["bash", "-c", line], cwd=site, env=env_path, timeout=2400)
    _run([python, "-c", "import deltalake, pyiceberg, airflow.providers.openlineage"], cwd=tmp_path)
    assert "inspect" in _run([venv / "bin" / "airflow-commit", "--help"], cwd=tmp_path).stdout
    installed = time.monotonic() - t0
    where = _run([python, "-c", "import airflow_commit_provider as p; print(p.__file__)"], cwd=tmp_path).stdout
    assert where.startswith(str(venv)), where          # the wheel's copy, not the checkout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "COMMIT_"))}
    env["PYTHONPATH"] = ""
    t1 = time.monotonic()
    demo = _run([python, "-m", "airflow_commit_provider.demo", "--out", tmp_path / "demo"], cwd=tmp_path, env=env,
                timeout=1200).stdout
    print(f"wheel installed in a fresh venv in {installed:.0f} s; demo ran in {time.monotonic() - t1:.0f} s")
    assert "4000 rows, 4000 distinct event ids - exactly once" in demo
    for dag in ("example_retry_recover", "example_partitioned_write", "example_downstream_sensor"):
        assert f"{dag}: success" in demo, demo
    assert "See it in the Airflow UI" in demo
    assert "/dags/commit_partitioned_write/runs/" in demo and "/plugin/commit-status" in demo
