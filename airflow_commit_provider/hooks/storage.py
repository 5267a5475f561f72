"""Resolve an output root (path, URL or ObjectStoragePath) and an Airflow connection into a protocol store.

S3 goes through the Amazon provider's connection (``ObjectStoragePath(url, conn_id=...)``), so credentials and
``endpoint_url`` come from the connection and never from task arguments, logs or manifests. Google Cloud Storage
and Azure read their connections (``google_cloud_platform``: :func:`gcs_options`; ``wasb``: :func:`azure_options`)
themselves, so they need gcsfs or adlfs, not the Google or Microsoft provider and their dependencies.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

from airflow.sdk import BaseHook, ObjectStoragePath

from ..protocol import CommitConfig, FileOutputCommitter, InvalidOutputSpec, Store, store_for
from ..protocol.layout import COMMITS
from ..protocol.paths import split_partition_suffix
from ..protocol.stores import AZURE_SCHEMES, GCS_SCHEMES, target_scheme
from ..protocol.tables import TableTarget
from ..protocol.waiting import awaited_manifest


class CommitStorageHook(BaseHook):
    """The store behind an output root; *conn_id* names the Airflow connection for remote file systems."""

    conn_name_attr = "conn_id"
    hook_name = "Commit protocol storage"

    def __init__(self, conn_id: str | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id

    def get_store(self, target: Any, *, durable: bool = True) -> Store:
        """The store of *target*; *durable* (local disks) as in :func:`~..protocol.stores.store_for`."""
        if isinstance(target, ObjectStoragePath):
            return self._from_object_storage(target, durable)
        if not isinstance(target, str) or not target.strip():
            raise InvalidOutputSpec(f"target must be a path, a URL or an ObjectStoragePath, got {target!r}")
        if target_scheme(target) in GCS_SCHEMES + AZURE_SCHEMES:
            return self._cloud_store(target, self.conn_id)
        if "://" in target and not target.startswith("file://"):
            return self._from_object_storage(ObjectStoragePath(target, conn_id=self.conn_id), durable)
        if self.conn_id:
            self.log.info("conn_id %r ignored for the local path %s", self.conn_id, target)
        return store_for(target.removeprefix("file://"), durable=durable)

    def make_committer(self, target: Any, job_id: str, config: CommitConfig,
                       table: TableTarget | None = None) -> FileOutputCommitter:
        """The committer of job *job_id* on *target*: the hook owns the store and the connection behind it, so the
        operators, the maintenance operators and the plugin all get their committers here. With *table* (a Delta
        or Iceberg table) the store is the table's data root and job commit publishes into the table."""
        store = self.get_store(table.data_root if table is not None else target, durable=config.durable)
        return FileOutputCommitter(store, job_id, config, table=table)

    def delta_storage_options(self, location: str) -> dict[str, str]:
        """delta-rs's storage options for a Delta table at *location*: for ``s3://`` with a connection, the
        credentials, region and ``endpoint_url`` of that Amazon connection (the same as the stage's files go
        through), so the table's log and its data files are written with one identity; otherwise none (a local
        table; or S3 without a connection: delta-rs reads the environment, as boto does).

        Commits are made safe on S3 by conditional puts: delta-rs writes each log entry with ``If-None-Match: *``
        (``conditional_put=etag``: delta-rs 1.x's default for S3, set here so a changed default cannot weaken it;
        with it disabled delta-rs refuses to commit at all), the same exclusive create the protocol's own records
        need; no locking provider, never ``AWS_S3_ALLOW_UNSAFE_RENAME``."""
        s3 = self._s3_identity(location)
        if s3 is None:
            return {}
        keys = {"key": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN",
                "region": "AWS_REGION", "endpoint": "AWS_ENDPOINT_URL"}
        options = {keys[k]: v for k, v in s3.items()}
        if s3.get("endpoint", "").startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
        options["conditional_put"] = "etag"
        return options

    def iceberg_file_io_options(self, warehouse: str | None) -> dict[str, str]:
        """pyiceberg's S3 file IO properties (``s3.access-key-id`` ...) for an Iceberg table whose warehouse is
        *warehouse*: for ``s3://`` with a connection, that Amazon connection's identity, as for the stage's files;
        otherwise none. Catalog properties given explicitly win over these."""
        s3 = self._s3_identity(warehouse)
        if s3 is None:
            return {}
        keys = {"key": "s3.access-key-id", "secret": "s3.secret-access-key", "token": "s3.session-token",
                "region": "s3.region", "endpoint": "s3.endpoint"}
        return {keys[k]: v for k, v in s3.items()}

    def _s3_identity(self, location: str | None) -> dict[str, str] | None:
        """The credentials (``key``, ``secret``, ``token``), ``region`` and ``endpoint`` of the connection for an
        ``s3://`` *location*, or ``None`` (no connection, or not S3). The Amazon hook masks the secret key and
        the token in task logs; none of them is logged here."""
        if not self.conn_id or not str(location or "").startswith(("s3://", "s3a://")):
            return None
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        self._check_connection(self.conn_id)
        hook = S3Hook(aws_conn_id=self.conn_id)
        creds = hook.get_credentials()
        found = {"key": creds.access_key, "secret": creds.secret_key, "token": creds.token,
                 "region": hook.conn_region_name, "endpoint": hook.conn_config.get_service_endpoint_url("s3")}
        return {k: v for k, v in found.items() if v}

    def committed_manifest(self, target: Any, *, job_id: str | None = None,
                           verify_files: bool = False) -> dict[str, Any] | None:
        """The manifest of the commit a reader of *target* waits for (with *job_id*: that job's newest finished
        commit there, from its commit history even when a later commit replaced its marker), or ``None`` while
        there is none: :func:`~..protocol.waiting.awaited_manifest` decides, for the sensor's poke and the
        deferrable trigger alike. A marker a newer job is replacing is ``None`` too, not an error; a corrupt one
        raises :class:`CorruptRecord`, files of the job a later commit replaced :class:`CommitFilesGone`."""
        awaited = awaited_manifest(self.get_store(target), lambda: self.history_root(target), job_id=job_id,
                                   verify_files=verify_files)
        if awaited.why:
            self.log.info("%s", awaited.why)
        return awaited.manifest

    def history_root(self, target: Any) -> tuple[Store, str] | None:
        """The store of the output root whose commit logs (``_commits``) tell *target*'s history -- *target* itself,
        or for a partition directory (``.../day=2024-01-01``) the root above it -- and *target*'s partition under
        it (``""``: the root); ``None`` while neither has a commit log (nothing committed yet)."""
        text = str(target)
        root, partition = split_partition_suffix(text)
        for candidate, part in ((text, ""), (root, partition)) if partition else ((text, ""),):
            store = self.get_store(target if candidate == text else candidate)
            if store.list_dir(COMMITS):
                return store, part
        return None

    def _cloud_store(self, target: str, conn_id: str | None) -> Store:
        """A ``gs://`` or ``abfs://`` target's store: credentials (and project, endpoint) from *conn_id*, or,
        without a connection, the client library's own defaults (the machine's identity)."""
        options: dict[str, Any] = {}
        if conn_id:
            self._check_connection(conn_id)
            conn = BaseHook.get_connection(conn_id)
            gcs = target_scheme(target) in GCS_SCHEMES
            kinds = GCS_CONN_TYPES if gcs else AZURE_CONN_TYPES
            if conn.conn_type and conn.conn_type not in kinds:
                raise InvalidOutputSpec(f"connection {conn_id!r} is of type {conn.conn_type!r}; a "
                                        f"{target_scheme(target)}:// target needs one of type "
                                        f"{' or '.join(map(repr, kinds))}")
            options = gcs_options(conn.extra_dejson) if gcs else \
                azure_options(conn.conn_type, conn.host, conn.login, conn.password, conn.extra_dejson)
        return store_for(target, storage_options=options)

    def _from_object_storage(self, path: ObjectStoragePath, durable: bool = True) -> Store:
        conn_id = _conn_id_of(path) or self.conn_id
        if (path.protocol or "") in GCS_SCHEMES + AZURE_SCHEMES:
            return self._cloud_store(f"{path.protocol}://{path.path}", conn_id)
        if conn_id:
            self._check_connection(conn_id)
            path = ObjectStoragePath(str(path), conn_id=conn_id)
        protocol = path.protocol or "file"
        if protocol in ("file", "local"):
            return store_for(path.path, durable=durable)
        try:
            fs = path.fs
        except Exception as exc:
            raise InvalidOutputSpec(f"cannot open a {protocol} file system for {_redact(path)} "
                                    f"(connection {conn_id!r}): {type(exc).__name__}: {exc}") from exc
        return store_for(f"{protocol}://{path.path}", fs=fs)

    @staticmethod
    def _check_connection(conn_id: str) -> None:
        from airflow.sdk.exceptions import AirflowRuntimeError

        try:
            BaseHook.get_connection(conn_id)
        except AirflowRuntimeError as exc:
            raise InvalidOutputSpec(f"Airflow connection {conn_id!r} is not defined: {exc}") from None
        except Exception as exc:  # AirflowNotFoundException in some code paths
            if "not defined" in str(exc) or "NotFound" in type(exc).__name__:
                raise InvalidOutputSpec(f"Airflow connection {conn_id!r} is not defined") from None
            raise


