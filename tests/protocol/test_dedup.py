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

from airflow_commit_provider.protocol import FileOutputCommitter, LocalStore, faults, read_success_marker
from airflow_commit_provider.operators.shards import run_shards
from airflow_commit_provider.protocol.maintenance.dedup import find_duplicates, remove_duplicates

from . import dedup_tables as t
from . import scenario as sc


def _ours(root: str) -> list[str]:
    return [f for f in t.visible(root) if f.rpartition("/")[2].startswith("part-") and "_copy_" not in f]


# ---------------------------------------------------------------- the losses seen from outside (issue 20)

def test_two_spark_appends_and_one_of_ours_are_three_jobs(tmp_path):
    """Two Spark appends, then an append by this provider: three job uuids over task numbers 0 and 1. The
    original code took the uuids for attempts of one task and deleted 12 of the 18 rows."""
    root = t.spark_table("two_appends", tmp_path / "table")
    t.our_append(root, "ours", {0: [12, 13, 14], 1: [15, 16, 17]})
    t.assert_rows_once(root, list(range(18)))
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
    t.assert_rows_once(root, list(range(12)))
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
    head, _, name = dup.rpartition("/")
    assert not os.path.exists(os.path.join(root, head, f".{name}.crc")), "its Hadoop checksum goes with it"
    t.assert_rows_once(root, t.spark_ids(table))
    assert t.assert_markers_true(root) == [""] and os.path.getsize(os.path.join(root, "_SUCCESS")) == 0


def test_a_lost_speculative_attempts_file_moved_in_by_a_zombie_is_deleted(tmp_path):
    """Spark's own lost attempt: task 1's first attempt wrote its file and failed before its task commit, the
    second committed the same name; the zombie's file, moved in later without replacing, is deleted."""
    info = t.TABLES["speculative"]
    assert info["identical_bytes"] and info["lost_attempt"] == info["attempts_kept"][1]
    root = t.spark_table("speculative", tmp_path / "table")
    t.our_append(root, "ours", {0: [6, 7]})  # a later append, whose _SUCCESS retains the zombie's file
    plan = find_duplicates(LocalStore(root))
    assert [(d.path, d.keep[0][0]) for d in plan.deletions] == [(info["zombie_copy"], info["copy_of"])]
    remove_duplicates(LocalStore(root), plan)
    t.assert_rows_once(root, list(range(8)))
    assert t.assert_markers_true(root) == [""]
    assert not any(info["zombie_copy"] in f for f in t.all_files(root)), "its checksum went with it"


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
        t.assert_rows_once(root, t.spark_ids(table))
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


def test_another_writers_file_beside_hive_attempts_means_another_job(tmp_path):
    root = t.spark_table("two_appends", tmp_path / "table")
    _hive_dir(root, "")
    plan = find_duplicates(LocalStore(root), single_job_dirs=True)
    assert not plan.deletions and all(t.TABLES["two_appends"]["files"][0] in u.why for u in plan.undecided)


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
    files = sorted(sc.all_files(root))
    again = remove_duplicates(LocalStore(root))   # run again after it committed (a clear after success)
    assert again["delete"] == [] and sorted(sc.all_files(root)) == files, "a second run finds nothing to do"


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_zombie_copy_of_one_shard_of_a_sharded_job_is_exactly_what_is_deleted(tmp_path, algorithm):
    """A stage with ``shards_per_task=3`` as its write task instances run it (the shard runner): two task
    instances, six protocol tasks. Try 1 of task instance 0 wrote shard 1's files (task 1) and hung before its
    task commit; try 2 ran every shard of the instance and committed them, fencing it. After the job commit the
    zombie moves its files in (one under a name shard 1 also committed: ``_copy_1``). The deduplication proves
    exactly the zombie's files duplicate by the commit log (task 1's committed files are not among them), deletes
    them, and every row of every shard reads back once."""
    root = str(tmp_path / "table")

    def committer() -> FileOutputCommitter:
        return FileOutputCommitter(root, "sharded", algorithm=algorithm, mode="append")

    def ids(task: int) -> list[int]:
        return [task * 10 + i for i in range(3)]

    c = committer()
    c.setup_job()
    held = t.unfinished_attempt(c, 1, 1, ids(1))           # try 1 of task instance 0, shard 1
    for map_index, attempt in ((0, 2), (1, 1)):
        outcome = run_shards(committer, map_index, 3, attempt, lambda shard, task, w: w.write(t.ids_table(ids(task))))
        assert [o.task for o in outcome.outcomes] == [3 * map_index + s for s in range(3)]
    c.commit_job(6)
    zombie = t.zombie_moves_in(root, held)
    assert any("_copy_1" in z for z in zombie) and len(zombie) == 3
    plan = find_duplicates(LocalStore(root))
    assert sorted(d.path for d in plan.deletions) == sorted(zombie) and not plan.undecided
    assert all("_commits/sharded.json" in d.proof for d in plan.deletions)
    remove_duplicates(LocalStore(root), plan)
    t.assert_rows_once(root, [i for task in range(6) for i in ids(task)])
    assert t.assert_markers_true(root) == [""]
    assert not find_duplicates(LocalStore(root)).deletions, "once: a second run finds nothing"


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
    delta = "p=1/delta_0000001_0000001_0000"
    t.write_parquet(f"{root}/{delta}/000000_0", [200, 201])
    shutil.copyfile(f"{root}/{delta}/000000_0", f"{root}/{delta}/000000_1")
    dups.append(f"{delta}/000000_1")
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


