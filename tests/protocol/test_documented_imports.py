"""Every name the user guide's operator table documents imports from where the table says: a newcomer's first
import error was a name the docs placed in ``airflow_commit_provider.operators`` that lived elsewhere."""

from __future__ import annotations

import importlib
import re

from ..conftest import REPO


def documented_names() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "user-guide.md").read_text()
    table = text[text.index("| operator | its own parameters |"):]
    table = table[:table.index("\n\n")]
    out = []
    for line in table.splitlines()[2:]:
        first = line.split("|")[1]
        name = re.match(r"\s*`(\w+)`", first).group(1)
        module = re.search(r"from `([\w.]+)`", first)
        out.append((name, module.group(1) if module else "airflow_commit_provider.operators"))
    return out


def test_every_documented_operator_imports_from_the_documented_module():
    names = documented_names()
    assert len(names) >= 9 and ("SuccessMarkerSensor", "airflow_commit_provider.sensors.success_marker") in names
    for name, module in names:
        assert hasattr(importlib.import_module(module), name), f"{name} does not import from {module}"
    assert hasattr(importlib.import_module("airflow_commit_provider.operators"), "commit_stage")
