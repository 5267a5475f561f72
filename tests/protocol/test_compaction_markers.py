"""A compaction gives back the partition markers it withdrew: real local files, a dynamic job's per-partition
``_SUCCESS``, compactions in their own processes (killed, stopped, run again), every row read by pyarrow from the
files a partition's marker lists.

The table (:func:`marker_table`): a dynamic job over d0, d1, d2 (three small files and a ``_SUCCESS`` each), then
an append into d2 and d3 (it withdrew d2's marker; d3 never had one). A compaction merges every partition; after
it the partitions whose marker existed (d0, d1) have one again, describing the merged file, and d2, d3 have none.
Before the fix no partition marker came back: a sensor waiting on ``day=d0/_SUCCESS`` waited forever.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import read_success_marker

from . import compaction_tables as tables
from . import compaction_worker as worker
from . import scenario as sc
from .test_compaction import resume, wait_stopped

MARKED = ("day=d0", "day=d1")


def marker_table(root: str) -> Counter[tuple[int, str]]:
    """The table above; returns its rows (``(id, day)``, how often)."""
    tables.write_job(root, "w0", "dynamic", 1, 0, ("d0", "d1", "d2"))
    tables.write_job(root, "w1", "append", 1, 1000, ("d2", "d3"))
    assert sc.marker_dirs(root) == ["", *MARKED]
    return tables.rows(root)


def rows_via_marker(root: str, partition: str) -> Counter[tuple[int, str]]:
    """What a reader that trusts the partition's marker reads: exactly the files it lists (verified first)."""
    manifest = read_success_marker(os.path.join(root, partition), verify_files=True)
    listed = [f["path"] for f in manifest["files"] + manifest["retained"]]
    day = partition.partition("=")[2]
    return Counter((i, day) for p in listed for i in pq.read_table(os.path.join(root, p)).column("id").to_pylist())


def check_markers_back(root: str, before: Counter[tuple[int, str]], job: str = "compact") -> None:
    """Each partition that had a marker has one again, written by the compaction *job*: it lists exactly the
    partition's visible Parquet files, and reading them gives the partition's rows, each once. No other
    partition got one; the root marker verifies; every row is there once."""
    assert sc.marker_dirs(root) == ["", *MARKED]
    for part in MARKED:
        manifest = read_success_marker(os.path.join(root, part), verify_files=True)
        assert (manifest["partition"], manifest["job_id"]) == (part, job)
        assert part in manifest["diagnostics"]["markers_restored"]
        listed = {f["path"] for f in manifest["files"] + manifest["retained"]}
        assert listed == {p for p in sc.visible_files(root) if p.startswith(part + "/") and p.endswith(".parquet")}
        assert len(manifest["files"]) == 1 and not manifest["retained"], "its small files were merged into one"
        expected = Counter({r: n for r, n in before.items() if r[1] == part.partition("=")[2]})
        assert rows_via_marker(root, part) == expected
        assert manifest["totals"]["rows"] == sum(expected.values())
    root_marker = read_success_marker(root, verify_files=True)
    assert root_marker["diagnostics"]["markers_restored"] == list(MARKED)
    assert tables.rows(root) == before == tables.rows_duckdb(root)
    sc.assert_markers_tell_truth(root)
    assert not os.path.exists(f"{root}/_temporary")


def test_a_compaction_writes_back_the_partition_markers_it_withdrew(tmp_path):
    root = str(tmp_path / "table")
    before = marker_table(root)
    ran = worker.run(root, "compact", 1)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["groups"] == 4, "every partition merged"
    check_markers_back(root, before)


#: every step of the compaction's job commit after it withdrew the markers and before it writes them
BETWEEN = ["commit_job.after_withdraw", "commit_job.mid_delete=kill@2", "commit_job.after_moves",
           "commit_job.mid_move=kill@2", "commit_job.after_deletes", "commit_job.after_commit_log"]