# ---------------------------------------------------------------- jobs that have not committed

@pytest.mark.parametrize("staging", ["_temporary/0/_temporary/attempt_202612010900_0001_m_000000_0/part-00000-x",
                                     ".spark-staging-5bcc2bf8-a920-4ba2-bd54-4681068dec72/p=0/part-00000-x",
                                     ".hive-staging_hive_2026-12-01_09-00-00_000_1-1/-ext-10000/000000_0"])
def test_another_writers_staging_at_the_root_leaves_everything_alone(tmp_path, staging):
    """A Hadoop/Spark ``_temporary``, a Spark dynamic-overwrite staging directory or a Hive staging directory
    means a job that has not committed may be writing (or died writing) there: nothing is decided."""
    root = t.spark_table("partitioned", tmp_path / "table")
    t.zombie_copy(root, t.TABLES["partitioned"]["files"][0])
    os.makedirs(os.path.dirname(os.path.join(root, staging)))
    open(os.path.join(root, staging), "wb").close()
    before = t.all_files(root)
    result = remove_duplicates(LocalStore(root))
    assert result["delete"] == [] and t.all_files(root) == before
    (alone,) = result["left_alone"]
    assert alone["path"] == "" and staging.split("/")[0] in alone["why"]


def test_another_writers_staging_in_a_partition_leaves_that_partition_alone(tmp_path):
    root = t.spark_table("partitioned", tmp_path / "table")
    files = t.TABLES["partitioned"]["files"]
    in_p0 = t.zombie_copy(root, next(f for f in files if f.startswith("p=0/")))
    in_p1 = t.zombie_copy(root, next(f for f in files if f.startswith("p=1/")))
    os.makedirs(f"{root}/p=1/_temporary/0")
    plan = find_duplicates(LocalStore(root))
    assert [d.path for d in plan.deletions] == [in_p0]
    assert [(a.path, "p=1/_temporary" in a.why) for a in plan.left_alone] == [("p=1", True)]
    remove_duplicates(LocalStore(root), plan)
    assert in_p1 in t.visible(root) and in_p0 not in t.visible(root)


def test_the_inputs_of_a_compaction_that_has_not_committed_are_left_alone(tmp_path):
    root = t.spark_table("two_appends", tmp_path / "table")
    original = t.TABLES["two_appends"]["files"][0]
    dup = t.zombie_copy(root, original)
    FileOutputCommitter(root, "compaction", mode="append").setup_job(replace_files=[original, dup],
                                                                     replace_first=True)
    plan = find_duplicates(LocalStore(root))
    assert not plan.deletions
    assert {(a.path, "job compaction" in a.why) for a in plan.left_alone} == {(original, True), (dup, True)}


