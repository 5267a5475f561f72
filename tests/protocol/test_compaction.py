"""Compaction as a job with a fixed plan (:mod:`airflow_commit_provider.protocol.maintenance.compaction`), from outside: real
processes, real Parquet files, every row counted by pyarrow and duckdb, every marker verified."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_commit_provider.protocol import (
    CorruptRecord,
    FileOutputCommitter,
    InputsClaimed,
    faults,
    read_success_marker,
    run_task_attempt,
)
from airflow_commit_provider.protocol.records.claims import InputClaims, newest
from airflow_commit_provider.protocol.maintenance.compaction import CompactionPlan, compact

from ..support import resume, wait_stopped
from . import compaction_worker as worker
from . import scenario as sc

DAYS = ("d0", "d1")
FILES_PER_DAY = 6
ROWS_PER_FILE = 5


def small_table(root: str) -> list[int]:
    """Two partitions of six five-row files each: 60 ids, each once."""
    ids: list[int] = []
    for day in DAYS:
        os.makedirs(f"{root}/day={day}", exist_ok=True)
        for i in range(FILES_PER_DAY):
            rows = list(range(len(ids), len(ids) + ROWS_PER_FILE))
            pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), f"{root}/day={day}/small-{i:02d}.parquet",
                           compression="none")
            ids += rows
    return ids


def ids_pyarrow(root: str) -> Counter[int]:
    return Counter(r["id"] for r in sc.read_rows(root))


def ids_duckdb(root: str) -> Counter[int]:
    import duckdb

    files = [f"{root}/{p}" for p in sc.visible_files(root)]
    if not files:
        return Counter()
    rows = duckdb.connect().execute("select id from read_parquet(?, hive_partitioning = true)", [files]).fetchall()
    return Counter(r[0] for r in rows)


def assert_rows(root: str, expected: Counter[int]) -> None:
    """The rows readers see are exactly *expected* (each id as often as it says), read by pyarrow and duckdb, and
    every marker present tells the truth."""
    for read in (ids_pyarrow, ids_duckdb):
        got = read(root)
        twice = sorted(i for i, n in got.items() if n > expected.get(i, 0))
        lost = sorted(i for i, n in expected.items() if got.get(i, 0) < n)
        assert not twice and not lost, f"{read.__name__}: {len(twice)} ids too often {twice[:10]}, " \
                                       f"{len(lost)} ids lost {lost[:10]}"
    sc.assert_markers_tell_truth(root)


def test_two_overlapping_compactions_one_commits_the_other_refuses(tmp_path):
    """Run 2 has merged every group and is at its job commit when run 1, planned over the same inputs, runs
    from start to end. Before the fix both committed: run 2's plan kept only the inputs still visible (none) and
    published its merged files next to run 1's: 60 of 60 ids twice, with a ``_SUCCESS`` that verified."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    run2 = worker.start(root, "compact-run2", 1, faults="commit_job.after_recovery=stop")
    wait_stopped(run2)
    run1 = worker.run(root, "compact-run1", 1)
    code, out, err = resume(run2)
    assert_rows(root, Counter(ids))
    assert (run1.returncode, code) == (worker.REFUSED, 0), f"run 1: {run1.stderr}\nrun 2: {err}"
    assert "InputsClaimed" in run1.stderr and "compact-run2" in run1.stderr, run1.stderr
    assert read_success_marker(root, verify_files=True)["totals"]["rows"] == len(ids)
    assert not any("small-" in f for f in sc.visible_files(root)), "the committed run merged every input"


def _dynamic_rewrite(root: str, day: str, ids: list[int]) -> None:
    """A job of this provider replacing partition *day* (mode dynamic) with *ids*."""
    c = FileOutputCommitter(root, f"rewrite-{day}", algorithm=1, mode="dynamic", partition_by=["day"])
    c.setup_job()
    table = pa.table({"id": pa.array(ids, pa.int64()), "day": [day] * len(ids)})
    run_task_attempt(c, 0, 1, lambda w: w.write(table))
    c.commit_job(1)


