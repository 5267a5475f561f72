"""Deduplication deletes only files proven to be the same task of the same job twice, on the tables users have.

Spark's tables are Spark 4.3's own output (``fixtures/spark43``); Hive's and Hadoop's files are named by their
writers' rules; this provider's come from its committer in every mode. After every deduplication: each row
exactly once for pyarrow and for duckdb, and every ``_SUCCESS`` there is true (``verify_files=True``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, LocalStore, TaskAttemptWriter, read_success_marker
from airflow_commit_provider.protocol.dedup import find_duplicates, remove_duplicates

from . import dedup_tables as t


def _ours(root: str) -> list[str]:
    return [f for f in t.visible(root) if f.rpartition("/")[2].startswith("part-") and "_copy_" not in f]


# ---------------------------------------------------------------- the losses seen from outside (issue 20)

def test_two_spark_appends_and_one_of_ours_are_three_jobs(tmp_path):
    """Two Spark appends, then an append by this provider: three job uuids over task numbers 0 and 1. The
    original code took the uuids for attempts of one task and deleted 12 of the 18 rows."""
    root = t.spark_table("two_appends", tmp_path / "table")
    t.our_append(root, "ours", {0: [12, 13, 14], 1: [15, 16, 17]})
    before = t.visible(root)
    remove_duplicates(LocalStore(root))
    assert t.visible(root) == before, "nothing is a duplicate"
    t.assert_rows_once(root, list(range(18)))
    assert t.assert_markers_true(root) == [""]


def test_two_hive_insert_into_jobs_are_not_duplicates(tmp_path):
    """Hive names do not name their job: 000000_0 of one INSERT INTO and 000000_1 of a second one (whose first
    attempt failed) are two jobs' rows. The original code kept the higher attempt and deleted 3 of 6 rows."""
    root = str(tmp_path / "table")
    t.write_parquet(f"{root}/000000_0", [0, 1, 2])
    t.write_parquet(f"{root}/000000_1", [3, 4, 5])
    remove_duplicates(LocalStore(root))
    t.assert_rows_once(root, list(range(6)))
    (undecided,) = find_duplicates(LocalStore(root)).undecided
    assert undecided.files == ("000000_0", "000000_1") and "do not name their job" in undecided.why


def test_a_v2_job_in_its_write_stage_is_left_alone_and_commits(tmp_path):
    """During a v2 append's write stage its task commits are visible and no record lists them yet. The original
    code deleted all 6 of its committed rows and the job could never commit (CorruptRecord at every retry)."""
    root = str(tmp_path / "table")
    t.our_append(root, "first", {0: [0, 1, 2], 1: [3, 4, 5]})
    second = t.our_append(root, "second", {0: [6, 7, 8], 1: [9, 10, 11]}, algorithm=2, commit=False)
    assert len(t.visible(root)) == 4, "v2: the second job's task commits are visible"
    plan = find_duplicates(LocalStore(root))
    remove_duplicates(LocalStore(root))
    assert len(t.visible(root)) == 4, "nothing of a job that has not committed is touched"
    second.commit_job(2)
    t.assert_rows_once(root, list(range(12)))
    t.assert_markers_true(root)
    assert not plan.deletions and len(plan.left_alone) == 2
    assert all("has not committed" in a.why for a in plan.left_alone)


def test_a_deletion_withdraws_the_marker_above_it_and_rewrites_it(tmp_path):
    """Two attempts of one Hive task in a Hive transaction directory (one job's), then an append by this
    provider, whose ``_SUCCESS`` retains both. The original code deleted one under that marker and left it
    listing a file that was gone."""
    root = str(tmp_path / "table")
    t.write_parquet(f"{root}/delta_0000001_0000001_0000/000000_0", [0, 1, 2])
    shutil.copyfile(f"{root}/delta_0000001_0000001_0000/000000_0", f"{root}/delta_0000001_0000001_0000/000000_1")
    t.our_append(root, "ours", {0: [3, 4, 5]})
    assert len(read_success_marker(root)["retained"]) == 2
    remove_duplicates(LocalStore(root))
    t.assert_rows_once(root, list(range(6)))
    assert t.assert_markers_true(root) == [""]
    assert read_success_marker(root)["diagnostics"]["deduplicated"]["retained_removed"] == 1