def test_records_of_our_own_committed_jobs_are_not_another_writers_staging(tmp_path):
    """A job directory without a job record but with application attempts is this provider's (records of a
    committed job being deleted, a purged generation's leftovers), not a job in flight."""
    root = t.spark_table("two_appends", tmp_path / "table")
    dup = t.zombie_copy(root, t.TABLES["two_appends"]["files"][0])
    c = FileOutputCommitter(root, "purged", mode="append")
    c.setup_job()
    os.remove(os.path.join(root, c.layout.job_record))
    plan = find_duplicates(LocalStore(root))
    assert [d.path for d in plan.deletions] == [dup] and not plan.left_alone


# ---------------------------------------------------------------- the plan is the job

def test_the_dry_run_is_the_plan_the_apply_carries_out(tmp_path):
    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    before = t.all_files(root)
    plan = find_duplicates(LocalStore(root))
    assert t.all_files(root) == before, "the dry run changes nothing"
    assert sorted(set(t.read_ids(root)["pyarrow"])) == sorted(ids), "every row there before"
    result = remove_duplicates(LocalStore(root), plan)
    assert result["plan_id"] == plan.plan_id and result["delete"] == plan.to_doc()["delete"]
    assert result["applied"]["deleted"] == [d.path for d in plan.deletions]
    assert sorted(result["applied"]["deleted"]) == dups
    assert result["applied"]["skipped"] == [] and not result["applied"]["resumed"]
    assert set(t.visible(root)) == {f for f in before if not f.startswith(("_", ".")) and "/_" not in f
                                    and "/." not in f} - set(dups)
    assert not os.path.exists(os.path.join(root, "_temporary")), "the plan record is gone"


def test_a_deletion_whose_kept_file_went_is_skipped(tmp_path):
    """Between the dry run and the apply someone deleted the file kept in a duplicate's place: deleting the
    duplicate now would lose its rows, so it stays, reported."""
    root = t.spark_table("two_appends", tmp_path / "table")
    original = t.TABLES["two_appends"]["files"][0]
    dup = t.zombie_copy(root, original)
    plan = find_duplicates(LocalStore(root))
    os.remove(os.path.join(root, original))
    result = remove_duplicates(LocalStore(root), plan)
    assert result["applied"]["deleted"] == [] and dup in t.visible(root)
    assert "gone or changed" in result["applied"]["skipped"][0]["why"]
    t.assert_rows_once(root, t.spark_ids("two_appends"))


def test_an_unfinished_plan_runs_before_any_other(tmp_path):
    from airflow_commit_provider.protocol import faults
    from airflow_commit_provider.protocol.errors import DedupInProgress

    root = t.spark_table("two_appends", tmp_path / "table")
    t.zombie_copy(root, t.TABLES["two_appends"]["files"][0])
    other = find_duplicates(LocalStore(root))
    faults.arm("dedup.after_plan")
    try:
        with pytest.raises(faults.InjectedFault):
            remove_duplicates(LocalStore(root))
    finally:
        faults.disarm()
    pending = find_duplicates(LocalStore(root))
    assert pending.pending and pending.plan_id != other.plan_id
    with pytest.raises(DedupInProgress, match=pending.plan_id):
        remove_duplicates(LocalStore(root), other)
    result = remove_duplicates(LocalStore(root))
    assert result["plan_id"] == pending.plan_id and result["applied"]["resumed"]
    t.assert_rows_once(root, t.spark_ids("two_appends"))


def test_a_corrupt_plan_record_is_named(tmp_path):
    from airflow_commit_provider.protocol import CorruptRecord

    root = t.spark_table("two_appends", tmp_path / "table")
    os.makedirs(f"{root}/_temporary")
    with open(f"{root}/_temporary/_dedup.json", "w") as fh:
        json.dump({"format": "airflow-commit-provider/dedup-plan", "version": 1, "plan_id": 7}, fh)
    with pytest.raises(CorruptRecord, match=r"_dedup\.json.*plan_id"):
        find_duplicates(LocalStore(root))


