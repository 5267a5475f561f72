"""A distributed Airflow deployment, started from nothing on 127.0.0.1: PostgreSQL (metadata DB and Celery result
backend) and Redis (broker) from Debian's packages, moto's S3 server, and Airflow's api-server, scheduler,
dag-processor, triggerer and Celery workers (CeleryExecutor).

Each worker has its own private directory (``AIRFLOW_HOME``, its copy of the DAG files, logs, ``TMPDIR``, a scratch
directory); nothing is shared between workers but S3, reached through the Airflow connection ``commit_s3``.

Used by ``tests/deployment/test_celery.py`` (as a pytest fixture) and by ``benchmarks/distributed.py`` (directly).
Installs ``redis-server`` / ``postgresql`` with apt-get when missing (as root; :mod:`.postgres`).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import requests

from ..support import free_port, start_moto
from .conftest import REST_TIMEOUT, Deployment
from .postgres import Postgres, ensure_debian_packages

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = Path(__file__).with_name("celery_dags.py")
CONN_ID = "commit_s3"


def pss_mib(pgid: int) -> float:
    """Proportional set size (MiB) of every process of a process group (a component and its children)."""
    total = 0
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # field 5 of stat: the process group
                continue
            for line in Path(stat).with_name("smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1024


class CeleryDeployment(Deployment):
    """PostgreSQL + Redis + moto + Airflow with CeleryExecutor; the REST helpers are the LocalExecutor fixture's."""

    def __init__(self, base_dir: Path, *, workers: int = 2, concurrency: int = 2, parallelism: int = 8,
                 extra_env: dict[str, str] | None = None, dag_files: tuple[Path, ...] = (DAG_FILE,),
                 executor: str = "CeleryExecutor") -> None:
        self.dir = base_dir
        self.executor = executor  # "LocalExecutor": the same deployment without Redis and workers (a baseline)
        self.home = base_dir / "airflow-home"
        self.dags = self.home / "dags"
        self.n_workers, self.concurrency, self.parallelism = workers, concurrency, parallelism
        self.extra_env = extra_env or {}
        self.dag_files = dag_files
        self.services: dict[str, subprocess.Popen] = {}
        self.components: dict[str, subprocess.Popen] = {}
        self.worker_env: dict[str, dict[str, str]] = {}
        self.bucket = "commit-celery"
        # a database of its own for the Iceberg SQL catalog of cc_iceberg, beside Airflow's
        pg = Postgres(base_dir, databases=("airflow", "iceberg_catalog"))
        self.iceberg_catalog_uri = pg.url("iceberg_catalog")
        super().__init__(free_port(), {}, pg)
        self.procs = []

    # ---------------------------------------------------------------- services
    def _start_redis(self) -> str:
        port = free_port()
        rdir = self.dir / "redis"
        rdir.mkdir()
        self.services["redis"] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(rdir), "--save", "",
             "--appendonly", "no", "--protected-mode", "yes"],
            stdout=open(rdir / "redis.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        self.wait_for(lambda: _pings(client), "redis answers", timeout=60)
        return f"redis://127.0.0.1:{port}/0"

    # ---------------------------------------------------------------- Airflow
    def start(self) -> None:
        celery = self.executor == "CeleryExecutor"
        ensure_debian_packages("postgresql", *(["redis-server"] if celery else []))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dags.mkdir(parents=True)
        for f in self.dag_files:
            shutil.copy(f, self.dags / f.name)
        self.pg.start()
        broker = self._start_redis() if celery else ""
        moto_env: dict[str, str] = {}
        proc, self.s3_url = start_moto(moto_env)
        self.services["moto"] = proc
        self.moto_env = moto_env
        import boto3

        boto3.client("s3", endpoint_url=self.s3_url, aws_access_key_id="testing",
                     aws_secret_access_key="testing-secret-do-not-log",
                     region_name="us-east-1").create_bucket(Bucket=self.bucket)
        conn = json.dumps({"conn_type": "aws", "login": "testing", "password": "testing-secret-do-not-log",
                           "extra": {"endpoint_url": self.s3_url, "region_name": "us-east-1"}})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "COMMIT_"))}
        env.update(moto_env)
        env.update({
            "PYTHONPATH": str(REPO),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.pg.url(),
            "AIRFLOW__CORE__EXECUTOR": self.executor,
            "AIRFLOW__CELERY__BROKER_URL": broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{self.pg.url()}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.concurrency),
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(max(self.parallelism, 16)),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__API_AUTH__JWT_SECRET": "commit-provider-tests-only-" + os.urandom(8).hex(),
            "AIRFLOW__API__SECRET_KEY": "commit-provider-tests-only-" + os.urandom(8).hex(),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            # a worker killed with SIGKILL sends no more heartbeats: its try is failed (and retried) after this
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            # a task message the killed worker had reserved (prefetched, not started) comes back from Redis only
            # after the broker's visibility timeout (hours): its task stays "queued" until the scheduler requeues
            # it, after this (default 600 s; one CI run timed out waiting for exactly that)
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "120",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "10",
            "AIRFLOW_CONN_COMMIT_S3": conn,
            "COMMIT_CELERY_BUCKET": self.bucket,
            "COMMIT_ICEBERG_CATALOG_URI": self.iceberg_catalog_uri,
            **self.extra_env,
        })
        self.env = env
        airflow = str(Path(sys.executable).with_name("airflow"))
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
        commands = {
            "api-server": [airflow, "api-server", "-H", "127.0.0.1", "-p", str(self.port)],
            "scheduler": [airflow, "scheduler", "--skip-serve-logs"],
            "dag-processor": [airflow, "dag-processor"],
            "triggerer": [airflow, "triggerer", "--skip-serve-logs"],
        }
        for name, cmd in commands.items():
            self.components[name] = self._spawn(name, cmd, env, self.home)
        workers = [f"w{i}" for i in range(1, self.n_workers + 1)] if celery else []
        for name in workers:
            self.start_worker(name)
        self.procs = list(self.components.values())
        self._wait_healthy()
        self._login()
        for name in workers:
            self.wait_worker_ready(name)

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], logdir: Path) -> subprocess.Popen:
        log = open(logdir / f"{name}.log", "a")
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(logdir))

    def worker_dir(self, name: str) -> Path:
        return self.dir / f"worker-{name}"

    def start_worker(self, name: str) -> None:
        """A Celery worker with nothing of its own shared: AIRFLOW_HOME, DAG files, logs, TMPDIR, scratch."""
        wdir = self.worker_dir(name)
        home, tmp, scratch = wdir / "home", wdir / "tmp", wdir / "scratch"
        for d in (home / "dags", tmp, scratch):
            d.mkdir(parents=True, exist_ok=True)
        for f in self.dag_files:
            shutil.copy(f, home / "dags" / f.name)
        env = {**self.env, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
               "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"), "TMPDIR": str(tmp),
               "COMMIT_WORKER_NAME": name, "COMMIT_WORKER_SCRATCH": str(scratch)}
        self.worker_env[name] = env
        airflow = str(Path(sys.executable).with_name("airflow"))
        self.components[f"worker-{name}"] = self._spawn(
            "worker", [airflow, "celery", "worker", "--celery-hostname", f"{name}@%h", "--skip-serve-logs",
                       "--concurrency", str(self.concurrency)], env, wdir)
        self.procs = list(self.components.values())

    def wait_worker_ready(self, name: str, timeout: float = 300) -> None:
        """Until the worker logs celery's "<name>@<host> ready." (since its latest start)."""
        log = self.worker_dir(name) / "worker.log"
        start = getattr(self, "_restart_offsets", {}).get(name, 0)

        def ready() -> bool:
            proc = self.components[f"worker-{name}"]
            if proc.poll() is not None:
                raise RuntimeError(f"worker {name} exited with {proc.returncode}; see {log}")
            with open(log, errors="replace") as fh:
                fh.seek(start)
                return any(f"{name}@" in line and " ready." in line for line in fh.read().splitlines())
        self.wait_for(ready, f"celery worker {name} ready", timeout=timeout)

    def kill_worker(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal the worker's whole process group (celery main process, pool processes, task supervisors and
        tasks) and wait until it is gone."""
        proc = self.components[f"worker-{name}"]
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=120)
        if sig != signal.SIGKILL:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def restart_worker(self, name: str) -> None:
        log = self.worker_dir(name) / "worker.log"
        self._restart_offsets = {**getattr(self, "_restart_offsets", {}), name: log.stat().st_size}
        self.start_worker(name)
        self.wait_worker_ready(name)

    def _wait_healthy(self, timeout: float = 600) -> None:
        for p in self.components.values():
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[1:3]} exited with {p.returncode}; see {self.dir}")
        super()._wait_healthy(timeout)

    def _login(self) -> None:
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        token = requests.post(f"{self.base}/auth/token", json={"username": "admin", "password": passwords["admin"]},
                              timeout=REST_TIMEOUT).json()["access_token"]
        self.session.headers["Authorization"] = f"Bearer {token}"

    def memory(self) -> dict[str, float]:
        """PSS (MiB) of each component, children included, and of the services."""
        out = {name: round(pss_mib(p.pid), 1) for name, p in self.components.items() if p.poll() is None}
        out.update({name: round(_pss_pid(p.pid), 1) for name, p in self.services.items() if p.poll() is None})
        out["postgresql"] = round(_pss_of_user_processes("postgres", str(self.pg.data)), 1)
        return out

    def stop(self) -> None:
        self.procs = list(self.components.values())
        super().stop()
        for p in self.services.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
            p.wait(timeout=30)

    # ---------------------------------------------------------------- S3 as the test sees it
    def s3(self):
        import s3fs

        return s3fs.S3FileSystem(key="testing", secret="testing-secret-do-not-log",
                                 client_kwargs={"endpoint_url": self.s3_url, "region_name": "us-east-1"},
                                 use_listings_cache=False, skip_instance_cache=True)


def start_deployment(make, attempts: int = 3) -> CeleryDeployment:
    """``make(n).start()``, again from nothing (new ports, new directory) if a port chosen free was taken by
    another process before a component bound it (machines shared with other test runs)."""
    for n in range(attempts):
        dep = make(n)
        try:
            dep.start()
            return dep
        except Exception:
            dep.stop()
            logs = " ".join(p.read_text(errors="replace")[-4000:] for p in dep.dir.rglob("*.log"))
            if n == attempts - 1 or "address already in use" not in logs.lower():
                raise
    raise AssertionError("unreachable")


def _pss_pid(pid: int) -> float:
    try:
        return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                    if line.startswith("Pss:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _pss_of_user_processes(user: str, needle: str) -> float:
    """PSS (MiB) of the PostgreSQL server: its postmaster (command line naming the data dir) and its children."""
    import pwd

    try:
        uid = pwd.getpwnam(user).pw_uid if os.geteuid() == 0 else os.geteuid()
    except KeyError:
        return 0.0
    parent = None
    procs: dict[int, int] = {}
    for d in glob.glob("/proc/[0-9]*"):
        try:
            if os.stat(d).st_uid != uid:
                continue
            pid = int(d.rsplit("/", 1)[1])
            procs[pid] = int(Path(d, "stat").read_text().rsplit(")", 1)[1].split()[1])
            if needle in Path(d, "cmdline").read_text(errors="replace").replace("\0", " "):
                parent = pid
        except (OSError, ValueError):
            continue
    total = 0
    for pid, ppid in procs.items():
        if parent in (pid, ppid):
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
            except OSError:
                pass
    return total / 1024
