"""What a task attempt costs on a local disk does not grow with the job (issue 22 item 1).

A new try fences the earlier tries of its task (records them failed, removes their files). On a local disk it finds
them by looking up each lower try number, not by listing the application attempt's ``_attempts/`` directory, which
holds every task's traces: at 10,000 tasks that listing made each set-up twice as slow. The store here is a real
local store that also notes which directories it lists.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import CommitDenied, TaskAttemptWriter, make_committer, run_task_attempt
from airflow_commit_provider.protocol.stores import LocalStore

TABLE = pa.table({"x": [1, 2, 3]})


class ListingStore(LocalStore):
    """A local store that records every directory it lists."""

    def __init__(self, root: str) -> None:
        super().__init__(root, durable=False)
        self.listed: list[str] = []

    def list_dir(self, rel: str) -> list[str]:
        self.listed.append(rel)
        return super().list_dir(rel)


def test_setup_lists_no_directory_of_every_tasks_traces(tmp_path):
    store = ListingStore(str(tmp_path / "out"))
    c = make_committer(store, "job", mode="append")
    c.setup_job()
    for t in range(20):
        assert run_task_attempt(c, t, 1, lambda w: w.write(TABLE)).status == "committed"
    store.listed.clear()
    c.setup_task(20, 1)
    c.setup_task(21, 3)   # a third try: tries 1 and 2 are looked up by name
    assert not [d for d in store.listed if d.endswith("/_attempts")], store.listed


def test_a_retry_still_fences_the_try_it_replaces(tmp_path):
    """The look-up by try number finds what the listing found: the earlier, unfinished try of the same task is
    recorded failed (its commit is refused later) and its files are removed; a committed try is left alone."""
    store = ListingStore(str(tmp_path / "out"))
    c = make_committer(store, "job", mode="append")
    c.setup_job()
    zombie = c.setup_task(0, 1)
    c.setup_task(0, 2)
    assert c.job.ledger.fate(zombie.app_attempt, 0, 1) == "failed"
    with TaskAttemptWriter(c, zombie) as w:   # the zombie wakes and writes on
        w.write(TABLE)
    with pytest.raises(CommitDenied, match="recorded as failed"):
        c.commit_task(zombie, w.rows, sizes=w.sizes)
    assert not [d for d in store.listed if d.endswith("/_attempts")], store.listed


def _tree(root) -> tuple[set[str], set[str]]:
    """(directories, files) under *root*, relative to it."""
    dirs = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    return dirs, files


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_partitioned_attempt_makes_no_directory_per_partition(tmp_path, algorithm):
    """An attempt keeps its partitioned files flat in its own directory (issue 22: partition directories are made
    once, in ``_committed`` or the output, not again by every attempt); the task commit moves them to their
    partitions, and the output holds every row once."""
    c = make_committer(str(tmp_path / "out"), "job", algorithm=algorithm, mode="append", partition_by=("p",))
    c.setup_job()
    table = pa.table({"p": [i % 5 for i in range(50)], "x": list(range(50))})
    ta = c.setup_task(0, 1)
    with TaskAttemptWriter(c, ta, partition_by=("p",)) as w:
        w.write(table)
    work = tmp_path / "out" / ta.work_dir
    dirs, files = _tree(work)
    assert dirs == set() and len(files) == 5 and all(f.startswith("_p.p=") for f in files), (dirs, files)
    c.commit_task(ta, w.rows, sizes=w.sizes)
    assert not work.exists()
    c.commit_job(1)
    import pyarrow.dataset as ds

    got = ds.dataset(str(tmp_path / "out"), format="parquet", partitioning="hive").to_table()
    assert sorted(got.column("x").to_pylist()) == list(range(50))
    assert sorted({r["p"] for r in got.to_pylist()}) == list(range(5))


def test_flat_names_round_trip_escapes_and_fall_back_when_too_long(tmp_path):
    """A file's flat name escapes ``%`` and ``/`` (a partition value with both, a user file name holding
    ``%2F`` literally); a flat name longer than a file system takes keeps its partition directory. Every file is
    committed at its own path."""
    c = make_committer(str(tmp_path / "out"), "job", mode="append")
    c.setup_job()
    ta = c.setup_task(0, 1)
    long_value = "v" * 200
    with TaskAttemptWriter(c, ta) as w:
        for name, partition in (("a%2Fb.dat", {"p": "x/y%z"}), ("c.dat", {"p": long_value, "q": "w" * 60}),
                                ("top%25.dat", None)):
            with w.open_file(name, partition=partition) as fh:
                fh.write(name.encode())
    dirs, files = _tree(tmp_path / "out" / ta.work_dir)
    assert len(dirs) == 2 and any(f.startswith("_p.") for f in files), (dirs, files)  # the long one is nested
    c.commit_task(ta, w.rows, sizes=w.sizes)
    c.commit_job(1)
    out = tmp_path / "out"
    visible = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and not p.name.startswith("_")
               and "_temporary" not in p.parts and "_commits" not in p.parts}
    assert visible == {"p=x%2Fy%25z/a%2Fb.dat", f"p={long_value}/q={'w' * 60}/c.dat", "top%25.dat"}, visible
    assert (out / "p=x%2Fy%25z" / "a%2Fb.dat").read_bytes() == b"a%2Fb.dat"


def test_an_attempt_written_with_partition_directories_still_commits(tmp_path):
    """Attempts of earlier releases (and the writer over a bare store) keep partition directories: the task
    commit moves those as well."""
    c = make_committer(str(tmp_path / "out"), "job", mode="append", partition_by=("p",))
    c.setup_job()
    ta = c.setup_task(0, 1)
    with TaskAttemptWriter(c.store, ta, partition_by=("p",)) as w:
        w.write(pa.table({"p": [1, 2], "x": [10, 20]}))
    assert _tree(tmp_path / "out" / ta.work_dir)[0] == {"p=1", "p=2"}
    c.commit_task(ta, w.rows, sizes=w.sizes)
    c.commit_job(1)
    assert {p.name for p in (tmp_path / "out").iterdir() if p.is_dir()} >= {"p=1", "p=2"}
