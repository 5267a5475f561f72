"""Duplicate cleanup (the Hive story) and compaction through the commit protocol, with real processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, LocalStore
from airflow_commit_provider.protocol.compaction import compact, merge_group, plan_groups, small_parquet_files
from airflow_commit_provider.protocol.dedup import find_duplicates, remove_duplicates

from . import scenario as sc
from .test_crash_matrix import expect_killed


def write(path: str, rows: list[int], pad: int = 0) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table = pa.table({"id": pa.array(rows, pa.int64()), "pad": ["x" * pad] * len(rows)})
    pq.write_table(table, path, compression="none")


def test_hive_duplicates_highest_attempt_wins_never_size(tmp_path):
    root = str(tmp_path)
    write(f"{root}/ds=1/000005_0", [1, 2], pad=5000)   # the larger file is the stale attempt
    write(f"{root}/ds=1/000005_1", [1, 2])
    write(f"{root}/ds=1/000003_0", [3])
    before = sc.all_files(root)
    report = find_duplicates(LocalStore(root))
    assert sc.all_files(root) == before, "dry run changes nothing"
    (group,) = report["groups"]
    assert group["winner"] == ["ds=1/000005_1"] and group["losers"] == ["ds=1/000005_0"]
    assert group["reason"].startswith("highest attempt id")
    remove_duplicates(LocalStore(root), report)
    assert sorted(pq.read_table(root).column("id").to_pylist()) == [1, 2, 3]


def test_commit_record_beats_attempt_id(tmp_path):
    root = str(tmp_path)
    write(f"{root}/000005_0", [1])
    write(f"{root}/000005_1", [1])
    manifest = {"format": "airflow-commit-provider/success", "version": 1, "files": [{"path": "000005_0", "size": 1}]}
    (tmp_path / "_SUCCESS").write_text(json.dumps(manifest))
    report = remove_duplicates(LocalStore(root))
    assert report["deleted"] == ["000005_1"] and report["groups"][0]["reason"] == "listed in a commit record"


def test_spark_names_without_record_are_ambiguous(tmp_path):
    root = str(tmp_path)
    write(f"{root}/part-00005-11111111-1111-1111-1111-111111111111-c000.snappy.parquet", [1])
    write(f"{root}/part-00005-22222222-2222-2222-2222-222222222222-c000.snappy.parquet", [1])
    report = remove_duplicates(LocalStore(root))
    assert report["deleted"] == [] and len(report["ambiguous"]) == 1


def small_files(root: str) -> list[int]:
    ids = []
    for day in ("d0", "d1"):
        for i in range(6):
            rows = list(range(len(ids), len(ids) + 5))
            write(f"{root}/day={day}/small-{i:02d}.parquet", rows)
            ids += rows
    return ids


def _speculative_merge(root: str, group: list[str], attempt: int, barrier, out) -> None:
    from airflow_commit_provider.protocol import CommitDenied, TaskAttemptWriter

    c = FileOutputCommitter(root, "compaction", algorithm=1, mode="append")
    ta = c.setup_task(0, attempt)
    with TaskAttemptWriter(c, ta) as w:
        merge_group(w, group, c.store)
    barrier.wait(timeout=60)
    try:
        c.commit_task(ta, w.rows)
        out.put("won")
    except CommitDenied:
        out.put("denied")


def test_compaction_with_speculation_and_a_crash_mid_commit(tmp_path):
    root = str(tmp_path / "table")
    ids = small_files(root)
    c = FileOutputCommitter(root, "compaction", algorithm=1, mode="append")
    groups = plan_groups(small_parquet_files(c.store), target_size=10**6)
    assert [len(g) for g in groups] == [6, 6]
    c.setup_job(replace_files=[f for g in groups for f in g], replace_first=True)  # as compact() does
    # two attempts of merge task 0 run at the same time (speculation), in two processes
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_speculative_merge, args=(root, groups[0], a, barrier, out)) for a in (1, 2)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert results == ["denied", "won"]
    # the whole compaction then runs in a worker killed in the middle of the job commit's deletions
    code = ("import sys; from airflow_commit_provider.protocol import FileOutputCommitter;"
            "from airflow_commit_provider.protocol.compaction import compact;"
            "compact(FileOutputCommitter(sys.argv[1], 'compaction', algorithm=1, mode='append'), 3, 10**6)")
    import subprocess
    import sys

    env = {**os.environ, "COMMIT_PROVIDER_FAULTS": "commit_job.mid_delete=kill@4"}
    expect_killed(subprocess.run([sys.executable, "-c", code, root], env=env, capture_output=True, text=True), "kill")
    # killed mid-deletion: some inputs are gone, the merged files are not published yet -- rows are missing for
    # now (they are committed and listed in the plan), but no row is ever visible twice
    mid = pq.read_table(root).column("id").to_pylist()
    assert len(mid) == len(set(mid)) and set(mid) < set(ids)
    result = compact(FileOutputCommitter(root, "compaction", algorithm=1, mode="append"), 4, 10**6)
    got = pq.read_table(root).column("id").to_pylist()
    assert sorted(got) == sorted(ids) and len(got) == len(set(got)), "no row lost, no row twice"
    visible = sc.visible_files(root)
    assert len(visible) == 2 and not any("small-" in f for f in visible)
    assert result["totals"]["rows"] == len(ids) and result["deleted"]["files"] == 12


@pytest.mark.parametrize("rerun", [True])
def test_compaction_rerun_after_commit_does_nothing(tmp_path, rerun):
    root = str(tmp_path / "table")
    ids = small_files(root)
    first = compact(FileOutputCommitter(root, "c1", algorithm=1, mode="append"), 1, 10**6)
    again = compact(FileOutputCommitter(root, "c1", algorithm=1, mode="append"), 2, 10**6)
    assert first["job_uuid"] == again["job_uuid"]
    assert sorted(pq.read_table(root).column("id").to_pylist()) == sorted(ids)
