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

from airflow_commit_provider.protocol import FileOutputCommitter, InvalidOutputSpec, read_success_marker, \
    run_task_attempt
from airflow_commit_provider.protocol.faults import InjectedFault, arm, disarm
from airflow_commit_provider.protocol.maintenance.compaction import compact
from airflow_commit_provider.protocol.maintenance.provenance import MERGED_FROM, read_origins

from . import scenario as sc

TASKS = 3


def run_job(root: str, job_id: str, tag: str, mode: str = "append", partition_by=()) -> dict:
    """One generation of *job_id*: TASKS tasks of 2 rows each, every row tagged *tag*; committed."""
    c = FileOutputCommitter(root, job_id, algorithm=1, mode=mode, partition_by=partition_by)
    c.setup_job()
    for task in range(TASKS):
        table = pa.table({"job": [job_id] * 2, "tag": [tag] * 2, "task": [task] * 2, "row": [0, 1],
                          "day": ["d0", "d1"]})
        assert run_task_attempt(c, task, 1, lambda w, t=table: w.write(t)).status == "committed"
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
    with pytest.raises(InvalidOutputSpec, match=r"merged 3 of them .* together with rows of 3 other file\(s\).*"
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
    for task in range(TASKS):
        table = pa.table({"job": ["daily"] * 2, "tag": ["gen1"] * 2, "task": [task] * 2, "row": [0, 1],
                          "day": ["d0", "d1"]})
        run_task_attempt(nxt, task, 1, lambda w, t=table: w.write(t))
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
    with pytest.raises(InvalidOutputSpec, match="together with rows of 3 other file"):
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
    for task in range(TASKS):
        table = pa.table({"job": ["daily"] * 2, "tag": ["gen1"] * 2, "task": [task] * 2, "row": [0, 1],
                          "day": ["d0", "d1"]})
        run_task_attempt(c, task, 1, lambda w, t=table: w.write(t))
    manifest = c.commit_job(TASKS)
    assert {f["path"] for f in manifest["files"]} | {"someone-else.parquet"} == set(sc.visible_files(root))
    assert stray.read_bytes() == junk
