"""What one task attempt costs on S3 (moto's server over HTTP), request by request, and the magic committer's memory.

Every request is money and 10-30 ms on a real S3, so the task side reads the job record and the application
attempts once per task, reads a record with one GetObject (no HEAD first, no LIST on a missing key), and the magic
committer writes each ``.pending`` once and does not read it back in the process that wrote it. Counts come from a
botocore hook on the file system's client, so they are what went over the wire.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import make_committer, run_task_attempt

TABLE = pa.table({"x": pa.array(range(200), pa.int64())})


class Requests:
    """Requests by operation, and the keys of each."""

    def __init__(self, fs: Any) -> None:
        self.ops: Counter[str] = Counter()
        self.keys: list[tuple[str, str]] = []
        self.fs = fs
        fs.s3.meta.events.register("before-call.s3", self)

    def __call__(self, model: Any = None, params: Any = None, **_: Any) -> None:
        self.ops[model.name] += 1
        self.keys.append((model.name, params.get("url_path", "") if isinstance(params, dict) else ""))

    def close(self) -> None:
        self.fs.s3.meta.events.unregister("before-call.s3", self)


@pytest.fixture
def committed_neighbour(bucket):
    """A factory: a job on *bucket* set up, one task already committed (so the second is the typical one)."""
    def make(algorithm: Any):
        root = f"s3://{bucket}/out"
        kw = {"part_size": 5 * 2**20} if algorithm == "magic" else {}
        make_committer(root, "job", algorithm=algorithm, mode="append", **kw).setup_job()
        c = make_committer(root, "job", algorithm=algorithm, mode="append", **kw)
        assert run_task_attempt(c, 0, 1, lambda w: w.write(TABLE), max_rows_per_file=100).status == "committed"
        c = make_committer(root, "job", algorithm=algorithm, mode="append", **kw)
        c.store.request_counts()   # connect first: the count is of the task, not of the client's start
        return c
    return make


@pytest.mark.parametrize("algorithm", [1, "magic"])
def test_task_reads_job_state_once_and_records_without_head(committed_neighbour, algorithm):
    c = committed_neighbour(algorithm)
    seen = Requests(c.store.fs)
    try:
        out = run_task_attempt(c, 1, 1, lambda w: w.write(TABLE), max_rows_per_file=100)
    finally:
        seen.close()
    assert out.status == "committed" and len(out.record["files"]) == 2
    job_reads = [k for op, k in seen.keys if k.endswith("/_job.json")]
    # once for the recovery check and the set-up together, once more at the commit (the generation may change)
    assert len(job_reads) == 2, seen.keys
    assert all(op == "GetObject" for op, k in seen.keys if k.endswith("/_job.json")), "a HEAD before the GET"
    # the only HEADs left: the current application attempt's marker (set-up, commit); a missing record is one GET
    assert seen.ops["HeadObject"] == 2, seen.keys
    assert seen.ops["ListObjectsV2"] == 4, seen.keys   # application attempts x2, the task's traces, its files
    # the commit finds out whether a plan is fixed from the job directory's listing it makes anyway
    assert not [k for _, k in seen.keys if "_commit_plan_" in k], seen.keys
    if algorithm == 1:
        assert sum(seen.ops.values()) == 14, seen.ops   # 2 data files + 12 (before: 2 + 25)


def test_magic_pending_written_once_and_not_read_back(committed_neighbour):
    c = committed_neighbour("magic")
    seen = Requests(c.store.fs)
    try:
        out = run_task_attempt(c, 1, 1, lambda w: w.write(TABLE), max_rows_per_file=100)
    finally:
        seen.close()
    assert out.status == "committed"
    pending = [(op, k) for op, k in seen.keys if k.endswith(".pending")]
    assert sorted(op for op, _ in pending) == ["PutObject", "PutObject"], pending   # one per file, nothing read
    assert seen.ops["CreateMultipartUpload"] == seen.ops["UploadPart"] == 2


_WRITE_ONE_FILE = textwrap.dedent("""
    import json, os, sys
    from airflow_commit_provider.protocol import TaskAttemptWriter, make_committer
    root, part, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    def status(key):
        return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) * 1024
    c = make_committer(root, "mem", algorithm="magic", mode="append", part_size=part)
    c.setup_job()
    ta = c.setup_task(0, 1)
    chunk = os.urandom(1 << 20)
    w = TaskAttemptWriter(c, ta)
    with w.open_file(extension="dat") as fh:   # warm: connections, signing, the first buffer freed again
        fh.write(chunk)
    baseline = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")   # resets VmHWM to the current RSS: the peak below is this file's
    with w.open_file(extension="dat") as fh:
        for _ in range(total // len(chunk)):
            fh.write(chunk)
    print(json.dumps({"above": status("VmHWM") - baseline}))
""")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_magic_peak_memory_is_one_part(bucket, moto_server):
    """Writing a 96 MiB file in 8 MiB parts raises the process's peak resident memory by about one part: the
    bytes are copied once, into the part's buffer, and the upload reads that buffer in place."""
    part = 8 * 2**20
    res = subprocess.run([sys.executable, "-c", _WRITE_ONE_FILE, f"s3://{bucket}/mem", str(part), str(96 * 2**20)],
                         capture_output=True, text=True, timeout=600, env={**os.environ})
    assert res.returncode == 0, res.stderr[-2000:]
    above = json.loads(res.stdout.strip().splitlines()[-1])["above"]
    assert above <= 1.4 * part, f"peak {above / 2**20:.1f} MiB above the baseline for {part / 2**20:.0f} MiB parts"
