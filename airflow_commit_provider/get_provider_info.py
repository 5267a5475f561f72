"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

The Commit status plugin is registered once, through the package's ``airflow.plugins`` entry point, and not here
as well: a plugin named in both places is loaded twice wherever Airflow discovers providers eagerly
(``[core] lazy_discover_providers = False``), and the second load is logged ("Plugin 'commit_status' already
registered, skipping") and reported as a plugin import error.
"""

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
        # @task.commit_stage(...): a whole write stage from one TaskFlow function
        "task-decorators": [{"name": "commit_stage",
                             "class-name": "airflow_commit_provider.decorators.commit_stage.commit_stage_task"}],
    }
