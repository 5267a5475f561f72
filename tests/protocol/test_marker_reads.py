"""A verifying read of ``_SUCCESS`` while another job legitimately replaces it: right, or "not ready", never corrupt.

A job commit withdraws the markers, publishes its files, deletes the old ones and writes ``_SUCCESS`` last. A
reader that read the old marker and then listed the directory in the middle of that sees files the marker does
not list: that is a marker changing under the read, not a lying one. ``read_success_marker(verify_files=True)``
re-reads the marker after the listing and accepts only a marker that stayed the same across it; one that changed
is read again (a bounded number of times), one that vanished is :class:`FileNotFoundError`, one still changing
after the bound is :class:`MarkerChanging`. A marker stable across the listing and wrong is :class:`CorruptRecord`.

The outcomes are classified by exception name, not class, so that the same tests run against a version without
:class:`MarkerChanging` (where they fail: it raised :class:`CorruptRecord` for legitimate in-flight commits).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_commit_provider.protocol import CorruptRecord, LocalStore, read_success_marker

from .marker_writer import PausedWriter, commit_one, visible_files

JOBS = 80
NOT_READY = ("FileNotFoundError", "MarkerChanging")
#: safety bound of the reader's loop; it stops when the writer is done, long before this
MAX_POLLS = 1_000_000


def _writer(root: str, mode: str, algorithm: int, jobs: int, started, done, out) -> None:
    """*jobs* jobs one after the other into *root*, each a complete commit with the protocol's own committer."""
    started.wait(timeout=120)
    try:
        for k in range(jobs):
            manifest = commit_one(root, k, mode, algorithm)
            out.put((manifest["job_id"], [(f["path"], f["size"]) for f in manifest["files"]]))
    finally:
        done.set()


def _reader(root: str, dirs: list[str], started, done, out) -> None:
    """Polls every marker of *dirs* with ``verify_files=True`` until the writer is done, then once more; sends the
    outcome counts and every distinct accepted manifest (as ``(dir, job_id, files, retained)``)."""
    outcomes: Counter[str] = Counter()
    accepted: set[tuple] = set()
    errors: list[str] = []

    def poll(d: str) -> None:
        try:
            m = read_success_marker(f"{root}/{d}" if d else root, verify_files=True)
        except Exception as exc:  # noqa: BLE001 - every outcome is counted and judged by the test
            outcomes[type(exc).__name__] += 1
            if isinstance(exc, CorruptRecord) and len(errors) < 5:
                errors.append(f"{type(exc).__name__}: {exc}")
            return
        outcomes["accepted"] += 1
        accepted.add((d, m["job_id"], tuple(sorted((f["path"], f["size"]) for f in m["files"])),
                      tuple(sorted((f["path"], f["size"]) for f in m.get("retained") or []))))

    started.set()
    for _ in range(MAX_POLLS):
        if done.is_set():
            break
        for d in dirs:
            poll(d)
    for d in dirs:  # the writer is done: the last job's markers are stable and must be accepted
        poll(d)
    out.put((dict(outcomes), sorted(accepted), errors))


def _expected(mode: str, jobs: list[tuple[str, list[tuple[str, int]]]]) -> dict[tuple[str, str], tuple]:
    """What each job's markers must say: ``(dir, job_id) -> (files, retained)``, from the files each job
    committed. Overwrite replaces everything, dynamic the partitions a job wrote."""
    visible: dict[str, int] = {}
    out = {}
    for job_id, files in jobs:
        parts = {p.rsplit("/", 1)[0] for p, _ in files}
        if mode == "overwrite":
            visible = {}
        else:
            visible = {p: s for p, s in visible.items() if p.rsplit("/", 1)[0] not in parts}
        visible.update(files)
        ours = set(files)
        out[("", job_id)] = (tuple(sorted(files)), tuple(sorted(set(visible.items()) - ours)))
        if mode == "dynamic":
            for part in parts:
                out[(part, job_id)] = (tuple(sorted(f for f in files if f[0].startswith(part + "/"))), ())
    return out


