"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from . import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-commit-provider",
        "name": "Commit Protocol",
        "description": "Exactly-once, crash-safe file output: Hadoop's commit protocol for Airflow write stages.",
        "versions": [__version__],
        "extra-links": [
            "airflow_commit_provider.links.commit_status.CommitStatusLink",
            "airflow_commit_provider.links.commit_status.CommitTargetLink",
        ],
        "plugins": [{"name": "commit_status",
                     "plugin-class": "airflow_commit_provider.plugins.commit_status.CommitStatusPlugin"}],
    }