def test_a_marker_this_provider_cannot_read_stays_withdrawn(tmp_path):
    """A JSON ``_SUCCESS`` of another writer (S3A's committers list file names) above a deletion: what it claims
    is unknown, so it is not written back after the deletion."""
    root = t.spark_table("two_appends", tmp_path / "table")
    t.zombie_copy(root, t.TABLES["two_appends"]["files"][0])
    with open(f"{root}/_SUCCESS", "w") as fh:
        json.dump({"name": "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1", "filenames": []}, fh)
    result = remove_duplicates(LocalStore(root))
    assert not os.path.exists(f"{root}/_SUCCESS")
    (marker,) = result["applied"]["markers"]
    assert not marker["written"] and "cannot tell what it lists" in marker["why"]


def test_names_by_their_writers_rules():
    from airflow_commit_provider.protocol.maintenance.filenames import is_hive_transaction_dir, parse_task_file

    u = "5bcc2bf8-a920-4ba2-bd54-4681068dec72"
    cases = {
        f"part-00003-{u}-c000.snappy.parquet": ("spark", 3, u, None, ()),       # Spark 3.x, 4.3 unpartitioned
        f"part-00003-{u}.c001.snappy.parquet": ("spark", 3, u, None, ()),       # Spark 4.3 partitioned
        f"part-00003-{u}_00002.c000.snappy.parquet": ("spark", 3, u, None, ()), # bucket 2 of task 3
        f"part-r-00003-{u}.gz.parquet": ("spark", 3, u, None, ()),              # Spark 2.0
        f"part-00003-{u}-c000.snappy_copy_2.parquet": ("spark", 3, u, None, (2,)),
        f"part-00003-{u}-c000.snappy.parquet_1": ("spark", 3, u, None, (1,)),
        "000003_0": ("hive", 3, None, 0, ()), "000003_12.gz": ("hive", 3, None, 12, ()),
        "000003_0_copy_1": ("hive", 3, None, 0, (1,)), "000003_0_copy_1.gz": ("hive", 3, None, 0, (1,)),
        "part-r-00003": ("hadoop", 3, None, None, ()), "part-m-00003.deflate": ("hadoop", 3, None, None, ()),
        "part-00003": ("hadoop", 3, None, None, ()),
        f"part-00003-{u}_00002": ("spark", 3, u, None, ()),  # a bucket, not Utilities.moveFile's suffix
    }
    for name, want in cases.items():
        f = parse_task_file(name)
        assert f is not None and (f.writer, f.task, f.job_uuid, f.attempt, f.copies) == want, name
    for name in ("data.parquet", "000003_0_1", "00003_0", "x_copy_1", f"part-00003-{u[:-1]}-c000.parquet"):
        assert parse_task_file(name) is None, name
    assert is_hive_transaction_dir("delta_0000005_0000005_0000") and is_hive_transaction_dir("base_0000005_v0000012")
    assert is_hive_transaction_dir("delete_delta_0000005_0000005") and not is_hive_transaction_dir("ds=1")


# ---------------------------------------------------------------- killed, and beside other processes

KILLS = [(p, 1) for p in faults.DEDUP_POINTS] + [("dedup.mid_delete", 3)]


@pytest.mark.parametrize("point,nth", KILLS, ids=[f"{p}@{n}" for p, n in KILLS])
def test_killed_at_every_step_then_finished_by_the_next_run(tmp_path, point, nth):
    """A deduplication SIGKILLed at each step leaves a consistent table (no row lost, every marker there true)
    and its plan, which the next run finishes: the same deletions, the markers written back."""
    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    # the zombie moved its files in after the commit, so the markers there already lie: the deduplication must
    # leave each marker as it was or write a true one, never another lie
    before = {d: Path(root, d, "_SUCCESS").read_bytes() for d in t.visible_dirs(root)}
    with pytest.raises(Exception, match="does not describe its directory"):
        t.assert_markers_true(root)
    proc = t.spawn("dedup", root, fault=f"{point}=kill@{nth}")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -9, f"the fault did not fire: {err}"
    got = t.read_ids(root)
    assert set(got["pyarrow"]) == set(got["duckdb"]) == set(ids), "no row lost at any moment"
    for d in t.visible_dirs(root):
        if Path(root, d, "_SUCCESS").read_bytes() != before.get(d):
            read_success_marker(os.path.join(root, d), verify_files=True)
    pending = find_duplicates(LocalStore(root))
    assert pending.pending and sorted(d.path for d in pending.deletions) == dups
    result = remove_duplicates(LocalStore(root))
    assert result["plan_id"] == pending.plan_id and result["applied"]["resumed"]
    assert sorted(result["applied"]["deleted"]) == dups and result["applied"]["skipped"] == []
    t.assert_rows_once(root, ids)
    assert t.assert_markers_true(root) == ["", "p=2"]
    assert not os.path.exists(f"{root}/_temporary")