@pytest.mark.parametrize("mode,algorithm", [("overwrite", 1), ("dynamic", 1), ("dynamic", 2)])
def test_a_reader_polling_while_jobs_replace_the_marker_is_right_or_not_ready(tmp_path, mode, algorithm):
    """A writer process commits JOBS jobs into one target while a reader process polls the markers: no poll raises
    CorruptRecord, and every manifest the reader accepted is exactly what that job committed (its files, and as
    retained the other files visible after it), so an accepted marker was true when it was read."""
    poll_while_jobs_commit(str(tmp_path / "out"), mode, algorithm, JOBS)


def poll_while_jobs_commit(root: str, mode: str, algorithm: int, count: int) -> None:
    """The test above on *root* (a local path or an object store's URL: tests/clouds), with *count* jobs."""
    first = commit_one(root, -1, mode, algorithm)  # a committed target before the reader starts
    ctx = mp.get_context("spawn")
    started, done, jobs_q, reader_q = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    dirs = ["", "day=d0"] if mode == "dynamic" else [""]
    writer = ctx.Process(target=_writer, args=(root, mode, algorithm, count, started, done, jobs_q))
    reader = ctx.Process(target=_reader, args=(root, dirs, started, done, reader_q))
    writer.start()
    reader.start()
    jobs = [jobs_q.get(timeout=300) for _ in range(count)]
    outcomes, accepted, errors = reader_q.get(timeout=300)
    writer.join(60)
    reader.join(60)
    assert writer.exitcode == 0 and reader.exitcode == 0
    print(f"{mode} v{algorithm}: reader outcomes {outcomes}, {len(accepted)} distinct manifests accepted")
    assert outcomes.get("CorruptRecord", 0) == 0, f"{outcomes}: {errors}"
    assert set(outcomes) <= {"accepted", *NOT_READY}, outcomes
    expected = _expected(mode, [(first["job_id"], [(f["path"], f["size"]) for f in first["files"]]), *jobs])
    for d, job_id, files, retained in accepted:
        assert (d, job_id) in expected, f"accepted a marker at {d!r} of {job_id} that job did not write there"
        assert (files, retained) == expected[(d, job_id)], f"the accepted marker of {job_id} at {d!r} lies"
    last = jobs[-1][0]
    assert {(d, job_id) for d, job_id, _, _ in accepted} >= {(d, last) for d in dirs if (d, last) in expected}


# ------------------------------------------------------------------------------------ deterministic interleavings
def tells_truth(root: str, d: str, marker: bytes) -> bool:
    """Whether *marker* (the ``_SUCCESS`` of directory *d*) lists exactly the visible files under *d* now."""
    doc = json.loads(marker)
    listed = {f["path"]: f["size"] for f in doc["files"] + (doc.get("retained") or [])}
    under = os.path.join(root, d) if d else root
    return listed == {(f"{d}/{p}" if d else p): size for p, size in visible_files(under).items()}


def stops_of(tmp: Path, mode: str, algorithm: int) -> int:
    """How many times job 1 stops on its way (the same on every run: the points are fixed, each fires once)."""
    root = str(tmp / "count")
    commit_one(root, 0, mode, algorithm)
    writer, n = PausedWriter(root, mode, algorithm), 0
    while not writer.exited:
        n += 1
        writer.advance()
    assert writer.proc.returncode == 0
    return n