def gcs_options(extra: dict[str, Any]) -> dict[str, Any]:
    """gcsfs's options from a ``google_cloud_platform`` connection's extra (either spelling: ``project`` or
    ``extra__google_cloud_platform__project``): ``keyfile_dict`` (a service account key, as JSON or a dict) or
    ``key_path`` (a key file on every worker) as the token, else ``token`` (e.g. ``"anon"``, or ``"google_default"``),
    else the machine's default credentials; ``project``; and ``endpoint_url`` (an emulator, a private endpoint).
    The key itself goes to gcsfs only, never to a log or a manifest."""
    def get(name: str) -> Any:
        value = extra.get(name, extra.get(f"extra__google_cloud_platform__{name}"))
        return value if value not in ("", None) else None

    options: dict[str, Any] = {}
    keyfile = get("keyfile_dict")
    if keyfile is not None:
        try:
            options["token"] = json.loads(keyfile) if isinstance(keyfile, str) else dict(keyfile)
        except (TypeError, ValueError):
            raise InvalidOutputSpec("the connection's keyfile_dict is not a JSON object (a service account key); "
                                    "give the key's JSON, or key_path") from None
    elif get("key_path") is not None:
        options["token"] = get("key_path")
    elif get("token") is not None:
        options["token"] = get("token")
    for name in ("project", "endpoint_url"):
        if get(name) is not None:
            options[name] = get(name)
    return options