def test_a_job_commit_while_the_deduplication_is_stopped(tmp_path):
    """The deduplication withdrew the markers and stops; an append of this provider commits meanwhile (its
    ``_SUCCESS`` retains the duplicates); the deduplication wakes, deletes, and writes back the newest marker
    without the deleted files."""
    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    dedup = t.spawn("dedup", root, fault="dedup.after_withdraw=stop")
    t.wait_stopped(dedup)
    assert t.visible_dirs(root) == [], "every marker above a deletion is withdrawn"
    commit = t.spawn("commit", root, "late", "500", "3")
    _, err = commit.communicate(timeout=120)
    assert commit.returncode == 0, err
    assert set(dups) & {f["path"] for f in read_success_marker(root)["retained"]}
    result = json.loads(t.resume(dedup))
    assert sorted(result["applied"]["deleted"]) == dups
    t.assert_rows_once(root, ids + [500, 501, 502])
    assert t.assert_markers_true(root) == ["", "p=2"]
    assert read_success_marker(root)["job_id"] == "late"


def test_a_deduplication_while_a_job_commit_is_stopped(tmp_path):
    """A job commit of this provider published its files and stops before its markers; a deduplication runs
    whole meanwhile (the job's files are left alone: it has not committed); the commit then finishes and its
    markers describe the table without the duplicates."""
    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    commit = t.spawn("commit", root, "late", "500", "3", fault="commit_job.after_deletes=stop")
    t.wait_stopped(commit)
    dedup = t.spawn("dedup", root)
    out, err = dedup.communicate(timeout=120)
    assert dedup.returncode == 0, err
    result = json.loads(out)
    assert sorted(result["applied"]["deleted"]) == dups
    assert any("job late" in a["why"] for a in result["left_alone"])
    t.resume(commit)
    t.assert_rows_once(root, ids + [500, 501, 502])
    assert t.assert_markers_true(root) == ["", "p=2"]


def test_what_a_reader_sees_during_the_deletions(tmp_path):
    """Stopped after its first deletion: a plain reader (pyarrow, duckdb, another process) reads every row, the
    duplicates not yet deleted too; a reader waiting for ``_SUCCESS`` finds none."""
    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    before = t.read_ids(root)
    dedup = t.spawn("dedup", root, fault="dedup.mid_delete=stop@1")
    t.wait_stopped(dedup)
    reader = t.spawn("read", root, str(tmp_path / "read.json"))
    _, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    seen = json.loads((tmp_path / "read.json").read_text())
    for name in ("pyarrow", "duckdb"):
        assert set(seen[name]) == set(ids) and len(ids) <= len(seen[name]) < len(before[name])
    assert seen["markers"] == []
    t.resume(dedup)
    t.assert_rows_once(root, ids)
    assert t.assert_markers_true(root) == ["", "p=2"]


def test_two_deduplications_of_one_root(tmp_path):
    """One deduplication created its plan and stops; another, with a plan of its own, waits (DedupInProgress);
    without one it finishes the first's plan; the first then wakes and ends with the same table."""
    from airflow_commit_provider.protocol.errors import DedupInProgress

    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    own = find_duplicates(LocalStore(root))
    first = t.spawn("dedup", root, fault="dedup.after_plan=stop")
    t.wait_stopped(first)
    with pytest.raises(DedupInProgress):
        remove_duplicates(LocalStore(root), own)
    second = remove_duplicates(LocalStore(root))
    assert second["applied"]["resumed"] and sorted(second["applied"]["deleted"]) == dups
    result = json.loads(t.resume(first))
    assert result["plan_id"] == second["plan_id"] and sorted(result["applied"]["deleted"]) == dups
    t.assert_rows_once(root, ids)
    assert t.assert_markers_true(root) == ["", "p=2"]


