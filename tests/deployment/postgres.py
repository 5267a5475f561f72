"""A throwaway PostgreSQL cluster on 127.0.0.1, from Debian's packages, for the deployments' metadata databases.

Both deployments use it, not SQLite: under SQLite's WAL mode a REST call whose transaction read before the
scheduler committed gets "database is locked" at once, whatever the busy timeout (a 500 for a trigger, seen in
CI), and production deployments of Airflow run on PostgreSQL anyway.

PostgreSQL refuses to run as root: as root, the data directory is given to the ``postgres`` user and ``initdb`` /
``pg_ctl`` run as that user. Durability is off (``fsync=off``): the cluster is thrown away with the test session.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from ..support import apt_install, free_port


def ensure_debian_packages(*packages: str) -> None:
    """Install the Debian *packages* (``postgresql``, ``redis-server``) with apt-get if missing (as root)."""
    present = {"postgresql": lambda: bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")),
               "redis-server": lambda: bool(shutil.which("redis-server"))}
    missing = [p for p in packages if not present[p]()]
    if not missing:
        return
    if not apt_install(*missing):
        raise RuntimeError(f"{' and '.join(missing)} missing and not installed: apt-get install -y {' '.join(missing)} "
                           "(as root)")


def pg_bin(name: str) -> str:
    return max(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))


class Postgres:
    """A cluster under *base* (``pg-data``, ``pg-run``) with the user ``airflow`` (trust) and *databases*. The port
    is chosen at construction, so a deployment's environment can name its URL before the cluster starts."""

    def __init__(self, base: Path, databases: tuple[str, ...] = ("airflow",)) -> None:
        self.base, self.databases = base, databases
        self.data = base / "pg-data"
        self.port = free_port()
        self._stop: list[str] | None = None

    def url(self, database: str = "airflow") -> str:
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        ensure_debian_packages("postgresql")
        run = self.base / "pg-run"
        for d in (self.data, run):
            d.mkdir(parents=True)
        as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the postgres user owns the cluster
            for d in (self.base, *self.base.parents):
                if d == Path("/"):
                    break
                if d.stat().st_uid == 0 and not d.stat().st_mode & 0o001:
                    d.chmod(d.stat().st_mode | 0o011)  # traversable (no listing) for the postgres user
            shutil.chown(self.data, "postgres")
            shutil.chown(run, "postgres")
            as_user = ["runuser", "-u", "postgres", "--"]
        subprocess.run([*as_user, pg_bin("initdb"), "-D", str(self.data), "-U", "airflow", "-A", "trust",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True)
        opts = (f"-p {self.port} -k {run} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=300 -c shared_buffers=128MB")
        subprocess.run([*as_user, pg_bin("pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(run / "postgres.log"),
                        "-w", "-t", "120", "start"], check=True, capture_output=True)
        self._stop = [*as_user, pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]
        for database in self.databases:
            subprocess.run([pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", database],
                           check=True, capture_output=True)

    def stop(self) -> None:
        if self._stop is not None:
            subprocess.run(self._stop, capture_output=True)
            self._stop = None
