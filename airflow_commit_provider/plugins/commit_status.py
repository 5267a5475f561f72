"""The Commit status view, registered with Airflow: a React app (``react_apps``, Airflow 3.1+) on the DAG-run and
task-instance pages, its FastAPI app (:mod:`.app`: the read model as JSON, the bundle), and the operators' extra
links.

The React app is rendered inside Airflow's own UI, with Airflow's React and (from Airflow 3.2 on) Airflow's Chakra
theme; its source is ``ui/`` next to this module, built by Vite into ``ui/dist/commit-status.js`` (package data).
"""

from __future__ import annotations

import hashlib

from airflow.plugins_manager import AirflowPlugin

from ..links.commit_status import TAB_ROUTE, TI_TAB_ROUTE, URL_PREFIX, CommitStatusLink, CommitTargetLink
from .app import BUNDLE, app


def _base_path() -> str:
    """The path of Airflow's ``[api] base_url`` (``""`` at the root; ``/airflow`` behind a proxy path)."""
    from urllib.parse import urlparse

    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="/") or "/"
    return (urlparse(base).path if base.startswith(("http://", "https://")) else base).rstrip("/")


def bundle_url() -> str:
    """Where the UI imports the bundle from: an absolute path (Airflow 3.1 imports it as given, not relative to
    the page's base), under the base URL's path, with the bundle's hash so a new release is never a cached old
    one."""
    digest = hashlib.sha256(BUNDLE.read_bytes()).hexdigest()[:12] if BUNDLE.is_file() else "missing"
    return f"{_base_path()}{URL_PREFIX}/static/commit-status.js?v={digest}"


class CommitStatusPlugin(AirflowPlugin):
    """Registers the view (a tab on DAG-run and task-instance pages), its API and the operators' extra links."""

    name = "commit_status"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Commit status"}]
    react_apps = [
        {"name": "Commit status", "bundle_url": bundle_url(), "destination": "dag_run", "url_route": TAB_ROUTE},
        {"name": "Commit status", "bundle_url": bundle_url(), "destination": "task_instance",
         "url_route": TI_TAB_ROUTE},
    ]
    operator_extra_links = [CommitStatusLink(), CommitTargetLink()]