# ---------------------------------------------------------------- Spark's own output (fixtures/spark43)

@pytest.mark.parametrize("table,rel,copy", [
    ("two_appends", 1, "mvFile"),      # unpartitioned: Spark 4.3's -c000 names
    ("partitioned", 3, "mvFile"),      # partitioned: Spark 4.3's .c000 names, the copy in p=0 or p=1
    ("partitioned", 6, "moveFile"),    # Hive's Utilities.moveFile appends _1 to the whole name
])
def test_a_zombie_copy_of_a_spark_task_file_is_deleted(tmp_path, table, rel, copy):
    """Attempts of one Spark task share a name, so a second copy of a task's file is visible only under a copy
    name, written outside the protocol: the same job uuid, task and file number, the same bytes."""
    root = t.spark_table(table, tmp_path / "table")
    original = t.TABLES[table]["files"][rel % len(t.TABLES[table]["files"])]
    if copy == "mvFile":
        dup = t.zombie_copy(root, original)
    else:
        dup = original + "_1"
        shutil.copyfile(os.path.join(root, original), os.path.join(root, dup))
    plan = find_duplicates(LocalStore(root))
    (deletion,) = plan.deletions
    assert (deletion.path, deletion.writer, deletion.keep[0][0]) == (dup, "spark", original)
    assert "identical bytes" in deletion.proof
    result = remove_duplicates(LocalStore(root), plan)
    assert result["applied"]["deleted"] == [dup]
    t.assert_rows_once(root, t.spark_ids(table))
    assert t.assert_markers_true(root) == [""] and os.path.getsize(os.path.join(root, "_SUCCESS")) == 0


def test_a_copy_name_holding_other_rows_is_undecided(tmp_path):
    """Same job, task and file number under a copy name, but other rows: which one the job committed is not
    known, so neither is deleted."""
    root = t.spark_table("two_appends", tmp_path / "table")
    original = t.TABLES["two_appends"]["files"][0]
    dup = t.zombie_copy(root, original)
    t.write_parquet(os.path.join(root, dup), [100, 101])
    plan = find_duplicates(LocalStore(root))
    assert not plan.deletions and plan.undecided[0].files == (original, dup)
    assert "content differs" in plan.undecided[0].why
    remove_duplicates(LocalStore(root))
    assert dup in t.visible(root)


def test_files_spark_wrote_once_are_never_duplicates(tmp_path):
    """One task writing three files (maxRecordsPerFile), a task Spark ran twice (its first attempt failed), two
    appends partitioned: nothing there is a duplicate."""
    assert t.TABLES["retried"]["attempts_run"] == ["0_0", "1_0", "1_1"], "task 1 ran twice"
    assert t.TABLES["partitioned"]["counter_separators"] == ["."]
    assert t.TABLES["two_appends"]["counter_separators"] == ["-"]
    for table in ("max_records", "retried", "partitioned", "two_appends"):
        root = t.spark_table(table, tmp_path / table)
        before = t.all_files(root)
        result = remove_duplicates(LocalStore(root))
        assert result["delete"] == [] and result["undecided"] == [] and t.all_files(root) == before
        assert result["seen"] == {"spark": len(t.TABLES[table]["files"])}


# ---------------------------------------------------------------- Hive's and Hadoop's names

