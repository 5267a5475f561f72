"""A compaction between two generations of one job: the next generation replaces the rows the compaction merged.

A DAG run cleared after success (or the next run of a ``job_key``) in mode ``append`` replaces its own earlier
rows: its commit deletes the files of the generation before. Found from outside: when a compaction had merged those
files into one of its own in between, the replacing commit found nothing to delete and left the old rows in the
merged file beside the new ones: every row twice, ``success``, and a ``_SUCCESS`` that listed only the new files.
Merged files now name the files whose rows they hold (their footer); the replacing commit deletes a merged file
holding only rows of the generation it replaces, and refuses, with nothing changed, one that holds other rows too.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import (FileOutputCommitter, InputsClaimed, InvalidOutputSpec,
                                             read_success_marker, run_task_attempt)
from airflow_commit_provider.protocol.faults import InjectedFault, arm, disarm
from airflow_commit_provider.protocol.maintenance.compaction import compact
from airflow_commit_provider.protocol.records.merged import MERGED_FROM, read_origins

from . import scenario as sc

TASKS = 3


def write_tasks(c: FileOutputCommitter, tag: str) -> None:
    """TASKS tasks of *c*'s job, 2 rows each, every row tagged *tag*; each committed (its job not yet)."""
    for task in range(TASKS):
        table = pa.table({"job": [c.job_id] * 2, "tag": [tag] * 2, "task": [task] * 2, "row": [0, 1],
                          "day": ["d0", "d1"]})
        assert run_task_attempt(c, task, 1, lambda w, t=table: w.write(t)).status == "committed"


def run_job(root: str, job_id: str, tag: str, mode: str = "append", partition_by=()) -> dict:
    """One generation of *job_id*: :func:`write_tasks`, then its job commit."""
    c = FileOutputCommitter(root, job_id, algorithm=1, mode=mode, partition_by=partition_by)
    c.setup_job()
    write_tasks(c, tag)
    return c.commit_job(TASKS)


def rows(root: str) -> Counter:
    return Counter((r["job"], r["tag"], r["task"], r["row"]) for r in sc.read_rows(root))


def expected(job_id: str, tag: str) -> Counter:
    return Counter({(job_id, tag, t, r): 1 for t in range(TASKS) for r in range(2)})


def merge(root: str, name: str = "compaction") -> dict:
    result = compact(FileOutputCommitter(root, name, mode="append"), 1, target_size=2**20)
    assert result["state"] == "committed", result
    return result


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "by_day"])
def test_the_next_generation_replaces_rows_a_compaction_merged(tmp_path, partitioned):
    root = str(tmp_path / "out")
    by = ["day"] if partitioned else ()
    first = run_job(root, "daily", "gen0", partition_by=by)
    merge(root)
    merged = sc.visible_files(root)
    assert len(merged) == (2 if partitioned else 1), "the three small files merged (per partition)"
    store = FileOutputCommitter(root, "reader").store
    assert sorted(o for f in merged for o in read_origins(store, f)) == sorted(f["path"] for f in first["files"]), \
        "the merged files' footers name gen0's files"
    manifest = run_job(root, "daily", "gen1", partition_by=by)
    assert manifest["generation"] == 1
    assert rows(root) == expected("daily", "gen1"), "gen0's rows, merged by the compaction, are replaced, not kept"
    assert set(sc.visible_files(root)) == {f["path"] for f in manifest["files"]}
    assert read_success_marker(root, verify_files=True)["totals"]["rows"] == 2 * TASKS


def test_a_merged_file_names_the_original_files_also_when_merged_again(tmp_path):
    root = str(tmp_path / "out")
    first = run_job(root, "daily", "gen0")
    originals = sorted(f["path"] for f in first["files"])
    merge(root)
    store = FileOutputCommitter(root, "x").store
    [once] = sc.visible_files(root)
    assert sorted(read_origins(store, once)) == originals
    run_job(root, "other", "b")
    merge(root, "compaction-2")   # the merged file is small: merged again with the other job's files
    [twice] = sc.visible_files(root)
    held = read_origins(store, twice)
    assert set(originals) <= set(held) and len(held) == 2 * TASKS, "the originals, not the intermediate file"
    assert pq.read_metadata(f"{root}/{twice}").metadata[MERGED_FROM]