def test_a_retry_after_a_dynamic_job_rewrote_a_partition_loses_nothing(tmp_path):
    """Try 1 merges d0's group (task 0), then dies; a dynamic job replaces d0 before try 2. Before the fix, try 2
    rebuilt its groups from the inputs still there (only d1's), so task 0 stood for d1's group and recovery
    adopted the old d0 merge in its place: d1's 30 ids were lost and d0's 30 replaced ids came back."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    first = worker.run(root, "compact", 1, faults="commit_task.after_record=kill@1")
    assert first.returncode == -signal.SIGKILL, first.stderr
    new_d0 = list(range(1000, 1030))
    _dynamic_rewrite(root, "d0", new_d0)
    expected = Counter(new_d0 + ids[30:])
    assert_rows(root, expected)
    retry = worker.run(root, "compact", 2)
    assert_rows(root, expected)   # whatever the retry did, no row lost and none back from the replaced d0
    assert retry.returncode == worker.REFUSED, retry.stdout + retry.stderr
    assert "day=d0/small-00.parquet" in retry.stderr, retry.stderr


def _claim_after_barrier(root: str, job_id: str, barrier, out) -> None:
    c = FileOutputCommitter(root, job_id, algorithm=1, mode="append")
    job = c.job_record()
    barrier.wait(timeout=60)
    try:
        InputClaims(c.store, job).claim_all(job.replace_files)
        out.put((job_id, "holds"))
    except InputsClaimed:
        out.put((job_id, "refused"))


def test_two_compactions_claiming_overlapping_inputs_at_once_exactly_one_holds_them(tmp_path):
    """Two compactions set up over overlapping inputs claim them at the same moment, in two processes: whatever
    the interleaving, one holds every input it asked for, and the other holds none (it released what it had)."""
    root = str(tmp_path / "table")
    small_table(root)
    files = sorted(sc.visible_files(root))
    jobs = {"compact-a": files[:8], "compact-b": files[4:]}
    ctx = mp.get_context("spawn")
    for round_ in range(3):
        for job_id, inputs in jobs.items():
            c = FileOutputCommitter(root, f"{job_id}-{round_}", algorithm=1, mode="append")
            c.setup_job(replace_files=inputs, replace_first=True)
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim_after_barrier, args=(root, f"{j}-{round_}", barrier, out)) for j in jobs]
        for p in procs:
            p.start()
        outcomes = dict(out.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=60)
        assert sorted(outcomes.values()) == ["holds", "refused"], outcomes
        store = FileOutputCommitter(root, "any", algorithm=1, mode="append").store
        for job_id, inputs in jobs.items():
            tops = {rel: newest(store, rel) for rel in inputs}
            mine = {rel for rel, top in tops.items() if top is not None and top.job_id == f"{job_id}-{round_}"}
            assert mine == (set(inputs) if outcomes[f"{job_id}-{round_}"] == "holds" else set()), (job_id, mine)
        for job_id in jobs:  # end the round: the next one starts with every input free
            c = FileOutputCommitter(root, f"{job_id}-{round_}", algorithm=1, mode="append")
            InputClaims(c.store, c.job_record()).release_all(c.job_record().replace_files)
            c.abort_job()


def test_a_dead_compaction_holds_nothing_a_failed_one_holds_until_aborted(tmp_path):
    """A compaction killed after fixing its plan still holds its inputs (its run can be cleared and finish): another
    compaction refuses, naming it. Once it is aborted (its job record purged) it is dead, and the other takes its
    inputs over and commits."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    killed = worker.run(root, "compact-first", 1, faults="compact.after_plan=kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    other = worker.run(root, "compact-second", 1)
    assert other.returncode == worker.REFUSED and "compact-first" in other.stderr, other.stderr
    assert_rows(root, Counter(ids))
    FileOutputCommitter(root, "compact-first", algorithm=1, mode="append").abort_job()
    other = worker.run(root, "compact-second", 2)
    assert other.returncode == 0, other.stderr
    assert_rows(root, Counter(ids))
    assert not os.path.exists(f"{root}/_temporary"), sc.all_files(root)


def test_a_compaction_planned_before_another_committed_refuses_at_its_claims(tmp_path):
    """Planned (job record created, nothing claimed yet) and paused; another compaction runs from start to end;
    the first wakes: it gets the claims (the other released them), then finds its inputs gone and refuses."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    late = worker.start(root, "compact-late", 1, faults="setup_job.after_app_attempt=stop")
    wait_stopped(late)
    first = worker.run(root, "compact-first", 1)
    assert first.returncode == 0, first.stderr
    code, _, err = resume(late)
    assert code == worker.REFUSED and "InputsChanged" in err and "(gone)" in err, err
    assert_rows(root, Counter(ids))
    assert FileOutputCommitter(root, "compact-late", algorithm=1, mode="append").status()["state"] == "absent"


def test_an_input_rewritten_under_its_name_with_the_same_size_is_caught(tmp_path):
    """The merges are done when another writer replaces one input by a file of the same name and size with other
    rows; the commit refuses (the size alone would not have told), and the new rows are there, once."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    comp = worker.start(root, "compact", 1, faults="commit_job.after_recovery=stop")
    wait_stopped(comp)
    path = f"{root}/day=d1/small-02.parquet"
    size = os.path.getsize(path)
    new = list(range(7000, 7000 + ROWS_PER_FILE))
    pq.write_table(pa.table({"id": pa.array(new, pa.int64())}), path + ".tmp", compression="none")
    assert os.path.getsize(path + ".tmp") == size
    os.replace(path + ".tmp", path)
    code, _, err = resume(comp)
    assert code == worker.REFUSED and "replaced by another file of the same name" in err, err
    old = set(range(40, 45))  # the ids small-02 of d1 held
    assert_rows(root, Counter([i for i in ids if i not in old] + new))


