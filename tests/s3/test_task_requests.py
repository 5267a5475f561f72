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
    """Requests by operation (an exclusive PutObject, ``If-None-Match: *``, counted as ``PutObject(create)``), and
    the keys of each."""

    def __init__(self, fs: Any) -> None:
        self.ops: Counter[str] = Counter()
        self.keys: list[tuple[str, str]] = []
        self.fs = fs
        fs.s3.meta.events.register("before-call.s3", self)

    def __call__(self, model: Any = None, params: Any = None, **_: Any) -> None:
        name = model.name
        headers = params.get("headers", {}) if isinstance(params, dict) else {}
        if name == "PutObject" and any(k.lower() == "if-none-match" for k in headers):
            name = "PutObject(create)"
        self.ops[name] += 1
        self.keys.append((name, params.get("url_path", "") if isinstance(params, dict) else ""))

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


def one_task(c: Any) -> Requests:
    """The requests of one typical task attempt (two files) of committer *c*."""
    seen = Requests(c.store.fs)
    try:
        out = run_task_attempt(c, 1, 1, lambda w: w.write(TABLE), max_rows_per_file=100)
    finally:
        seen.close()
    assert out.status == "committed" and len(out.record["files"]) == 2
    return seen


#: what a set-up reads and writes (job record, job directory, the recovery check's missing record, the trace, the
#: earlier tries) and what a commit does (the job directory again, the claim holding the record, the record)
_SETUP_AND_COMMIT = {"GetObject": 2, "ListObjectsV2": 3, "PutObject": 1, "PutObject(create)": 2}
#: per algorithm, for a task of two files: v1 lists its files for the record; v2 too, then moves them (copy,
#: delete) and lists the attempt directory again when it finishes; magic uploads each file as one part and builds
#: the record from the uploads it holds
EXPECTED = {
    1: {**_SETUP_AND_COMMIT, "ListObjectsV2": 4, "PutObject": 3},
    "magic": {**_SETUP_AND_COMMIT, "CreateMultipartUpload": 2, "UploadPart": 2},
    # v2 also looks for visible files its moves would replace (one listing of the root), withdraws the markers
    # above them (one DeleteObjects), copies each file and deletes the sources together, then finds its attempt
    # directory empty with one listing (s3fs's find would HEAD it and list it again)
    2: {**_SETUP_AND_COMMIT, "ListObjectsV2": 7, "PutObject": 3, "CopyObject": 2, "DeleteObjects": 2},
}


@pytest.mark.parametrize("algorithm", [1, 2, "magic"])
def test_task_requests_by_operation(committed_neighbour, algorithm):
    """Request by request, a task: the job record read once at the set-up and not again at the commit when the
    job directory's listing shows it unchanged; no HEAD at all (the application attempt is named in that listing,
    a record is read with one GET); the plan looked up in the same listing."""
    c = committed_neighbour(algorithm)
    seen = one_task(c)
    assert dict(seen.ops) == EXPECTED[algorithm], seen.keys
    assert [op for op, k in seen.keys if k.endswith("/_job.json")] == ["GetObject"], seen.keys
    assert not [k for _, k in seen.keys if "_commit_plan_" in k or k.endswith("/_app.json")], seen.keys


def test_commit_reads_a_changed_job_record_again(committed_neighbour):
    """The commit takes the set-up's job record only when the listing shows the same bytes: once the record has
    changed (here: the generation replaced under a running attempt), it reads it again and refuses the attempt."""
    from airflow_commit_provider.protocol import CommitDenied

    c = committed_neighbour(1)
    _, ta = c.recover_or_setup_task(1, 1)
    assert ta is not None
    record = c.store.read_bytes(c.layout.job_record)
    doc = json.loads(record)
    doc["job_uuid"] = "another-generation"
    c.store.write_bytes(c.layout.job_record, json.dumps(doc).encode())
    with pytest.raises(CommitDenied, match="another-generation"):
        c.commit_task(ta, {})


def test_magic_writes_nothing_per_file_but_its_upload(committed_neighbour):
    """The record comes from the uploads the committer holds: no ``.pending`` description per file, no listing of
    the attempt's directory (which stays empty)."""
    c = committed_neighbour("magic")
    seen = one_task(c)
    assert not [k for _, k in seen.keys if ".pending" in k or "/_temporary/attempt_" in k], seen.keys
    assert seen.ops["CreateMultipartUpload"] == seen.ops["UploadPart"] == 2


def test_an_application_attempt_without_its_entry_is_looked_up(committed_neighbour):
    """An application attempt set up by an earlier release (or whose set-up died between its marker and the
    marker's entry in the job directory) has no ``_app_<n>.json``: its marker is looked up (HEAD), and it is
    still the current one."""
    c = committed_neighbour(1)
    c.store.delete_file(c.layout.app_entry(0))
    seen = one_task(c)
    assert [k for op, k in seen.keys if op == "HeadObject"] == ["/out/_temporary/job/0/_app.json"] * 2, seen.keys


def test_a_numbered_directory_without_a_marker_is_no_application_attempt(committed_neighbour):
    """A zombie of a purged generation may re-create a numbered directory the current generation has not reached
    (here: the trace of its try in ``5/``); without a marker it is no application attempt, and the task sets up and
    commits in the current one."""
    c = committed_neighbour(1)
    c.store.write_bytes(c.layout.attempt_claim(5, 1, 1) + ".started", b"")
    seen = one_task(c)
    assert c.job.current_app_attempt() == 0
    assert c.job.task_record(0, 1, c.job_record().job_uuid) is not None
    assert ("HeadObject", "/out/_temporary/job/5/_app.json") in seen.keys   # looked up: not named in the listing


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


def test_a_task_of_a_dag_run_reads_its_attempts_owner_once(bucket):
    """A committer working for a DAG run (the operators') checks that its run owns the job's current application
    attempt (``protocol/owners.py``): one GetObject of that attempt's marker per task, nothing else more."""
    from airflow_commit_provider.protocol import RunOwner

    root = f"s3://{bucket}/out"
    owner = RunOwner("dag", "manual__2024-05-01")
    make_committer(root, "job", algorithm=1, mode="append", owner=owner).setup_job()
    c = make_committer(root, "job", algorithm=1, mode="append", owner=owner)
    assert run_task_attempt(c, 0, 1, lambda w: w.write(TABLE), max_rows_per_file=100).status == "committed"
    c = make_committer(root, "job", algorithm=1, mode="append", owner=owner)
    c.store.request_counts()
    seen = one_task(c)
    assert dict(seen.ops) == {**EXPECTED[1], "GetObject": EXPECTED[1]["GetObject"] + 1}, seen.keys
    assert [op for op, k in seen.keys if k.endswith("/_app.json")] == ["GetObject"], seen.keys