def test_a_merged_file_holding_other_jobs_rows_refuses_the_replacement_before_anything_changes(tmp_path):
    """Two jobs' small files merged into one file: job ``daily``'s next generation cannot take its old rows out
    of it. Its commit refuses, naming the merged file and the way out, with the target as it was; followed, the
    advice works: ``overwrite`` replaces everything, another job adds its rows beside the old ones."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    run_job(root, "other", "b")
    merge(root)
    before = (rows(root), sorted(sc.all_files(root)))
    with pytest.raises(InvalidOutputSpec, match=r"merged 3 of them .* together with rows of other files.*"
                                                r"Nothing was changed.*mode 'overwrite'.*another job"):
        run_job(root, "daily", "gen1")
    assert rows(root) == expected("daily", "gen0") + expected("other", "b"), "every row as it was, once"
    assert (rows(root), sorted(f for f in sc.all_files(root) if not f.startswith("_temporary/"))) == \
        (before[0], sorted(f for f in before[1] if not f.startswith("_temporary/")))

    FileOutputCommitter(root, "daily").abort_job()   # the refused generation's own files go
    run_job(root, "daily-again", "new")   # advice 2: another job, beside the old rows
    assert rows(root) == expected("daily", "gen0") + expected("other", "b") + expected("daily-again", "new")
    run_job(root, "daily", "gen1", mode="overwrite")   # advice 1: the same job in mode overwrite replaces all
    assert rows(root) == expected("daily", "gen1")


def test_a_compaction_planned_before_the_next_generation_and_committed_after_its_setup(tmp_path):
    """The compaction fixed its groups (gen0's files) before the next generation set up, and commits after: the
    next generation's commit finds gen0's rows in the merged file all the same."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    c = FileOutputCommitter(root, "compaction", mode="append")
    arm("compact.after_plan", "raise")
    try:
        with pytest.raises(InjectedFault):
            compact(c, 1, target_size=2**20)
    finally:
        disarm()
    nxt = FileOutputCommitter(root, "daily", algorithm=1, mode="append")
    nxt.setup_job()   # generation 1 set up while the compaction holds gen0's files
    merge(root)       # the compaction resumes and commits its fixed groups
    assert len(sc.visible_files(root)) == 1
    write_tasks(nxt, "gen1")
    nxt.commit_job(TASKS)
    assert rows(root) == expected("daily", "gen1")


def test_a_compaction_over_a_layout_whose_partition_columns_changed_merges_each_directory_apart(tmp_path):
    """Two appending jobs, the second partitioned by ``day`` (the code's partition columns changed between them):
    the compaction merges the flat files at the root and each partition's files apart, never across directories;
    every row once, and the second job's next generation still replaces exactly its own rows."""
    root = str(tmp_path / "out")
    run_job(root, "flat", "a")
    run_job(root, "by_day", "b", partition_by=["day"])
    merge(root)
    layout = sorted(f.rsplit("/", 1)[0] if "/" in f else "" for f in sc.visible_files(root))
    assert layout == ["", "day=d0", "day=d1"], "one merged file per directory"
    assert rows(root) == expected("flat", "a") + expected("by_day", "b")
    run_job(root, "by_day", "b2", partition_by=["day"])
    assert rows(root) == expected("flat", "a") + expected("by_day", "b2")


def test_a_dynamic_generation_replaces_the_partitions_a_mixed_merged_file_sits_in_without_refusing(tmp_path):
    """The mixed merged files lie in partitions the next generation (``dynamic``) replaces whole: they go with the
    partitions, as every other file there does; no footer stands in the way."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0", mode="dynamic", partition_by=["day"])
    run_job(root, "other", "b", partition_by=["day"])
    merge(root)
    assert len(sc.visible_files(root)) == 2, "one mixed file per partition"
    run_job(root, "daily", "gen1", mode="dynamic", partition_by=["day"])
    assert rows(root) == expected("daily", "gen1"), "dynamic replaced both partitions, the other job's rows too"


def test_mode_error_takes_a_merged_file_of_its_own_rows_for_its_own_at_setup(tmp_path):
    """Mode ``error`` refuses a target holding anything but the job's own earlier files: its own rows merged by a
    compaction are still its own (set-up and commit both say so), and are replaced."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0", mode="error")
    merge(root)
    run_job(root, "daily", "gen1", mode="error")
    assert rows(root) == expected("daily", "gen1")
    run_job(root, "other", "b")
    merge(root, "compaction-2")   # now the merged file mixes the other job's rows in
    with pytest.raises(InvalidOutputSpec, match="together with rows of other files"):
        run_job(root, "daily", "gen2", mode="error")
    assert rows(root) == expected("daily", "gen1") + expected("other", "b")