def test_a_job_commit_under_way_writes_the_markers_it_withdrew(tmp_path):
    """The deduplication withdrew the markers (it read them first) and stops; a job commit of this provider fixes
    its plan, withdraws and stops before publishing; the deduplication finishes: it must not write back the
    marker the job commit withdrew (the job is about to publish under it), the job commit writes it last."""
    root = str(tmp_path / "table")
    ids, dups = mixed_table(root)
    dedup = t.spawn("dedup", root, fault="dedup.after_withdraw=stop")
    t.wait_stopped(dedup)
    commit = t.spawn("commit", root, "late", "500", "3", fault="commit_job.after_withdraw=stop")
    t.wait_stopped(commit)
    result = json.loads(t.resume(dedup))
    assert not os.path.exists(f"{root}/_SUCCESS"), "no marker over a directory a job commit is changing"
    root_marker = next(m for m in result["applied"]["markers"] if m["directory"] == "")
    assert not root_marker["written"] and "job commit" in root_marker["why"]
    t.resume(commit)
    t.assert_rows_once(root, ids + [500, 501, 502])
    assert t.assert_markers_true(root) == ["", "p=2"] and read_success_marker(root)["job_id"] == "late"


def test_a_v2_job_set_up_but_with_nothing_visible_lets_the_markers_come_back(tmp_path):
    """A v2 job of this provider changes a directory only by a task commit, which withdraws the markers above its
    files before they appear: set up, with no task commit on record, it holds no marker back (before session 19
    it held the deduplication's markers back until its own commit). Its task commit then withdraws the root
    marker, and its job commit writes it."""
    root = t.spark_table("two_appends", tmp_path / "table")
    t.our_append(root, "first", {0: [100]})
    t.zombie_copy(root, t.TABLES["two_appends"]["files"][0])
    second = t.our_append(root, "second", {}, algorithm=2, commit=False)
    result = remove_duplicates(LocalStore(root))
    assert len(result["applied"]["deleted"]) == 1 and result["applied"]["markers"][0]["written"]
    assert t.assert_markers_true(root) == [""]
    t.run_task_attempt(second, 0, 1, lambda w: w.write(t.ids_table([101])))
    assert not os.path.exists(f"{root}/_SUCCESS"), "the v2 task commit withdrew the root marker first"
    second.commit_job(1)
    t.assert_rows_once(root, t.spark_ids("two_appends") + [100, 101])
    assert t.assert_markers_true(root) == [""]


def test_a_marker_somebody_withdrew_after_the_plan_is_not_brought_back(tmp_path):
    root = t.spark_table("two_appends", tmp_path / "table")
    t.our_append(root, "first", {0: [100]})
    t.zombie_copy(root, t.TABLES["two_appends"]["files"][0])
    dedup = t.spawn("dedup", root, fault="dedup.after_plan=stop")
    t.wait_stopped(dedup)
    os.remove(f"{root}/_SUCCESS")  # a writer about to change the root withdrew it
    result = json.loads(t.resume(dedup))
    assert len(result["applied"]["deleted"]) == 1 and result["applied"]["markers"] == []
    assert not os.path.exists(f"{root}/_SUCCESS")


def test_a_tree_with_a_symlinked_partition_is_refused_before_anything_changes(tmp_path):
    """The maintenance operators bind as the commit does: never a deletion through a link (issue 19)."""
    from airflow_commit_provider.protocol import InvalidOutputSpec

    root = str(tmp_path / "table")
    t.write_parquet(f"{root}/delta_0000001_0000001_0000/000000_0", [0, 1, 2])
    shutil.copyfile(f"{root}/delta_0000001_0000001_0000/000000_0", f"{root}/delta_0000001_0000001_0000/000000_1")
    t.write_parquet(str(tmp_path / "cold" / "000000_0"), [7])
    os.symlink(tmp_path / "cold", f"{root}/cold_part", target_is_directory=True)
    assert find_duplicates(LocalStore(root)).deletions, "the dry run still shows what it would do"
    with pytest.raises(InvalidOutputSpec, match=r"cold_part is a symbolic link"):
        remove_duplicates(LocalStore(root))
    assert sorted(os.listdir(f"{root}/delta_0000001_0000001_0000")) == ["000000_0", "000000_1"]
    assert os.listdir(tmp_path / "cold") == ["000000_0"]
