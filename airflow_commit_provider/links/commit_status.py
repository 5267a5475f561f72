"""Extra links on the commit-aware operators: the run's commit-status tab, and the target location.

Both links are relative (no leading slash). Airflow's UI page carries ``<base href="...">`` with the api-server's
base path, so a relative link opens inside Airflow at the right place whatever ``[api] base_url`` is (behind a
reverse proxy too), and the UI treats it as same-origin: it opens in the same browser tab, as part of the UI.
"""

from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import quote, urlparse

from airflow.sdk import BaseOperatorLink

log = logging.getLogger(__name__)

#: Where the plugin's FastAPI app is mounted in the api-server.
URL_PREFIX = "/commit-status"
#: The ``url_route`` of the plugin's DAG-run tab, and of its task-instance tab.
TAB_ROUTE = "commit-status"
TI_TAB_ROUTE = "commit-status-ti"
#: The tab's query parameter that opens its target view (the published files) instead of the job's status.
TARGET_VIEW = "view=target"


def tab_link(dag_id: str, run_id: str) -> str:
    """The DAG run's "Commit status" tab inside Airflow's UI, relative to the UI's base URL."""
    return f"dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/plugin/{TAB_ROUTE}"


def target_link(dag_id: str, run_id: str) -> str:
    """The same tab opened on the target: where the stage writes, its ``_SUCCESS`` and the files it published."""
    return f"{tab_link(dag_id, run_id)}?{TARGET_VIEW}"


class CommitStatusLink(BaseOperatorLink):
    """"Commit status": the DAG run's Commit status tab (job state, attempts, files, rows, timings, next steps)."""

    name = "Commit status"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return tab_link(ti_key.dag_id, ti_key.run_id)


def _s3_endpoint(conn_id: str | None) -> str | None:
    """The connection's custom S3 endpoint (MinIO, moto, Ceph ...), if any; None for AWS itself."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if conn_id:
        try:
            from airflow.sdk import BaseHook

            extra = BaseHook.get_connection(conn_id).extra_dejson or {}
            endpoint = (extra.get("endpoint_url") or (extra.get("service_config") or {}).get("s3", {})
                        .get("endpoint_url") or endpoint)
        except Exception as exc:  # unknown connection here: do not send the user to a console that may be wrong
            log.info("Commit target link: connection %r not readable (%s); linking the commit-status target view",
                     conn_id, exc)
            return "unknown"
    if endpoint and not (urlparse(endpoint).hostname or "").endswith(".amazonaws.com"):
        return endpoint
    return None


class CommitTargetLink(BaseOperatorLink):
    """"Commit target": where the data lands. The AWS S3 console for S3 targets on AWS; for every other target
    (local disk, MinIO / moto or any S3 connection with a custom ``endpoint_url``) the Commit status tab's target
    view, which shows the target and its committed files (the UI does not render ``file://`` links)."""

    name = "Commit target"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        target = str(getattr(operator, "target", "") or "")
        if target.startswith(("s3://", "s3a://")):
            bucket, _, prefix = target.split("://", 1)[1].partition("/")
            conn_id = getattr(operator, "conn_id", None)
            if "@" in bucket:  # s3://conn_id@bucket/... (ObjectStoragePath style)
                conn_id, bucket = bucket.split("@", 1)
            if _s3_endpoint(conn_id) is not None:
                return target_link(ti_key.dag_id, ti_key.run_id)
            return f"https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={quote(prefix.rstrip('/') + '/')}"
        return target_link(ti_key.dag_id, ti_key.run_id)