def _hive_dir(root: str, directory: str) -> None:
    """Task 5 written twice with the same rows (attempt 0 with a padded footer: the larger file), task 3 by two
    attempts with different rows, task 1 once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(f"{root}/{directory}", exist_ok=True)
    rows = pa.table({"id": pa.array([50, 51, 52], pa.int64())})
    pq.write_table(rows.replace_schema_metadata({"writer": "x" * 4000}), f"{root}/{directory}/000005_0")
    pq.write_table(rows, f"{root}/{directory}/000005_1")
    t.write_parquet(f"{root}/{directory}/000003_0", [30, 31])
    t.write_parquet(f"{root}/{directory}/000003_1", [30, 32])
    t.write_parquet(f"{root}/{directory}/000001_0", [10])


def test_hive_attempts_of_one_task_in_a_directory_one_job_wrote(tmp_path):
    """With the caller's word that one job wrote each directory, attempts of one task holding the same rows are
    duplicates, whichever is larger (never by size); attempts holding different rows are not decided."""
    root = str(tmp_path / "table")
    _hive_dir(root, "ds=1")
    assert os.path.getsize(f"{root}/ds=1/000005_0") > os.path.getsize(f"{root}/ds=1/000005_1")
    assert not find_duplicates(LocalStore(root)).deletions, "without single_job_dirs nothing is proven"
    plan = find_duplicates(LocalStore(root), single_job_dirs=True)
    (deletion,) = plan.deletions
    assert deletion.path == "ds=1/000005_1" and deletion.keep[0][0] == "ds=1/000005_0"
    assert "the same rows" in deletion.proof and "single_job_dirs" in deletion.proof
    assert [u.files for u in plan.undecided] == [("ds=1/000003_0", "ds=1/000003_1")]
    remove_duplicates(LocalStore(root), plan)
    assert t.read_ids(root)["pyarrow"] == [10, 30, 30, 31, 32, 50, 51, 52]


def test_a_hive_copy_name_is_another_job(tmp_path):
    """``_copy_<n>`` is Hive's name for a second job's file: 000000_0 and 000000_0_copy_1 are two INSERT INTO
    jobs, and a directory holding one was not written by one job, whatever the caller says."""
    root = str(tmp_path / "table")
    t.write_parquet(f"{root}/000000_0", [0, 1])
    shutil.copyfile(f"{root}/000000_0", f"{root}/000000_0_copy_1")  # the same rows inserted twice: two jobs
    _hive_dir(root, "")
    plan = find_duplicates(LocalStore(root), single_job_dirs=True)
    assert not plan.deletions
    assert {u.files for u in plan.undecided} == {("000003_0", "000003_1"), ("000005_0", "000005_1")}
    assert all("000000_0_copy_1 is there" in u.why for u in plan.undecided)


def test_hive_attempts_in_a_hive_transaction_directory(tmp_path):
    """Hive's ACID and insert-only tables write each transaction into its own directory: one job's."""
    root = str(tmp_path / "table")
    _hive_dir(root, "delta_0000007_0000007_0000")
    _hive_dir(root, "base_0000006")
    plan = find_duplicates(LocalStore(root))
    assert sorted(d.path for d in plan.deletions) == ["base_0000006/000005_1", "delta_0000007_0000007_0000/000005_1"]
    assert all("Hive transaction directory" in d.proof for d in plan.deletions)


def test_hadoop_names_are_never_duplicates(tmp_path):
    """``part-r-00000`` holds no attempt and no job: two attempts cannot both be visible, and a copy of the name
    is another job's file, even with the same bytes."""
    root = str(tmp_path / "table")
    t.write_parquet(f"{root}/part-r-00000", [0, 1])
    shutil.copyfile(f"{root}/part-r-00000", f"{root}/part-r-00000_copy_1")
    t.write_parquet(f"{root}/part-m-00000", [2])
    t.write_parquet(f"{root}/part-r-00001.snappy.parquet", [3])
    result = remove_duplicates(LocalStore(root), single_job_dirs=True)
    assert result["delete"] == [] and result["undecided"] == [] and result["seen"] == {"hadoop": 4}
    assert t.read_ids(root)["pyarrow"] == [0, 0, 1, 1, 2, 3]


# ---------------------------------------------------------------- this provider's own output, every mode

MODES = [(m, a) for m in ("error", "append", "overwrite", "dynamic") for a in (1, 2)]