class ListsWhenReleased(LocalStore):
    """The local disk, but its first listing waits until the test releases it: a reader that read ``_SUCCESS``
    at one step of the writer's commit lists the directory, and reads the marker again, at a later step."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reached, self.release, self._first = threading.Event(), threading.Event(), True

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        if self._first:
            self._first = False
            self.reached.set()
            assert self.release.wait(timeout=300), "never released"  # a hang guard, not a timing condition
        return super().list_files(rel, visible_only=visible_only)


class Reader:
    """``read_success_marker(verify_files=True)`` in a thread: it reads the marker at stop *at* (now), then
    waits in its listing until :meth:`finish` at stop *until*."""

    def __init__(self, root: str, d: str, at: int, until: int) -> None:
        self.d, self.at, self.until = d, at, until
        self.store = ListsWhenReleased(os.path.join(root, d) if d else root)
        self.outcome: tuple[str, Any] = ("unfinished", None)
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.store.reached.wait()

    def _run(self) -> None:
        try:
            self.outcome = ("accepted", read_success_marker(self.store, verify_files=True))
        except Exception as exc:  # noqa: BLE001 - judged by the test
            self.outcome = (type(exc).__name__, str(exc))
        finally:
            self.store.reached.set()

    def finish(self) -> tuple[str, Any]:
        self.store.release.set()
        self.thread.join()
        return self.outcome


CASES = [("overwrite", 1), ("overwrite", 2), ("dynamic", 1), ("dynamic", 2)]


@pytest.mark.parametrize("mode,algorithm", CASES)
def test_a_read_spanning_any_two_steps_of_a_commit_is_right_or_not_ready(tmp_path, mode, algorithm):
    """Job A committed; job B runs in a child process stopped at every fault point (after the plan, after the
    withdrawal, after the first move, after the moves, after the deletes, after _SUCCESS, ...). For every pair of
    stops k <= j and every marker directory, a reader reads ``_SUCCESS`` at stop k and lists the directory (and
    re-reads) at stop j. Its answer is exactly what the two states call for: the marker absent at k or at j is
    FileNotFoundError (not ready); present at both is accepted, as the marker of stop j, which tells the truth
    there. Never CorruptRecord: B's commit is legitimate. (Before the re-read, a reader that read A's marker and
    listed after B's moves raised CorruptRecord.)"""
    last = stops_of(tmp_path, mode, algorithm)   # stop `last` is the child having exited: the commit is done
    root = str(tmp_path / "out")
    commit_one(root, 0, mode, algorithm)
    # A writes d0 and d1; dynamic B replaces d1, adds d2 and keeps d0 (whose marker must stay readable throughout)
    dirs = ["", "day=d0", "day=d1", "day=d2"] if mode == "dynamic" else [""]
    writer = PausedWriter(root, mode, algorithm)
    markers: list[dict[str, bytes | None]] = []
    waiting: list[Reader] = []
    wrong: list[str] = []
    judged: Counter[str] = Counter()
    for stop in range(last + 1):
        assert writer.exited == (stop == last), "job B stopped a different number of times than when counted"
        here = {}
        for d in dirs:
            path = os.path.join(root, d, "_SUCCESS")
            here[d] = open(path, "rb").read() if os.path.exists(path) else None
            if here[d] is not None:
                assert tells_truth(root, d, here[d]), f"I9: the marker of {d!r} lies at stop {stop}"
        markers.append(here)
        waiting += [Reader(root, d, stop, until) for d in dirs for until in range(stop, last + 1)]
        for r in [r for r in waiting if r.until == stop]:
            waiting.remove(r)
            kind, value = r.finish()
            then, now = markers[r.at][r.d], here[r.d]
            expected = "FileNotFoundError" if then is None or now is None else "accepted"
            judged["absent when read" if then is None else "withdrawn when listed" if now is None
                   else "stable" if then == now else "replaced"] += 1
            if kind != expected:
                wrong.append(f"{r.d!r} read at stop {r.at}, listed at {stop}: {kind} {value}")
            elif kind == "accepted" and value["job_uuid"] != json.loads(now)["job_uuid"]:
                wrong.append(f"{r.d!r} read at stop {r.at}, listed at {stop}: accepted a marker no longer there")
        if not writer.exited:
            writer.advance()
    assert writer.proc.returncode == 0
    assert not waiting
    print(f"{mode} v{algorithm}: {last} stops, reads {dict(judged)}")
    assert not wrong, f"{len(wrong)} reads wrong, e.g. {wrong[:5]}"
    assert judged["replaced"] > 0 and judged["withdrawn when listed"] > 0, "no read spanned a marker change"


# -------------------------------------------------------------------------------- stable and wrong; never settling
class ChangesDuringListing(LocalStore):
    """The local disk, where each listing first runs *change* (a real write or delete of ``_SUCCESS``): the marker
    changes under every listing, as it would on a target rewritten without pause."""

    def __init__(self, root: str, change) -> None:
        super().__init__(root)
        self.change, self.listings = change, 0

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        self.listings += 1
        self.change(self.listings)
        return super().list_files(rel, visible_only=visible_only)


