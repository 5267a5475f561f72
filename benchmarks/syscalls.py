"""The ``syscalls`` part of :mod:`benchmarks.task_side`: one task attempt of the one-file shape under ``strace -f``
(a child process; the system calls between two marker calls, over *n* tasks, divided by *n*), by what they do,
plain pyarrow beside it. Skipped, saying so, when ``strace`` is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


_STRACE_CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {repo!r})
    from benchmarks.task_side import table_of, plain_one_file
    from airflow_commit_provider.protocol import make_committer, run_task_attempt
    kind, root, n, durable = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    table = table_of(1000)
    def ours(t):
        c = make_committer(root, "bench", mode="append", durable=durable)
        assert run_task_attempt(c, t, 1, lambda w: w.write(table)).status == "committed"
    if kind == "ours":
        make_committer(root, "bench", mode="append", durable=durable).setup_job()
        ours(0)   # warm: every import and lazy initialisation before the marker
        step = ours
    else:
        import pyarrow.parquet as pq
        os.makedirs(root)
        plain_one_file(root + "-warm", 1, table)
        def step(t):
            pq.write_table(table, f"{{root}}/part-{{t:05d}}.parquet", compression="snappy")
    os.path.exists("/__bench_mark_start__")
    for t in range(1, n + 1):
        step(t)
    os.path.exists("/__bench_mark_end__")
""")

_SYSCALL = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?([a-z_0-9]+)\((.*)")


def strace_counts(kind: str, n: int, durable: bool, where: str) -> dict[str, float]:
    """System calls per task attempt between the two markers, by what they do."""
    base = tempfile.mkdtemp(prefix="bench-strace-", dir=where)
    try:
        trace = f"{base}/trace"
        code = _STRACE_CHILD.format(repo=str(HERE.parent))
        subprocess.run(["strace", "-f", "-qq", "-o", trace, sys.executable, "-c", code, kind, f"{base}/out", str(n),
                        "1" if durable else "0"], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        lines = Path(trace).read_text(errors="replace").splitlines()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    start = next(i for i, ln in enumerate(lines) if "__bench_mark_start__" in ln)
    end = next(i for i, ln in enumerate(lines) if "__bench_mark_end__" in ln)
    counts: Counter[str] = Counter()
    for ln in lines[start + 1:end]:
        m = _SYSCALL.match(ln)
        if m is None:   # "<... resumed>" halves of calls interrupted by another thread's
            continue
        name, args = m.groups()
        counts["syscalls"] += 1
        if name in ("open", "openat", "creat") and ("O_CREAT" in args or name == "creat"):
            counts["creates"] += 1
        elif name in ("mkdir", "mkdirat"):
            counts["mkdir"] += 1
        elif name == "rmdir" or (name == "unlinkat" and "AT_REMOVEDIR" in args):
            counts["rmdir"] += 1
        elif name in ("link", "linkat", "symlink", "symlinkat"):
            counts["links"] += 1
        elif name in ("rename", "renameat", "renameat2"):
            counts["renames"] += 1
        elif name in ("unlink", "unlinkat"):
            counts["unlinks"] += 1
        elif name in ("fsync", "fdatasync"):
            counts["fsyncs"] += 1
        elif name in ("getdents64", "getdents"):
            counts["listings (getdents)"] += 1
    return {k: v / n for k, v in counts.items()}


def bench_syscalls(n: int) -> list[dict[str, Any]]:
    if shutil.which("strace") is None:
        return [{"bench": "system calls per task attempt", "committer": "skipped: strace is not installed"}]
    out = []
    for fs, where in (("disk", tempfile.gettempdir()),):
        for name, kind, durable in (("plain pyarrow", "plain", False), ("ours v1 durable=False", "ours", False),
                                    ("ours v1 (durable)", "ours", True)):
            out.append({"bench": "system calls per task attempt (strace -f)", "fs": fs, "committer": name,
                        **strace_counts(kind, n, durable, where)})
    return out