@pytest.mark.parametrize("fault", BETWEEN)
def test_killed_between_the_withdrawal_and_the_markers_then_rerun(tmp_path, fault):
    """Killed with the partition markers withdrawn (the rerun cannot see them any more: the commit plan says
    which existed), then run again: the markers are back, every row once."""
    root = str(tmp_path / "table")
    before = marker_table(root)
    killed = worker.run(root, "compact", 1, faults=fault if "=" in fault else f"{fault}=kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sc.marker_dirs(root) == [], "killed after the withdrawal"
    again = worker.run(root, "compact", 2)
    assert again.returncode == 0, again.stderr
    check_markers_back(root, before)


def test_a_partition_another_job_is_committing_into_keeps_its_marker_withdrawn(tmp_path):
    """The compaction stops after its withdrawal; an append into d1 then withdraws d1's marker (already gone)
    and stops after moving one file in. The compaction finishes: it must not write d1's marker back (it would
    list only the append's first file, and the append, which writes no partition marker, would leave it lying),
    only d0's. The append then finishes: every marker there tells the truth."""
    root = str(tmp_path / "table")
    before = marker_table(root)
    comp = worker.start(root, "compact", 1, faults="commit_job.after_withdraw=stop")
    wait_stopped(comp)
    writer = worker.start_write(root, "late", 1, 5000, ("d1",), "commit_job.mid_move=stop@1")
    wait_stopped(writer)
    code, out, err = resume(comp)
    assert code == 0, err
    code, _, err_writer = resume(writer)
    assert code == 0, err_writer
    sc.assert_markers_tell_truth(root)
    result = json.loads(out)
    assert result["diagnostics"]["markers_restored"] == ["day=d0"]
    assert [m["directory"] for m in result["diagnostics"]["markers_left_withdrawn"]] == ["day=d1"]
    assert sc.marker_dirs(root) == ["", "day=d0"]
    late = Counter((i, "d1") for i in range(5000, 5000 + 3 * 8))   # write_job: 3 tasks x 8 rows into d1
    assert tables.rows(root) == before + late == tables.rows_duckdb(root)
    assert rows_via_marker(root, "day=d0") == Counter({r: n for r, n in before.items() if r[1] == "d0"})


def test_another_jobs_damaged_commit_plan_leaves_the_markers_withdrawn_not_the_compaction_unfinished(tmp_path):
    """Found from outside: job ``x`` (an append into d9) died right after fixing its commit plan, which is then
    damaged (not JSON). The compaction never reads another job's plan until it is about to give back its
    partition markers -- after its inputs are deleted and its merged files moved in. There the unreadable plan
    failed it (CorruptRecord), every run again: the root's ``_SUCCESS`` never came back, though before
    partition markers were given back the compaction finished. Where a job whose records cannot be read changes
    markers is unknown, so no partition marker is given back (each listed with why, naming the job), the
    compaction finishes, and its root marker tells the truth."""
    from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt
    import pyarrow as pa

    root = str(tmp_path / "table")
    before = marker_table(root)
    x = FileOutputCommitter(root, "x", mode="append", partition_by=["day"])
    x.setup_job()
    run_task_attempt(x, 0, 1, lambda w: w.write(pa.table({"id": [99999], "day": ["d9"]})))
    sc.crash_after_plan(x)
    (plan,) = (tmp_path / "table" / "_temporary" / "x").glob("_commit_plan_*.json")
    plan.write_bytes(b'{"format": "damaged')
    ran = worker.run(root, "compact", 1)
    assert ran.returncode == 0, ran.stderr
    diagnostics = json.loads(ran.stdout)["diagnostics"]
    assert diagnostics["markers_restored"] == []
    left = diagnostics["markers_left_withdrawn"]
    assert [m["directory"] for m in left] == list(MARKED)
    assert all("job x" in m["why"] and "cannot be read" in m["why"] for m in left), left
    assert sc.marker_dirs(root) == [""]
    assert read_success_marker(root, verify_files=True)["job_id"] == "compact"
    sc.assert_markers_tell_truth(root)
    assert tables.rows(root) == before