@pytest.mark.parametrize("mode,algorithm", MODES, ids=[f"{m}-v{a}" for m, a in MODES])
def test_a_zombie_attempts_files_in_our_output_are_deleted_by_the_commit_log(tmp_path, mode, algorithm):
    """A speculative attempt of task 0, fenced by the attempt that won, moves its files in after the job
    committed (outside the protocol): one under a name the winner also wrote (it gets ``_copy_1``), the others
    under names of their own. The commit log lists the task's committed files; the zombie's are not among them,
    whatever their rows, and go. Markers (dynamic: each partition's and the root's) are rewritten and true."""
    root = str(tmp_path / "table")
    partition_by = ("p",) if mode == "dynamic" else ()
    old = []
    if mode in ("append", "overwrite", "dynamic"):
        t.spark_table("partitioned" if mode == "dynamic" else "two_appends", tmp_path / "table")
        old = [] if mode == "overwrite" else t.spark_ids("two_appends")
    c = FileOutputCommitter(root, "ours", algorithm=algorithm, mode=mode, partition_by=partition_by)
    c.setup_job()
    held = t.speculative_loser(c, 0, [100, 102, 104])
    t.run_task_attempt(c, 1, 1, lambda w: w.write(t.ids_table([101, 103], partition_by)))
    c.commit_job(2)
    if mode == "dynamic":
        old = []  # both partitions replaced
    zombie = t.zombie_moves_in(root, held)
    assert any("_copy_1" in z for z in zombie) and len(zombie) == 3
    plan = find_duplicates(LocalStore(root))
    assert sorted(d.path for d in plan.deletions) == sorted(zombie)
    assert all(d.writer == "this-provider" and "_commits/ours.json" in d.proof for d in plan.deletions)
    remove_duplicates(LocalStore(root), plan)
    t.assert_rows_once(root, old + [100, 101, 102, 103, 104])
    found = t.assert_markers_true(root)
    assert found == (["", "p=0", "p=1"] if mode == "dynamic" else [""])


def test_an_unlisted_file_of_a_task_the_job_did_not_commit_is_undecided(tmp_path):
    root = str(tmp_path / "table")
    t.our_append(root, "ours", {0: [0], 1: [1]})
    name = _ours(root)[0].replace("part-00000-", "part-00007-")
    t.write_parquet(os.path.join(root, name), [7])
    plan = find_duplicates(LocalStore(root))
    assert not plan.deletions and "committed no task 7" in plan.undecided[0].why


def test_a_zombie_that_replaced_the_committed_file_leaves_its_task_undecided(tmp_path):
    """The committed file of task 0 was replaced (same name, other bytes): the unlisted file of task 0 may now
    hold the only copy of its rows, so it stays."""
    root = str(tmp_path / "table")
    c = FileOutputCommitter(root, "ours", mode="append")
    c.setup_job()
    held = t.speculative_loser(c, 0, [0, 1])
    c.commit_job(1)
    (committed,) = _ours(root)
    for rel, data in held.items():
        with open(os.path.join(root, rel), "wb") as fh:  # the zombie's c000 over the winner's, and its c001
            fh.write(data)
    plan = find_duplicates(LocalStore(root))
    assert not plan.deletions and "missing or changed" in plan.undecided[0].why
    assert committed in plan.undecided[0].files


# ---------------------------------------------------------------- everything in one table

def mixed_table(root: str) -> tuple[list[int], list[str]]:
    """Spark's two partitioned appends with a zombie copy in each partition, one Hive transaction directory with
    a task written twice, and a dynamic job of this provider (partition p=2) whose zombie moved a file in: the
    expected row ids, and the files proven duplicate."""
    t.spark_table("partitioned", Path(root))
    files = t.TABLES["partitioned"]["files"]
    dups = [t.zombie_copy(root, files[0]), t.zombie_copy(root, files[-1])]
    t.write_parquet(f"{root}/p=1/delta_0000001_0000001_0000/000000_0", [200, 201])
    shutil.copyfile(f"{root}/p=1/delta_0000001_0000001_0000/000000_0", f"{root}/p=1/delta_0000001_0000001_0000/000000_1")
    dups.append("p=1/delta_0000001_0000001_0000/000000_1")
    c = FileOutputCommitter(root, "ours", mode="dynamic", partition_by=["p"])
    c.setup_job()
    held = t.speculative_loser(c, 0, [300, 301], part=2)
    c.commit_job(1)
    dups += t.zombie_moves_in(root, held)
    return t.spark_ids("partitioned") + [200, 201, 300, 301], sorted(dups)


def test_mixed_writers_in_one_table(tmp_path):
    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    plan = find_duplicates(LocalStore(root))
    assert sorted(d.path for d in plan.deletions) == dups
    assert {d.writer for d in plan.deletions} == {"spark", "hive", "this-provider"}
    assert plan.withdraw == ("", "p=0", "p=1", "p=1/delta_0000001_0000001_0000", "p=2")
    remove_duplicates(LocalStore(root), plan)
    t.assert_rows_once(root, ids)
    assert t.assert_markers_true(root) == ["", "p=2"]