@pytest.mark.parametrize("junk", [b"", b"not parquet at all", b"garbage PAR1", b"\x00" * 4 + b"PAR1"],
                         ids=["empty", "text", "magic_only", "zero_length_footer"])
def test_a_file_that_is_not_parquet_under_a_parquet_name_does_not_stop_the_replacement(tmp_path, junk):
    """The footers are read when a replaced file is missing; another writer's file (or a damaged one) named
    ``*.parquet`` is no compaction's: the next generation commits, and the file is left as it was."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    merge(root)
    stray = tmp_path / "out" / "someone-else.parquet"
    stray.write_bytes(junk)
    c = FileOutputCommitter(root, "daily", algorithm=1, mode="append")
    c.setup_job()
    write_tasks(c, "gen1")
    manifest = c.commit_job(TASKS)
    assert {f["path"] for f in manifest["files"]} | {"someone-else.parquet"} == set(sc.visible_files(root))
    assert stray.read_bytes() == junk


# ------------------------------------------------------------------- attacked from outside (helper, session 14)
def _fault(point: str, fn) -> None:
    arm(point, "raise")
    try:
        with pytest.raises(InjectedFault):
            fn()
    finally:
        disarm()


@pytest.mark.parametrize("point", ["commit_job.after_plan", "commit_job.after_withdraw", "commit_job.mid_delete"])
def test_a_replacing_commit_waits_for_a_compaction_that_fixed_its_plan_over_the_old_files(tmp_path, point):
    """The compaction's job commit fixed its plan over gen0's files and died; gen1's commit, deleting those files
    while the compaction would still roll forward and publish their rows again (rows twice), waits instead
    (``InputsClaimed``, retried, nothing changed); resumed, the compaction commits, and gen1's retry replaces the
    merged file."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    _fault(point, lambda: compact(FileOutputCommitter(root, "compaction", mode="append"), 1, target_size=2**20))
    nxt = FileOutputCommitter(root, "daily", algorithm=1, mode="append")
    nxt.setup_job()
    write_tasks(nxt, "gen1")
    with pytest.raises(InputsClaimed, match="is compacting: this commit waits for it"):
        nxt.commit_job(TASKS)
    merge(root)   # the compaction resumes and rolls forward
    nxt.commit_job(TASKS)   # the retry
    assert rows(root) == expected("daily", "gen1")


