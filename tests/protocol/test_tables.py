"""Job commits into Delta and Iceberg tables: one transaction per job generation, exactly once across resumes,
clears and zombies, read back row by row with each format's own reader (deltalake; pyiceberg's scan)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import faults, read_success_marker  # noqa: E402
from airflow_commit_provider.protocol.faults import FAULT_EXIT_CODE  # noqa: E402
from airflow_commit_provider.protocol.tables import SchemaMismatch  # noqa: E402
from airflow_commit_provider.protocol import CommitDenied, InvalidOutputSpec, TaskAttemptWriter, run_task_attempt  # noqa: E402

from ..conftest import REPO  # noqa: E402
from .tables_worker import committer_for, run_job, task_rows  # noqa: E402

FORMATS = ["delta", "iceberg"]


@pytest.fixture(params=FORMATS)
def fmt(request) -> str:
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[request.param])
    return request.param


@pytest.fixture
def base(tmp_path, fmt) -> dict:
    """The job's configuration: a Delta table at a path, or an Iceberg table in a SQLite catalog in a warehouse."""
    where = {"location": str(tmp_path / "events")} if fmt == "delta" else \
        {"location": str(tmp_path / "warehouse"), "table_name": "ns.events"}
    return {"format": fmt, **where, "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 3,
            "rows": 4, "gen": 0}


def iceberg_table(cfg: dict):
    from airflow_commit_provider.protocol.tables.iceberg import IcebergTarget
    return IcebergTarget.open(cfg["table_name"], cfg.get("catalog"), cfg["location"]).catalog.load_table(
        cfg["table_name"])


def delta_table(cfg: dict):
    import deltalake
    return deltalake.DeltaTable(cfg["location"], storage_options=cfg.get("storage_options"))


def rows(cfg: dict) -> list[tuple[int, int, int]]:
    """Every row of the table's current version, as the format's reader reads it: (id, day, gen), sorted."""
    if cfg["format"] == "delta":
        t = pa.table(delta_table(cfg).to_pyarrow_table())
    else:
        t = iceberg_table(cfg).scan().to_arrow()
    return sorted(zip(t["id"].to_pylist(), t["day"].to_pylist(), t["gen"].to_pylist()))


def snapshot_rows(cfg: dict) -> list[tuple[int, int, int]]:
    """The same rows read a second way, by pyarrow over the files the current snapshot lists (duckdb's delta and
    iceberg extensions do not install offline): no table reader involved."""
    import pyarrow.parquet as pq
    if cfg["format"] == "delta":
        import deltalake
        dt = deltalake.DeltaTable(cfg["location"])
        paths = [os.path.join(cfg["location"], a["path"]) for a in
                 pa.table(dt.get_add_actions(flatten=False)).to_pylist()]
    else:
        paths = [t.file.file_path.removeprefix("file://") for t in iceberg_table(cfg).scan().plan_files()]
    out = []
    for path in paths:
        t = pq.read_table(path)
        out += zip(t["id"].to_pylist(), t["day"].to_pylist(), t["gen"].to_pylist())
    return sorted(out)


def transactions(cfg: dict) -> int:
    """How many transactions the table holds (Delta versions; Iceberg snapshots)."""
    if cfg["format"] == "delta":
        return delta_table(cfg).version() + 1
    return len(iceberg_table(cfg).metadata.snapshots)


def table_id(manifest_table: dict) -> int:
    return manifest_table.get("version", manifest_table.get("snapshot_id"))


def root(cfg: dict) -> str:
    return committer_for(cfg).store.url()


def expected(tasks: int = 3, n: int = 4, gen: int = 0, base: int = 0) -> list[tuple[int, int, int]]:
    return sorted((base + t * 1000 + i, i % 2, gen) for t in range(tasks) for i in range(n))