def _committed(tmp_path: Path, mode: str = "dynamic") -> tuple[str, Path, dict[str, Any]]:
    root = str(tmp_path / "out")
    commit_one(root, 0, mode, 1)
    marker = Path(root) / "_SUCCESS"
    return root, marker, json.loads(marker.read_bytes())


def test_a_marker_changing_under_every_listing_is_not_ready_after_the_bound(tmp_path):
    """Rewritten (validly: another job's labels) during each listing, the marker never settles: after
    VERIFY_ATTEMPTS listings the read gives up with MarkerChanging, which is not a CorruptRecord."""
    from airflow_commit_provider.protocol import MarkerChanging
    from airflow_commit_provider.protocol.records.success import VERIFY_ATTEMPTS

    root, marker, doc = _committed(tmp_path)
    store = ChangesDuringListing(root, lambda n: marker.write_text(json.dumps({**doc, "labels": {"rewrite": n}})))
    with pytest.raises(MarkerChanging, match=f"changed during each of {VERIFY_ATTEMPTS} listings") as caught:
        read_success_marker(store, verify_files=True)
    assert not isinstance(caught.value, CorruptRecord)
    assert store.listings == VERIFY_ATTEMPTS
    # one change, then quiet: the second listing is judged against the new marker, which tells the truth
    store = ChangesDuringListing(root, lambda n: n == 1 and marker.write_text(json.dumps(doc)))
    assert read_success_marker(store, verify_files=True)["labels"] == {}
    assert store.listings == 2


def test_a_marker_withdrawn_during_the_listing_is_not_there(tmp_path):
    root, marker, _doc = _committed(tmp_path)
    store = ChangesDuringListing(root, lambda n: marker.unlink())
    with pytest.raises(FileNotFoundError, match="withdrawn while its directory was listed"):
        read_success_marker(store, verify_files=True)


def test_a_lie_that_appears_during_the_listing_and_stays_is_corrupt(tmp_path):
    """The retry does not launder a lie: a marker replaced during the first listing by one that lists a file
    that is not there, and then stable, is CorruptRecord naming the file."""
    root, marker, doc = _committed(tmp_path)
    lie = {**doc, "files": [*doc["files"], {**doc["files"][0], "path": "day=d0/part-gone.parquet"}]}
    lie["totals"] = {**doc["totals"], "files": doc["totals"]["files"] + 1,
                     "bytes": doc["totals"]["bytes"] + doc["files"][0]["size"],
                     "rows": doc["totals"]["rows"] + (doc["files"][0]["rows"] or 0)}
    store = ChangesDuringListing(root, lambda n: n == 1 and marker.write_text(json.dumps(lie)))
    with pytest.raises(CorruptRecord, match="lists day=d0/part-gone.parquet with .* but the output has no such"):
        read_success_marker(store, verify_files=True)
    assert store.listings == 2


@pytest.mark.parametrize("harm,message", [
    ("delete", "lists day=d0/part-.* with \\d+ bytes, but the output has no such file"),
    ("grow", "lists day=d0/part-.* with \\d+ bytes, but the output has \\d+ bytes"),
    ("add", "does not describe its directory: 1 visible file.*stranger.parquet"),
])
@pytest.mark.parametrize("d", ["", "day=d0"])
def test_a_stable_wrong_marker_is_corrupt(tmp_path, d, harm, message):
    """A committed output harmed by hand (a listed file deleted or grown, a stranger added), the marker left as
    it was: the root's and the partition's verifying reads are CorruptRecord naming the difference."""
    root, _marker, doc = _committed(tmp_path)
    victim = Path(root) / next(f["path"] for f in doc["files"] if f["path"].startswith("day=d0/"))
    if harm == "delete":
        victim.unlink()
    elif harm == "grow":
        victim.write_bytes(victim.read_bytes() + b"x")
    else:
        (victim.parent / "stranger.parquet").write_bytes(b"x")
    with pytest.raises(CorruptRecord, match=message):
        read_success_marker(os.path.join(root, d) if d else root, verify_files=True)