@pytest.mark.parametrize("point", ["commit_job.after_plan", "commit_job.after_withdraw", "commit_job.after_moves"])
def test_a_compaction_leaves_alone_the_merged_file_a_replacing_commit_is_deleting(tmp_path, point):
    """gen1's commit plan names the merged file (gen0's rows) and dies; a second compaction must not merge that
    file with other rows (the old rows would outlive the deletion); gen1's resumed commit finishes it."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    merge(root)
    run_job(root, "other", "b")
    nxt = FileOutputCommitter(root, "daily", algorithm=1, mode="append")
    nxt.setup_job()
    write_tasks(nxt, "gen1")
    _fault(point, lambda: nxt.commit_job(TASKS))
    compact(FileOutputCommitter(root, "compaction-2", mode="append"), 1, target_size=2**20)
    nxt.commit_job(TASKS)
    assert rows(root) == expected("daily", "gen1") + expected("other", "b")


def test_rows_read_from_a_merged_file_and_written_by_another_job_are_that_jobs(tmp_path):
    """A job that reads a merged file (pyarrow keeps the footer's metadata in the schema) and writes its rows
    again must not make its file look merged: the next generation of the job whose rows were merged would take
    it for its own and delete it (another job's rows lost)."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    merge(root)
    [merged] = sc.visible_files(root)
    derived = pq.read_table(f"{root}/{merged}")
    assert MERGED_FROM in derived.schema.metadata, "pyarrow keeps it: the case this test is about"
    c = FileOutputCommitter(root, "derive", algorithm=1, mode="append")
    c.setup_job()
    derived = derived.set_column(0, "job", pa.array(["derive"] * derived.num_rows))
    run_task_attempt(c, 0, 1, lambda w: w.write(derived))
    [written] = [f["path"] for f in c.commit_job(1)["files"]]
    assert MERGED_FROM not in (pq.read_metadata(f"{root}/{written}").metadata or {})
    run_job(root, "daily", "gen1")
    assert rows(root) == expected("daily", "gen1") + Counter({("derive", "gen0", t, r): 1 for t in range(TASKS)
                                                             for r in range(2)})


def test_a_footer_naming_another_generation_than_its_file_names_nothing(tmp_path):
    """An entry copied by another writer into a file that is not the named compaction generation's counts for
    nothing (the file's name must carry the generation), nor does a malformed one: no raw error, no deletion."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    merge(root)
    [merged] = sc.visible_files(root)
    metadata = pq.read_metadata(f"{root}/{merged}").metadata
    table = pa.table({"job": ["w"], "tag": ["w"], "task": [0], "row": [0], "day": ["d0"]})
    for name, value in (("copied.parquet", metadata[MERGED_FROM]), ("garbage.parquet", b"n/a"),
                        ("null.parquet", b"null"), ("list.parquet", b'{"by": 1, "files": [2]}')):
        pq.write_table(table.replace_schema_metadata({MERGED_FROM: value}), f"{root}/{name}")
    run_job(root, "daily", "gen1")
    assert rows(root) == expected("daily", "gen1") + Counter({("w", "w", 0, 0): 4})


@pytest.mark.parametrize("where", ["job_below_the_compaction", "job_above_the_compaction"])
def test_the_job_and_the_compaction_need_not_share_a_root(tmp_path, where):
    """Merged files name the files beside them: a job rooted at a partition of the directory a compaction ran over
    (and a partitioned job whose one partition was compacted on its own) replaces what was merged."""
    top = str(tmp_path / "out")
    if where == "job_below_the_compaction":
        root, compaction_root, by = f"{top}/day=d0", top, ()
    else:
        root, compaction_root, by = top, f"{top}/day=d0", ["day"]
    run_job(root, "daily", "gen0", partition_by=by)
    merge(compaction_root)
    run_job(root, "daily", "gen1", partition_by=by)
    assert rows(root) == expected("daily", "gen1")


def test_a_v2_generation_is_refused_at_setup_before_a_task_publishes_anything(tmp_path):
    """With algorithm 2 the tasks publish at their commit: a mixed merged file must refuse the job at its set-up,
    before any task runs, not at its job commit after the new rows were visible beside the old."""
    root = str(tmp_path / "out")
    run_job(root, "daily", "gen0")
    run_job(root, "other", "b")
    merge(root)
    before = (rows(root), read_success_marker(root)["job_uuid"])
    c = FileOutputCommitter(root, "daily", algorithm=2, mode="append")
    with pytest.raises(InvalidOutputSpec, match="together with rows of other files.*Nothing was changed"):
        c.setup_job()
    assert (rows(root), read_success_marker(root)["job_uuid"]) == before
