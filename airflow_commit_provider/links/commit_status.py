"""Extra links on the commit-aware operators: the run's commit-status view, and the target location."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

#: Where the plugin's FastAPI app is mounted in the api-server.
URL_PREFIX = "/commit-status"


def status_path(dag_id: str, run_id: str) -> str:
    return f"{URL_PREFIX}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


class CommitStatusLink(BaseOperatorLink):
    """"Commit status": the plugin's page for this DAG run (job state, attempts, files, rows, timings)."""

    name = "Commit status"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return status_path(ti_key.dag_id, ti_key.run_id)


class CommitTargetLink(BaseOperatorLink):
    """"Commit target": where the data lands (the S3 console for S3 targets, a file URL otherwise)."""

    name = "Commit target"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        target = str(getattr(operator, "target", "") or "")
        if target.startswith(("s3://", "s3a://")):
            bucket, _, prefix = target.split("://", 1)[1].partition("/")
            return f"https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={quote(prefix.rstrip('/') + '/')}"
        return target if "://" in target else f"file://{target}"
