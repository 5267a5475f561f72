"""Helpers shared by the tests, the fault matrix and the benchmarks: free ports and moto's S3 server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """moto's S3 server on a free 127.0.0.1 port, answering; returns the process and its URL. With *env*, the
    process environment gets credentials and ``AWS_ENDPOINT_URL_S3`` pointing at it (callers pass os.environ)."""
    import requests

    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            requests.get(url, timeout=1)
            break
        except requests.RequestException:
            time.sleep(0.1)
    if env is not None:
        env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-log",
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": url})
    return proc, url


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