#: the connection types whose fields :func:`gcs_options` and :func:`azure_options` know
GCS_CONN_TYPES = ("google_cloud_platform",)
AZURE_CONN_TYPES = ("wasb", "adls")
#: the extra's fields that :func:`azure_options` lays over what the connection's fields gave (an empty value removes
#: one), as Airflow's own ``abfs://`` file system reads them (the Microsoft Azure provider's ``fs/adls.py``)
AZURE_EXTRA_FIELDS = ("account_name", "account_key", "sas_token", "tenant_id", "managed_identity_client_id",
                      "workload_identity_client_id", "workload_identity_tenant_id", "anon", "account_host")


def azure_options(conn_type: str | None, host: str | None, login: str | None, password: str | None,
                  extra: dict[str, Any]) -> dict[str, Any]:
    """adlfs's options from a ``wasb`` or ``adls`` connection, read the way Airflow's own ``abfs://`` file system
    reads it (so one connection serves an ``ObjectStoragePath`` and this provider alike; the Microsoft Azure
    provider need not be installed): the extra's ``connection_string`` alone if there is one; else the account (the
    host's first label, or the login), with a ``tenant_id`` the login and password as a service principal, without
    one the password as the account key; then the extra's :data:`AZURE_EXTRA_FIELDS` over those. Nothing given, adlfs
    takes ``DefaultAzureCredential`` (a managed identity, workload identity on AKS). No key goes to a log."""
    kind = conn_type or "wasb"

    def get(name: str) -> Any:
        return extra[name] if name in extra else extra.get(f"extra__{kind}__{name}")

    if get("connection_string"):
        return {"connection_string": get("connection_string")}
    options: dict[str, Any] = {}
    named = urlparse(host if host and "://" in host else f"//{host or ''}").hostname
    from_host = named.split(".", 1)[0] if named else None
    account = (from_host or login) if kind == "adls" else (from_host if "." in (host or "") else login or from_host)
    if account:
        options["account_name"] = account
    if get("tenant_id"):
        options.update({k: v for k, v in (("client_id", login), ("client_secret", password)) if v})
    elif password:
        options["account_key"] = password
    for name in AZURE_EXTRA_FIELDS:
        value = get(name)
        if value == "":
            options.pop(name, None)
        elif value is not None:
            options[name] = value
    return options


def _redact(path: ObjectStoragePath) -> str:
    """The path without any user-info part (an ``s3://conn@bucket`` form names a connection, not a secret, but
    URLs can carry credentials)."""
    return f"{path.protocol}://{path.path}"


def _conn_id_of(path: ObjectStoragePath) -> str | None:
    """The connection id a path carries (``s3://conn_id@bucket/...`` or ``conn_id=``): the ``conn_id`` attribute on
    Airflow 3.3, only its storage options on 3.1 (where the attribute raises AttributeError)."""
    try:
        return path.conn_id
    except AttributeError:
        return (getattr(path, "storage_options", None) or {}).get("conn_id")