def spawn(cfg: dict, fault: str | None = None, **popen: object) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(faults.ENV_VAR, None)
    if fault:
        env[faults.ENV_VAR] = fault
    return subprocess.Popen([sys.executable, "-m", "tests.protocol.tables_worker", json.dumps(cfg)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def run(cfg: dict, fault: str | None = None) -> subprocess.CompletedProcess:
    proc = spawn(cfg, fault)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_job_commit_is_one_table_transaction(base):
    manifest = run_job(base)
    assert rows(base) == snapshot_rows(base) == expected()
    assert transactions(base) == 1
    assert manifest["table"]["files_added"] == len(manifest["files"]) == 6
    assert read_success_marker(root(base))["table"] == manifest["table"]
    if base["format"] == "delta":
        import deltalake
        dt = deltalake.DeltaTable(base["location"])
        assert manifest["table"]["version"] == 0 and dt.metadata().partition_columns == ["day"]
        assert dt.transaction_version("commit-provider:events-1") == 0
        listed = {a["path"] for a in pa.table(dt.get_add_actions(flatten=False)).to_pylist()}
        assert listed == {f["path"] for f in manifest["files"]}
    else:
        table = iceberg_table(base)
        snap = table.current_snapshot()
        assert manifest["table"]["snapshot_id"] == snap.snapshot_id
        assert snap.summary["commit-provider.job-id"] == "events-1"
        assert snap.summary["commit-provider.generation"] == "0"
        assert [f.name for f in table.spec().fields] == ["day"]
        listed = {t.file.file_path for t in table.scan().plan_files()}
        assert listed == {f"{table.location()}/data/{f['path']}" for f in manifest["files"]}
    assert not os.path.exists(os.path.join(root(base), "_temporary"))


def test_nothing_is_visible_before_the_transaction(base):
    run_job(base)
    proc = run({**base, "job_id": "events-2", "gen": 1}, "table_commit.before=exit")
    assert proc.returncode == FAULT_EXIT_CODE, proc.stderr
    # the second job's files are in the table's data directory already, but no snapshot lists them
    assert rows(base) == expected()
    assert transactions(base) == 1


@pytest.mark.parametrize("point", [
    "commit_job.after_recovery", "commit_job.after_plan", "commit_job.after_withdraw", "commit_job.mid_move",
    "commit_job.after_moves", "commit_job.after_deletes", "table_commit.before", "table_commit.after",
    "commit_job.after_commit_log", "commit_job.after_success", "commit_job.after_cleanup"])
@pytest.mark.parametrize("kill", ["exit", "kill"])
def test_job_commit_killed_at_every_point_then_resumed_commits_once(base, point, kill):
    cfg = {**base, "job_id": "events-2", "gen": 1}
    run_job(base)                                        # an earlier job's rows, which must stay
    proc = run(cfg, f"{point}={kill}@2" if point == "commit_job.mid_move" else f"{point}={kill}")
    assert proc.returncode == (FAULT_EXIT_CODE if kill == "exit" else -9), proc.stderr
    assert rows(base) in (expected(), sorted(expected() + expected(gen=1))), "a partial job is visible"
    again = run({**cfg, "phase": "commit"})              # the retry: a new process resumes the commit
    assert again.returncode == 0, again.stderr
    assert rows(base) == snapshot_rows(base) == sorted(expected() + expected(gen=1))
    assert transactions(base) == 2, "the resumed commit made a second transaction"
    landed = json.loads(again.stdout)["table"]
    assert table_id(read_success_marker(root(base))["table"]) == table_id(landed)
    # and once more: committed and cleaned up, nothing changes
    assert run({**cfg, "phase": "commit"}).returncode == 0
    assert transactions(base) == 2


@pytest.mark.parametrize("mode", ["append", "overwrite", "dynamic"])
def test_clear_after_success_replaces_the_earlier_generation(base, mode):
    run_job({**base, "job_id": "other", "gen": 9, "tasks": 1})   # another job's rows (ids 0..3, both days)
    cfg = {**base, "mode": mode}
    first = run_job({**cfg, "gen": 0})
    second = run_job({**cfg, "gen": 1})                  # a clear after success: the next generation
    assert second["generation"] == 1 and transactions(base) == 3
    kept_other = [] if mode in ("overwrite", "dynamic") else expected(tasks=1, gen=9)
    assert rows(base) == snapshot_rows(base) == sorted(kept_other + expected(gen=1))
    # the first generation replaced the other job's two files (overwrite, dynamic: both days), the second exactly
    # the first generation's files
    assert first["table"]["files_removed"] == (0 if mode == "append" else 2)
    assert second["table"]["files_removed"] == len(first["files"])


def test_zombie_of_an_older_generation_adds_nothing(base):
    zombie = spawn(base, "table_commit.before=stop")     # stops on the snapshot it checked, before sending
    os.waitpid(zombie.pid, os.WUNTRACED)
    run_job({**base, "phase": "commit"})                 # a retry finishes generation 0
    run_job({**base, "gen": 1})                          # a clear after success: generation 1
    assert rows(base) == expected(gen=1)
    os.kill(zombie.pid, signal.SIGCONT)
    _out, err = zombie.communicate(timeout=120)
    assert zombie.returncode != 0 and "GenerationSuperseded" in err, err
    assert rows(base) == expected(gen=1)
    assert transactions(base) == 2


def test_two_processes_committing_one_generation_add_it_once(base):
    first = spawn(base, "table_commit.before=stop")
    os.waitpid(first.pid, os.WUNTRACED)
    second = run({**base, "phase": "commit"})            # passes the same check, commits first
    assert second.returncode == 0, second.stderr
    os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    # refused by the format, it then finds the job record gone (the second run finished the commit) and returns
    # that commit's manifest, changing nothing more
    assert first.returncode == 0, err
    assert json.loads(out)["table"] == json.loads(second.stdout)["table"]
    assert rows(base) == expected()
    assert transactions(base) == 1


def test_a_later_job_with_another_schema_fails_before_anything_is_visible(base):
    run_job(base)
    c = committer_for({**base, "job_id": "events-2"})
    c.setup_job()
    run_task_attempt(c, 0, 1, lambda w: w.write(task_rows(0, 4, 1, {"gen": pa.array(["x"] * 4)})))
    with pytest.raises(SchemaMismatch, match=r"changed type\(s\) \['gen: "):
        c.commit_job(1)
    assert c.job.commit_plan(c.job_record()) is None, "the plan was fixed although the schema differs"
    assert rows(base) == expected()
    c.abort_job()
    assert not os.path.exists(os.path.join(root(base), "_temporary"))


def test_mode_error_refuses_a_table_holding_data(base):
    run_job(base)
    with pytest.raises(InvalidOutputSpec, match="already holds data"):
        committer_for({**base, "job_id": "events-2", "mode": "error"}).setup_job()


def both_stopped_then(base: dict, first: dict, second: dict) -> tuple[subprocess.CompletedProcess,
                                                                     subprocess.CompletedProcess]:
    """Two jobs' processes, each stopped just before its table transaction (both built on the same snapshot),
    resumed in order: *first* commits before *second* sends its transaction."""
    a = spawn({**base, **first}, "table_commit.before=stop")
    os.waitpid(a.pid, os.WUNTRACED)
    b = spawn({**base, **second}, "table_commit.before=stop")
    os.waitpid(b.pid, os.WUNTRACED)
    done = []
    for proc in (a, b):
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done[0], done[1]


def test_two_jobs_appending_at_once_both_land(base):
    run_job({**base, "job_id": "seed", "gen": 9, "tasks": 1})          # the table exists: both read one snapshot
    a, b = both_stopped_then(base, {"job_id": "a", "gen": 1}, {"job_id": "b", "gen": 2})
    assert a.returncode == b.returncode == 0
    assert rows(base) == sorted(expected(tasks=1, gen=9) + expected(gen=1) + expected(gen=2))
    assert transactions(base) == 3


def test_two_jobs_overwriting_one_partition_at_once_one_wins(base):
    run_job({**base, "job_id": "seed", "gen": 9, "tasks": 1})
    a, b = both_stopped_then(base, {"job_id": "a", "gen": 1, "mode": "dynamic"},
                             {"job_id": "b", "gen": 2, "mode": "dynamic"})
    assert a.returncode == 0, a.stderr
    assert b.returncode != 0, "the second overwrite of the same partitions committed on a snapshot it did not read"
    refusal = "CommitFailedError" if base["format"] == "delta" else "ValidationException"
    assert refusal in b.stderr, b.stderr[-2000:]
    assert rows(base) == expected(gen=1)                                # a's rows, once; nothing of b
    assert transactions(base) == 2
    # b's retry resumes its commit on the new snapshot: it replaces a's rows, as a later overwrite would
    retry = run({**base, "job_id": "b", "gen": 2, "mode": "dynamic", "phase": "commit"})
    assert retry.returncode == 0, retry.stderr
    assert rows(base) == expected(gen=2)
    assert transactions(base) == 3


def referenced_anywhere(cfg: dict) -> set[str]:
    """Every data file some version (Delta) or snapshot (Iceberg) of the table lists, as a local path."""
    if cfg["format"] == "delta":
        import deltalake
        dt = deltalake.DeltaTable(cfg["location"])
        out = set()
        for version in range(dt.version() + 1):
            dt.load_as_version(version)
            out |= {os.path.join(cfg["location"], a["path"])
                    for a in pa.table(dt.get_add_actions(flatten=False)).to_pylist()}
        return out
    table = iceberg_table(cfg)
    return {t.file.file_path.removeprefix("file://") for s in table.metadata.snapshots
            for t in table.scan(snapshot_id=s.snapshot_id).plan_files()}


def referenced_now(cfg: dict) -> set[str]:
    """The data files the table's current version references, relative to its data root, as its own reader lists
    them (local or S3; Delta's log keeps paths URI-encoded once more than the files' names)."""
    from urllib.parse import unquote
    if cfg["format"] == "delta":
        return {unquote(a["path"]) for a in pa.table(delta_table(cfg).get_add_actions(flatten=False)).to_pylist()}
    table = iceberg_table(cfg)
    return {t.file.file_path.removeprefix(f"{table.location()}/data/") for t in table.scan().plan_files()}


def parquet_files(root_dir: str) -> set[str]:
    return {os.path.join(d, f) for d, _dirs, names in os.walk(root_dir) for f in names if f.endswith(".parquet")}


@pytest.mark.parametrize("keep_committed", [True, False])
def test_files_no_snapshot_lists_are_removed_files_a_snapshot_lists_never(base, keep_committed):
    """A failed attempt, a denied one and an aborted job leave no file outside the table's snapshots; a clear after
    success removes the earlier generation's files from the table, never from the disk (a version lists them)."""
    run_job(base)                                                        # generation 0
    c = committer_for(base)
    c.setup_job()                                                        # generation 1 (a clear after success)
    run_task_attempt(c, 0, 1, lambda w: w.write(task_rows(0, 4, 1)))
    ta = c.setup_task(1, 1)                                              # try 1 of task 1 dies after writing
    with TaskAttemptWriter(c, ta, partition_by=["day"]) as w:
        w.write(task_rows(1, 4, 1))
    run_task_attempt(c, 1, 2, lambda w: w.write(task_rows(1, 4, 1)))    # try 2 fences it and commits
    with pytest.raises(CommitDenied):
        c.commit_task(ta)                                                # the zombie try is denied
    c.commit_job(2)
    other = committer_for({**base, "job_id": "aborted"})               # a job that never commits
    other.setup_job()
    run_task_attempt(other, 0, 1, lambda w: w.write(task_rows(5, 4, 7)))
    other.abort_job(keep_committed=keep_committed)
    data = committer_for(base).table.data_root
    kept = parquet_files(data) - parquet_files(os.path.join(data, "_temporary"))
    assert kept == referenced_anywhere(base), "a file outside every snapshot, or a listed file deleted"
    assert rows(base) == expected(tasks=2, gen=1)
    if not keep_committed:
        assert parquet_files(os.path.join(data, "_temporary")) == set()


def one_task_commit(cfg: dict, job_id: str, gen: int, days: list, day_type: pa.DataType,
                    mode: str = "dynamic") -> None:
    """A job of one task writing one row per value of *days* (column ``day`` of *day_type*), committed."""
    c = committer_for({**cfg, "job_id": job_id, "mode": mode})
    c.setup_job()
    data = pa.table({"id": pa.array(range(len(days)), pa.int64()), "day": pa.array(days, day_type),
                     "gen": pa.array([gen] * len(days), pa.int64())})
    run_task_attempt(c, 0, 1, lambda w: w.write(data))
    c.commit_job(1)


def test_dynamic_replaces_date_partitions_as_the_format_stores_them(base):
    """Partition values of another type than the directory's text (a date: Iceberg keeps days since 1970)."""
    import datetime as dt
    days = [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]
    one_task_commit(base, "first", 0, days, pa.date32())
    one_task_commit(base, "second", 1, days[1:], pa.date32())       # replaces 2024-01-02 only
    if base["format"] == "delta":
        import deltalake
        t = pa.table(deltalake.DeltaTable(base["location"]).to_pyarrow_table())
    else:
        t = iceberg_table(base).scan().to_arrow()
    assert sorted(zip(t["day"].to_pylist(), t["gen"].to_pylist())) == [(days[0], 0), (days[1], 1)]


def job_record_doc(c) -> dict:
    return json.loads(c.store.read_bytes(c.job.layout.job_record))


def test_the_job_record_names_the_table_and_a_committer_publishing_elsewhere_is_refused(base, tmp_path):
    """Set up as a table, the job refuses a committer of files (and of the other format, or of another Iceberg
    table at the same location) by name, before anything is written; and the other way round."""
    from airflow_commit_provider.protocol import FileOutputCommitter, JobConfigMismatch, OwnedByTable
    from airflow_commit_provider.protocol.tables import table_target
    from airflow_commit_provider.protocol.tables.iceberg import IcebergTarget

    c = committer_for(base)
    c.setup_job()
    ours = {"format": "delta"} if base["format"] == "delta" else {"format": "iceberg", "name": "ns.events"}
    assert job_record_doc(c)["table"] == ours
    data_root = c.table.data_root
    files = FileOutputCommitter(data_root, base["job_id"], mode="append", partition_by=["day"], durable=False)
    with pytest.raises(JobConfigMismatch, match=r"set up to publish into .*, but this committer publishes into a "
                                                r"directory of files"):
        files.setup_task(0, 1)
    if base["format"] == "iceberg":
        other = IcebergTarget(c.table.catalog, "ns.other", c.table.location)   # same files, another table
        elsewhere = [other, table_target("delta", data_root)]
        named = [r"iceberg table ns.events, but this committer publishes into iceberg table ns.other",
                 r"iceberg table ns.events, but this committer publishes into a delta table"]
    else:
        elsewhere = []
        named = []
    for table, message in zip(elsewhere, named):
        wrong = FileOutputCommitter(data_root, base["job_id"], mode="append", partition_by=["day"], table=table,
                                    durable=False)
        with pytest.raises(JobConfigMismatch, match=message):
            wrong.commit_job(0)
    run_task_attempt(c, 0, 1, lambda w: w.write(task_rows(0, 4, 0)))
    c.commit_job(1)
    assert rows(base) == expected(tasks=1)

    # the other way: a job of files at the data root is refused at its setup now that a table is there
    # (test_filejob_tables.py); one set up before its table existed, then committed into it, by its record
    with pytest.raises(OwnedByTable):
        FileOutputCommitter(data_root, "files-1", mode="append", partition_by=["day"], durable=False).setup_job()
    fresh = {**base, "location": str(tmp_path / "fresh"), "job_id": "files-1"}
    files_job = FileOutputCommitter(committer_for(fresh).table.data_root, "files-1", mode="append",
                                    partition_by=["day"], durable=False)
    files_job.setup_job()
    assert "table" not in job_record_doc(files_job), "a directory job's record changed"
    run_task_attempt(files_job, 0, 1, lambda w: w.write(task_rows(1, 4, 5)))
    with pytest.raises(JobConfigMismatch, match=r"set up to publish into a directory of files \(no table_format\), "
                                                r"but this committer publishes into"):
        committer_for(fresh).commit_job(1)
    assert rows(base) == expected(tasks=1), "the refused commit published something"


def test_partition_values_that_need_escaping_are_replaced_by_dynamic_and_by_a_clear(base):
    """Values whose directory names are escaped (``p=x%2Fy``): a dynamic overwrite replaces exactly their
    partition, and a clear after success replaces the earlier generation's files there, as for plain values.
    (Delta's log keeps paths URI-encoded once more: compared undecoded, nothing there was ever removed.)"""
    values = ["x/y", "a%b", "s p"]

    def write(job_id: str, gen: int, only: list, mode: str = "dynamic") -> None:
        one_task_commit(base, job_id, gen, only, pa.string(), mode)

    def days_and_gens() -> list:
        if base["format"] == "delta":
            t = pa.table(delta_table(base).to_pyarrow_table())
        else:
            t = iceberg_table(base).scan().to_arrow()
        return sorted(zip(t["day"].to_pylist(), t["gen"].to_pylist()))

    write("first", 0, values)
    write("second", 1, ["x/y"])                      # replaces x/y only
    assert days_and_gens() == [("a%b", 0), ("s p", 0), ("x/y", 1)]
    write("second", 2, ["x/y"], mode="append")       # a clear after success: generation 1 of job "second"
    assert days_and_gens() == [("a%b", 0), ("s p", 0), ("x/y", 2)]


def test_mode_error_lets_a_clear_after_success_replace_the_jobs_own_rows(base):
    """Mode ``error`` refuses a table holding others' data, not the job's own earlier generation: a clear after
    success replaces it, as it does for a directory of files."""
    cfg = {**base, "mode": "error"}
    run_job(cfg)
    second = run_job({**cfg, "gen": 1})
    assert second["generation"] == 1 and second["table"]["files_removed"] == 6
    assert rows(base) == expected(gen=1)
    with pytest.raises(InvalidOutputSpec, match="cannot write there in mode 'error'"):   # another job still is
        committer_for({**cfg, "job_id": "events-2"}).setup_job()


def test_a_table_on_memory_is_refused_before_anything_is_made_and_a_local_one_commits(base):
    """delta-rs's ``memory://`` is not fsspec's (the table's log and the job's records would live in two
    memories), and either lives in one process: refused up front, as a location or as an Iceberg catalog's
    warehouse, with nothing made in memory nor a catalog created; the advice (a local path) commits."""
    import fsspec

    memory = fsspec.filesystem("memory")
    refused = [{**base, "location": "memory://refused/events"}]
    if base["format"] == "iceberg":
        refused.append({**base, "catalog": {"type": "sql", "uri": f"sqlite:///{base['location']}-cat.db",
                                            "warehouse": "memory://refused/wh"}})
    for cfg in refused:
        with pytest.raises(InvalidOutputSpec, match=r"memory:// lives inside one process.*local path.*s3://"):
            committer_for(cfg)
    assert not memory.exists("/refused")
    assert not os.path.exists(f"{base['location']}-cat.db")
    run_job(base)
    assert rows(base) == expected()


def test_the_markers_of_a_dynamic_table_commit_list_what_its_version_reads(base):
    """A dynamic commit replacing one partition (a value whose directory name is escaped) leaves the replaced
    files under the data root; the root's marker and the partition's list what the table's version references
    there (the partition's: only the job's new file), and verify_files accepts them."""
    one_task_commit(base, "first", 0, ["x/y", "plain"], pa.string())
    one_task_commit(base, "second", 1, ["x/y"], pa.string())
    data_root = root(base)
    marker = read_success_marker(data_root, verify_files=True)
    assert {f["path"] for f in marker["files"] + marker["retained"]} == referenced_now(base)
    (part,) = marker["partitions"]
    inside = read_success_marker(f"{data_root}/{part}", verify_files=True)
    assert [f["path"] for f in inside["files"]] == [f["path"] for f in marker["files"]] and not inside["retained"]
    assert len(parquet_files(os.path.join(data_root.removeprefix("file://"), part))) == 2, "the replaced file stays"