def test_files_whose_schemas_do_not_merge_are_refused_by_name(tmp_path):
    """A partition holds a file whose ``id`` is text: the merge cannot cast it. The compaction fails naming both
    files and both schemas, changes nothing, and holds nothing (another compaction may run afterwards)."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    pq.write_table(pa.table({"id": ["not a number"]}), f"{root}/day=d1/text-id.parquet")
    before = sorted(sc.all_files(root))
    ran = worker.run(root, "compact", 1)
    assert ran.returncode == worker.REFUSED, ran.stderr
    assert "InvalidOutputSpec" in ran.stderr and "text-id.parquet" in ran.stderr and "id: string" in ran.stderr
    after = sorted(sc.all_files(root))
    assert [f for f in after if not f.startswith("_temporary/_claims/")] == before, "nothing changed"
    store = FileOutputCommitter(root, "compact", algorithm=1, mode="append").store
    chains = {f.rsplit("/", 1)[0][len("_temporary/_claims/"):] for f in after if f.startswith("_temporary/")}
    assert chains and all(newest(store, rel).job_id is None for rel in chains), "every claim released"
    assert Counter(r["id"] for r in sc.read_rows(f"{root}/day=d0")) == Counter(ids[:30])
    os.remove(f"{root}/day=d1/text-id.parquet")
    assert worker.run(root, "compact-next", 1).returncode == 0
    assert_rows(root, Counter(ids))


def test_a_corrupt_compaction_plan_stops_the_compaction_naming_it(tmp_path):
    """A plan whose groups do not split the job's inputs (or that does not parse) is refused by name, before any
    merge; the table is untouched."""
    root = str(tmp_path / "table")
    ids = small_table(root)
    c = FileOutputCommitter(root, "compact", algorithm=1, mode="append")
    faults.arm("compact.after_plan", "raise")
    with pytest.raises(faults.InjectedFault):
        compact(c, 1, 10**6)
    faults.disarm()
    where = c.layout.compaction_plan(c.job_record().job_uuid)
    doc = json.loads(c.store.read_bytes(where))
    assert CompactionPlan.from_json(c.store.read_bytes(where), where).inputs == list(c.job_record().replace_files)
    doc["groups"] = doc["groups"][:1]
    c.store.write_bytes(where, json.dumps(doc).encode())
    with pytest.raises(CorruptRecord, match="does not split the inputs of job compact"):
        compact(c, 2, 10**6)
    doc["groups"][0][0].pop("size")
    c.store.write_bytes(where, json.dumps(doc).encode())
    with pytest.raises(CorruptRecord, match=r"lacks the field 'groups\[0\]\[0\].size'"):
        compact(c, 3, 10**6)
    assert_rows(root, Counter(ids))


def test_a_compaction_leaves_a_task_output_present_twice_to_deduplication(tmp_path):
    """A second copy of a task's file under a copy name (Hive's ``mvFile`` gives ``..._copy_1.parquet``) holds the
    task's rows again. Merged with the other small files, those rows would sit in a file whose name tells nothing,
    and deduplication, which proves a copy by its name and its bytes, could never remove them: the table would
    hold them twice for good. The compaction merges the other files and leaves both copies; deduplication then
    removes the copy, and every row is there once."""
    from airflow_commit_provider.protocol.maintenance.dedup import find_duplicates, remove_duplicates
    from airflow_commit_provider.protocol.stores import store_for

    root = tmp_path / "table"
    root.mkdir()
    job = "3f1c2b9e-1111-2222-3333-444455556666"
    twice = pa.table({"id": pa.array(range(0, 100), pa.int64())})
    pq.write_table(twice, root / f"part-00005-{job}-c000.snappy.parquet")
    pq.write_table(twice, root / f"part-00005-{job}-c000.snappy_copy_1.parquet")
    for task in (6, 7):
        pq.write_table(pa.table({"id": pa.array(range(task * 100, task * 100 + 100), pa.int64())}),
                       root / f"part-{task:05d}-{job}-c000.snappy.parquet")
    assert len(find_duplicates(store_for(str(root))).deletions) == 1

    result = compact(FileOutputCommitter(str(root), "compact-dups", mode="append"), 1, target_size=10**9)

    assert result["state"] == "committed" and result["inputs"] == 2, result
    names = sorted(n for n in os.listdir(root) if not n.startswith(("_", ".")))
    assert f"part-00005-{job}-c000.snappy.parquet" in names
    assert f"part-00005-{job}-c000.snappy_copy_1.parquet" in names
    remove_duplicates(store_for(str(root)))
    ids = Counter(i for n in os.listdir(root) if not n.startswith(("_", "."))
                  for i in pq.read_table(root / n).column("id").to_pylist())
    assert sorted(ids) == list(range(0, 100)) + list(range(600, 800)) and set(ids.values()) == {1}
