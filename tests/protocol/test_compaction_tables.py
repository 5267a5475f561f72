"""Compaction over real tables, killed at every step, and next to a job commit and a reader in other processes.

The tables are this provider's output in every mode with v1 and v2, and directories Spark wrote
(:mod:`.compaction_tables`). Every compaction runs in its own process (:mod:`.compaction_worker`), SIGKILLed at a
fault point and run again; at every moment no row is seen twice and every ``_SUCCESS`` present tells the truth, and
at the end the table holds the rows it held before, each as often (read by pyarrow and by duckdb), with a
``_SUCCESS`` that verifies and nothing left under ``_temporary``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from airflow_commit_provider.protocol import faults, read_success_marker

from . import compaction_tables as tables
from . import compaction_worker as worker
from . import scenario as sc
from .test_compaction import resume, wait_stopped

#: every point a compaction run reaches (recover_task.* only in a retry: see the chained test), fired mid-way for
#: the points reached once per file or claim
STEPS = [p for p in faults.POINTS if not p.startswith(("abort_", "recover_task.", "writer."))] \
    + list(faults.COMPACTION_POINTS)
MIDWAY = {"commit_job.mid_move": 2, "commit_job.mid_delete": 2, "compact.mid_claim": 2, "commit_task.mid_move": 1}


def kill_at(point: str) -> str:
    return f"{point}=kill@{MIDWAY.get(point, 1)}"


def check_any_moment(root: str, before: Counter) -> None:
    """What holds at every moment, crashed or not: no row more often than before (a row may be missing while a
    commit is cut short between deleting the inputs and publishing the merged files), markers true."""
    now = tables.rows(root)
    twice = sorted(r for r, n in now.items() if n > before.get(r, 0))
    assert not twice, f"rows seen more often than before the compaction: {twice[:10]}"
    sc.assert_markers_tell_truth(root)


def check_compacted(root: str, before: Counter) -> None:
    """The end state: the same rows, each as often, for pyarrow and duckdb; a verified root marker; no protocol
    file left under ``_temporary``; every partition that had several small files has one."""
    for read in (tables.rows, tables.rows_duckdb):
        got = read(root)
        assert got == before, (f"{read.__name__}: lost {sorted((before - got).elements())[:10]}, "
                               f"extra {sorted((got - before).elements())[:10]}")
    read_success_marker(root, verify_files=True)
    sc.assert_markers_tell_truth(root)
    assert not os.path.exists(f"{root}/_temporary"), sc.all_files(root)
    per_part = Counter(p.rpartition("/")[0] for p in sc.visible_files(root) if p.endswith(".parquet"))
    assert set(per_part.values()) == {1}, per_part


def expect_killed(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == -signal.SIGKILL, f"the fault did not fire (rc={proc.returncode}):\n{proc.stderr}"


def finish(root: str, attempt: int) -> dict:
    """Run the compaction again (the retry a scheduler makes), to the end."""
    again = worker.run(root, "compact", attempt)
    assert again.returncode == 0, again.stderr
    return json.loads(again.stdout)


def make_table(root: str, name: str) -> None:
    kind, _, rest = name.partition("-")
    if kind == "spark":
        tables.spark_table(root, rest)
    else:
        mode, _, alg = rest.partition("-v")
        tables.provider_table(root, mode, int(alg))


@pytest.mark.parametrize("point", STEPS)
@pytest.mark.parametrize("name", ["provider-dynamic-v1", "spark-by_day_appended"])
def test_compaction_killed_at_every_step_then_rerun(tmp_path, name, point):
    root = str(tmp_path / "table")
    make_table(root, name)
    before = tables.rows(root)
    expect_killed(worker.run(root, "compact", 1, faults=kill_at(point)))
    check_any_moment(root, before)
    finish(root, 2)
    check_compacted(root, before)


@pytest.mark.parametrize("point", ["recover_task.before_record", "recover_task.after_record"])
def test_a_retry_killed_while_it_recovers_the_merges(tmp_path, point):
    """Try 1 commits every merge and dies at its job commit; try 2 dies while adopting them; try 3 finishes."""
    root = str(tmp_path / "table")
    tables.provider_table(root, "append", 2)
    before = tables.rows(root)
    expect_killed(worker.run(root, "compact", 1, faults="commit_job.after_recovery=kill"))
    expect_killed(worker.run(root, "compact", 2, faults=f"{point}=kill@2"))
    check_any_moment(root, before)
    result = finish(root, 3)
    assert result["recovered"] == result["groups"], "no merge ran twice: every one was recovered"
    check_compacted(root, before)


TABLES = [f"provider-{m}-v{a}" for m, a in tables.PROVIDER_TABLES] + [f"spark-{n}" for n in tables.SPARK_TABLES]


@pytest.mark.parametrize("name", TABLES)
def test_compaction_of_a_real_table_killed_between_deletion_and_publication(tmp_path, name):
    """Killed after deleting some inputs and before publishing any merged file: rows are missing (never twice)
    until the rerun publishes them."""
    root = str(tmp_path / "table")
    make_table(root, name)
    before = tables.rows(root)
    expect_killed(worker.run(root, "compact", 1, faults="commit_job.mid_delete=kill@2"))
    check_any_moment(root, before)
    assert sum(tables.rows(root).values()) < sum(before.values()), "the kill fell between deletion and publication"
    finish(root, 2)
    check_compacted(root, before)


def start_reader(root: str, work) -> tuple[subprocess.Popen, str, str]:
    stop, out = str(work / "stop"), str(work / "reader.json")
    proc = subprocess.Popen([sys.executable, "-m", "tests.protocol.compaction_reader", root, stop, out],
                            cwd=worker.REPO, env=worker.worker_env(""), stderr=subprocess.PIPE, text=True)
    return proc, stop, out


def stop_reader(reader: tuple[subprocess.Popen, str, str]) -> dict:
    proc, stop, out = reader
    open(stop, "w").close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    with open(out) as fh:
        return json.load(fh)


NEW_IDS = range(5000, 5000 + 3 * 16)  # what write_job(first_id=5000, two days) writes: 3 tasks x 16 rows


@pytest.mark.parametrize("algorithm,writer_stops_at", [
    (1, "commit_job.after_moves"),       # v1: the writer's files are visible, its markers not written yet
    (2, "commit_job.after_recovery"),    # v2: its committed tasks' files are visible before its job commit
])
def test_compaction_while_a_job_commit_is_under_way(tmp_path, algorithm, writer_stops_at):
    """A job of this provider appending to the compacted partitions is stopped in its commit, its new files
    visible; a compaction then runs from start to end, with a reader reading all along. The compaction leaves
    the writer's files alone (its job is under way), and the writer's commit then finishes with a true marker."""
    root = str(tmp_path / "table")
    tables.provider_table(root, "append", 1)
    before = tables.rows(root)
    reader = start_reader(root, tmp_path)
    writer = worker.start_write(root, "late-append", algorithm, NEW_IDS[0], ("d1", "d2"), writer_stops_at + "=stop")
    wait_stopped(writer)
    ran = worker.run(root, "compact", 1)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["groups"] >= 3, "the compaction merged the settled files of every partition"
    code, _, err = resume(writer)
    assert code == 0, err
    seen = stop_reader(reader)
    assert seen["twice"] == [], seen
    expected = before + Counter((i, ["d1", "d2"][i % 2]) for i in NEW_IDS)
    assert tables.rows(root) == expected == tables.rows_duckdb(root)
    read_success_marker(root, verify_files=True)
    sc.assert_markers_tell_truth(root)
    with open(f"{root}/_commits/late-append.json") as fh:
        written = {f["path"] for f in json.load(fh)["files"]}
    assert written <= set(sc.visible_files(root)), "the compaction left the files of a job under way alone"


def test_a_job_commit_while_the_compaction_is_between_deletion_and_publication(tmp_path):
    """The compaction is stopped mid-deletion; an append job commits into the same partitions from start to end;
    the compaction then finishes. A reader reads all along. Every row once, the last marker true."""
    root = str(tmp_path / "table")
    tables.provider_table(root, "dynamic", 2)
    before = tables.rows(root)
    reader = start_reader(root, tmp_path)
    comp = worker.start(root, "compact", 1, faults="commit_job.mid_delete=stop@2")
    wait_stopped(comp)
    writer = worker.start_write(root, "late-append", 1, NEW_IDS[0], ("d1", "d2"))
    _, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, err
    code, _, err = resume(comp)
    assert code == 0, err
    seen = stop_reader(reader)
    assert seen["twice"] == [], seen
    expected = before + Counter((i, ["d1", "d2"][i % 2]) for i in NEW_IDS)
    assert tables.rows(root) == expected == tables.rows_duckdb(root)
    read_success_marker(root, verify_files=True)
    sc.assert_markers_tell_truth(root)
