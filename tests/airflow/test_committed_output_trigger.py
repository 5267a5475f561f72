"""``CommittedOutputTrigger``, the AssetWatcher trigger, driven directly (asyncio) over real commits on a local
disk: one event per commit, derived from the commit logs, so that commits made between two polls (two jobs, or a
cleared run's new generation) each fire, in commit order, with distinct commit ids; none twice, none before a
commit finished (its markers written), none while a marker is withdrawn; a watcher of a partition fires for the
commits that wrote into it; what fired survives a restart (``serialize()``, or the asset state store).

:class:`Watcher` steps ``run()`` as the triggerer does, one event at a time, on one event loop: between two steps
the generator waits at its ``yield`` and reads nothing, so "two commits between two polls" is exact, not timed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import (
    FileOutputCommitter,
    InvalidOutputSpec,
    faults,
    make_committer,
    read_success_marker,
    run_task_attempt,
)
from airflow_commit_provider.protocol.faults import InjectedFault
from airflow_commit_provider.protocol.maintenance.compaction import compact
from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger


def write_job(root: str, job_id: str, *, mode: str = "append", tasks: int = 2, commit: bool = True,
              days: tuple[str, ...] = (), algorithm: int | str = 1) -> Any:
    """One job of *tasks* tasks (3 rows each, per day of *days*: partitioned by ``day``) set up and written;
    committed unless *commit* is false."""
    committer = make_committer(root, job_id, mode=mode, partition_by=["day"] if days else None, algorithm=algorithm)
    committer.setup_job()
    for task in range(tasks):
        data = {"task": [task] * 3 * max(1, len(days)), "row": [0, 1, 2] * max(1, len(days))}
        if days:
            data["day"] = [d for d in days for _ in range(3)]
        run_task_attempt(committer, task, 1, lambda w, t=pa.table(data): w.write(t))
    if commit:
        committer.commit_job(tasks)
    return committer


def compaction(root: str, job_id: str = "compact-1") -> dict[str, Any]:
    """A compaction of *root*'s small Parquet files (every one of them here), committed as job *job_id*."""
    result = compact(FileOutputCommitter(root, job_id, mode="append"), 1, target_size=2**20)
    assert result["state"] == "committed", result
    return result


class Watcher:
    """A trigger's ``run()`` as the triggerer drives it, on one event loop of its own."""

    def __init__(self, trigger: CommittedOutputTrigger) -> None:
        self.trigger = trigger
        self.loop = asyncio.new_event_loop()
        self.events = trigger.run()

    def next(self) -> dict[str, Any]:
        """The next event's payload (the generator polls until there is one)."""
        return self.loop.run_until_complete(asyncio.wait_for(anext(self.events), timeout=60)).payload

    def pending(self) -> list[str]:
        """One read of the target, as the next poll makes it: the job ids of the events it would fire."""
        return [event.payload["job_id"] for _, event in self.loop.run_until_complete(self.trigger.poll())
                if event is not None]

    def close(self) -> None:
        """Stop the generator, as the triggerer cancels a trigger (twice is once)."""
        if self.loop.is_closed():
            return
        self.loop.run_until_complete(self.events.aclose())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


def fired_between_polls(w: Watcher, root: str, *batches: tuple[str, ...], **job: Any) -> list[dict[str, Any]]:
    """The events of the jobs of each batch, committed (in the batch's order, with :func:`write_job`'s arguments
    *job*) while the watcher waits for its next poll: as many events as commits, or the test fails."""
    fired = []
    for jobs in batches:
        for job_id in jobs:
            write_job(root, job_id, **job)
        fired += [w.next() for _ in jobs]
    return fired


@pytest.fixture
def watch():
    opened: list[Watcher] = []

    def start(trigger: CommittedOutputTrigger) -> Watcher:
        opened.append(Watcher(trigger))
        return opened[-1]

    yield start
    for w in opened:
        w.close()


def test_one_event_per_commit_with_its_manifest(tmp_path, watch):
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0))
    assert w.pending() == [], "nothing committed yet"

    write_job(root, "job-a")
    first = w.next()
    marker = read_success_marker(root)
    assert first["job_uuid"] == first["commit_id"] == marker["job_uuid"] and first["job_id"] == "job-a"
    assert first["totals"]["rows"] == 6 and [f["path"] for f in first["files"]] == [f["path"] for f in
                                                                                 marker["files"]]
    assert first["files_truncated"] is False and "retained" not in first
    assert w.pending() == [], "never twice for one commit"

    # job b withdraws a's marker, then dies before publishing: no commit, so no event
    committer = write_job(root, "job-b", commit=False)
    faults.arm("commit_job.after_withdraw", "raise")
    with pytest.raises(InjectedFault):
        committer.commit_job(2)
    assert not (tmp_path / "events" / "_SUCCESS").exists()
    assert w.pending() == [], "a withdrawn marker is no event"
    committer.commit_job(2)   # resumed
    second = w.next()
    assert second["job_id"] == "job-b" and second["totals"]["rows"] == 6
    assert second["retained_files"] == 2, "job a's files stayed (append): counted, not listed"

    # a corrupt marker does not hide a commit: the commit log tells it
    (tmp_path / "events" / "_SUCCESS").write_text("{not json")
    assert w.pending() == []
    write_job(root, "job-b")   # a re-run of the committed job b: a new generation, a new uuid
    third = w.next()
    assert third["job_id"] == "job-b" and third["generation"] == 1 and third["commit_id"] != second["commit_id"]
    assert third["replaced_generation"] == second["job_uuid"]


@pytest.mark.parametrize("algorithm", [1, 2])
def test_two_jobs_committed_between_two_polls_fire_twice_in_order(tmp_path, watch, algorithm):
    """A backfill: jobs b and c commit into one target while the watcher waits for its next poll. With v2 too:
    its files are visible from their task commits on, but the commit is the job commit."""
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0))
    a, c, b = fired_between_polls(w, root, ("job-a",), ("job-c", "job-b"), algorithm=algorithm)
    assert [e["job_id"] for e in (a, c, b)] == ["job-a", "job-c", "job-b"], "in commit order, not by name"
    assert len({e["commit_id"] for e in (a, b, c)}) == 3 and c["finished"] < b["finished"]
    assert c["totals"]["rows"] == 6 and len(c["files"]) == 2, "c's manifest, from its commit log"
    assert c["retained_files"] is None, "what c's marker retained is not known: b's marker replaced it"
    assert b["retained_files"] == 4 and b["commit_id"] == read_success_marker(root)["job_uuid"]
    write_job(root, "job-d")
    assert w.next()["job_id"] == "job-d", "neither b nor c fired twice"


def test_each_generation_of_a_cleared_job_fires(tmp_path, watch):
    """A clear after success makes a new generation of the same job, a second commit: two re-runs between two
    polls fire twice; the first of them was replaced by the second, so only its summary is left."""
    root = str(tmp_path / "events")
    gen0, gen1, gen2 = fired_between_polls(watch(CommittedOutputTrigger(target=root, poke_interval=0)), root,
                                           ("job-a",), ("job-a", "job-a"))
    assert [e["generation"] for e in (gen0, gen1, gen2)] == [0, 1, 2]
    assert len({e["commit_id"] for e in (gen0, gen1, gen2)}) == 3
    assert gen1["totals"]["rows"] == 6 and gen1["files"] == [] and gen1["files_truncated"] is True
    assert gen1["replaced_by"] == gen2["commit_id"] == gen2["job_uuid"]
    assert gen2["replaced_generation"] == gen1["commit_id"] and len(gen2["files"]) == 2


def test_a_commit_fires_once_finished(tmp_path, watch):
    """The commit log is written before the markers: a job that dies in between has not committed yet; a later
    job's commit fires first, and the first one fires when its retry finishes. One that dies after its markers,
    in its cleanup, fires at once."""
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0))
    write_job(root, "job-a")
    assert w.next()["job_id"] == "job-a"
    slow = write_job(root, "job-b", commit=False)
    faults.arm("commit_job.after_commit_log", "raise")
    with pytest.raises(InjectedFault):
        slow.commit_job(2)
    assert (tmp_path / "events" / "_commits" / "job-b.json").exists()
    assert w.pending() == []
    write_job(root, "job-c")
    assert w.next()["job_id"] == "job-c"
    slow.commit_job(2)
    assert w.next()["job_id"] == "job-b"
    # one that dies in its cleanup, after the markers, has committed: the marker names it
    late = write_job(root, "job-d", commit=False)
    faults.arm("commit_job.after_success", "raise")
    with pytest.raises(InjectedFault):
        late.commit_job(2)
    assert (tmp_path / "events" / "_temporary" / "job-d" / "_job.json").exists()
    assert w.next()["job_id"] == "job-d"


class DictStateStore:
    """What the triggerer injects as ``asset_state_store`` (Airflow 3.3: one asset's key/value state), in memory."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


@pytest.mark.parametrize("how", ["serialized", "asset state store"])
def test_a_restarted_trigger_loses_no_commit(tmp_path, watch, how):
    """Commits made while the triggerer is down fire after its restart, and what fired before does not: the cursor
    travels in ``serialize()`` (a trigger re-created from it), or in the watched asset's state store (an
    AssetWatcher's trigger is re-created from the DAG file's kwargs, which carry none)."""
    root = str(tmp_path / "events")
    store = DictStateStore()
    before = CommittedOutputTrigger(target=root, poke_interval=0)
    before.asset_state_store = store
    kwargs = before.serialize()[1]
    w = watch(before)
    write_job(root, "job-a")
    assert w.next()["job_id"] == "job-a"
    if how == "serialized":
        kwargs = before.serialize()[1]
    w.close()
    write_job(root, "job-b")
    write_job(root, "job-c")

    after = CommittedOutputTrigger(**kwargs)
    if how == "asset state store":
        after.asset_state_store = store
    w2 = watch(after)
    assert [w2.next()["job_id"], w2.next()["job_id"]] == ["job-b", "job-c"]


def test_a_watcher_of_an_earlier_release_goes_on_from_the_commit_it_fired_last(tmp_path, watch):
    """Releases before the cursor kept the uuid fired last in the asset state store: a watcher that finds only that
    starts after that commit, not at the newest."""
    root = str(tmp_path / "events")
    write_job(root, "job-a")
    store = DictStateStore()
    store.values["commit_last_fired_job_uuid"] = read_success_marker(root)["job_uuid"]
    write_job(root, "job-b")
    write_job(root, "job-c")
    trigger = CommittedOutputTrigger(target=root, poke_interval=0)
    trigger.asset_state_store = store
    w = watch(trigger)
    assert [w.next()["job_id"], w.next()["job_id"]] == ["job-b", "job-c"]


def test_a_cursor_that_is_not_one_is_refused_with_the_way_out(tmp_path, watch):
    with pytest.raises(InvalidOutputSpec, match="pass the cursor serialize\\(\\) returned, or none"):
        CommittedOutputTrigger(target=str(tmp_path), cursor={"seen": ["job-a"]})
    write_job(str(tmp_path), "job-a")
    assert watch(CommittedOutputTrigger(target=str(tmp_path), poke_interval=0)).next()["job_id"] == "job-a"


def test_verify_files_holds_events_while_the_marker_does_not_match(tmp_path, watch):
    """With *verify_files* a commit whose marker does not match the visible files does not fire; the next commit
    writes a true marker, and both fire then, in order."""
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0, verify_files=True))
    write_job(root, "job-a")
    assert w.next()["job_id"] == "job-a"
    write_job(root, "job-b")
    stray = tmp_path / "events" / "stray.parquet"
    stray.write_bytes(b"not listed")
    assert w.pending() == [], "the marker does not list stray.parquet: no event"
    stray.unlink()
    write_job(root, "job-c")
    assert [w.next()["job_id"], w.next()["job_id"]] == ["job-b", "job-c"]


def test_without_a_cursor_a_restart_fires_the_newest_commit_again(tmp_path, watch):
    """Airflow before 3.3 (no asset state store) re-creates a watcher's trigger from its DAG kwargs: it starts as a
    new watcher, and the newest commit fires again, with the same commit id (at least once: consumers dedupe)."""
    root = str(tmp_path / "events")
    write_job(root, "job-a")
    first = watch(CommittedOutputTrigger(target=root, poke_interval=0)).next()
    again = watch(CommittedOutputTrigger(target=root, poke_interval=0)).next()
    assert again["commit_id"] == first["commit_id"]


def test_a_partition_watcher_fires_for_each_commit_into_it(tmp_path, watch):
    """Dynamic mode: a watcher of one partition fires once per commit that wrote into it, whatever else the
    commit wrote, with that partition's files and totals; commits that wrote only other partitions do not fire."""
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=f"{root}/day=1", poke_interval=0))
    write_job(root, "both", mode="dynamic", days=("1", "2"))
    first = w.next()
    assert first["job_id"] == "both" and first["partition"] == "day=1" and first["totals"]["rows"] == 6
    assert all(f["path"].startswith("day=1/") for f in first["files"])
    write_job(root, "other-day", mode="dynamic", days=("2",))
    write_job(root, "day1-again", mode="dynamic", days=("1",))
    write_job(root, "day1-third", mode="dynamic", days=("1",))
    again, third = w.next(), w.next()
    assert [again["job_id"], third["job_id"]] == ["day1-again", "day1-third"]
    assert again["files_truncated"] is False and again["totals"]["files"] == 2
    assert third == {**third, "partition": "day=1", "retained_files": 0}, "day 1's own marker, replaced wholly"


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_watcher_fires_once_per_table_transaction(tmp_path, watch, fmt):
    """A Delta or Iceberg target: two jobs' transactions between two polls fire twice, each event naming its own
    table version, which the table's own reader lists."""
    pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[fmt])
    from ..protocol.tables_worker import committer_for, run_job
    from ..protocol.test_tables import delta_table, iceberg_table, table_id

    where = {"location": str(tmp_path / "events")} if fmt == "delta" else \
        {"location": str(tmp_path / "warehouse"), "table_name": "ns.events"}
    cfg = {"format": fmt, **where, "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 2}
    w = watch(CommittedOutputTrigger(target=committer_for(cfg).store.url(), poke_interval=0))
    run_job(cfg)
    first = w.next()
    run_job({**cfg, "job_id": "events-2"})
    run_job({**cfg, "job_id": "events-3"})
    events = [first, w.next(), w.next()]
    assert [e["job_id"] for e in events] == ["events-1", "events-2", "events-3"]
    ids = [table_id(e["table"]) for e in events]
    if fmt == "delta":
        assert ids == [0, 1, 2] and delta_table(cfg).version() == 2
    else:
        assert ids == [s.snapshot_id for s in iceberg_table(cfg).snapshots()]


def test_an_asset_watcher_takes_it():
    from airflow.sdk import Asset, AssetWatcher

    trigger = CommittedOutputTrigger(target="s3://lake/events", conn_id="aws_lake", verify_files=True)
    asset = Asset("lake_events", watchers=[AssetWatcher(name="committed", trigger=trigger)])
    classpath, kwargs = asset.watchers[0].trigger.serialize()
    assert classpath == "airflow_commit_provider.triggers.committed_output.CommittedOutputTrigger"
    assert kwargs == {"target": "s3://lake/events", "conn_id": "aws_lake", "verify_files": True,
                      "poke_interval": 30.0}, "no cursor before it ran: the DAG file's trigger stays the same"


@pytest.mark.parametrize("include_maintenance", [False, True])
def test_a_compaction_fires_only_for_a_watcher_that_asks_for_maintenance(tmp_path, watch, include_maintenance):
    """A compaction is a commit of its own job that changes no row: by default no event (downstream DAGs would run
    for nothing), also not as a new watcher's first; with ``include_maintenance=True`` one, flagged. The next
    commit that changes rows fires either way."""
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0, include_maintenance=include_maintenance))
    write_job(root, "job-a")
    assert w.next()["job_id"] == "job-a"
    compaction(root)
    late = watch(CommittedOutputTrigger(target=root, poke_interval=0, include_maintenance=include_maintenance))
    if include_maintenance:
        event = w.next()
        assert event["job_id"] == "compact-1" and event["maintenance"] == "compaction"
        assert late.next()["job_id"] == "compact-1", "a new watcher's first event: the newest commit"
    else:
        assert w.pending() == [], "the compaction changed no row: no event"
        assert late.next()["job_id"] == "job-a", "a new watcher's first event: the newest commit of rows"
    write_job(root, "job-b")
    assert w.next()["job_id"] == "job-b"


@pytest.mark.parametrize("verify_files", [False, True])
@pytest.mark.parametrize("earlier", [False, True], ids=["first-job", "after-a-commit"])
def test_a_v2_job_fires_nothing_during_its_write_stage_and_once_at_its_job_commit(tmp_path, watch, earlier,
                                                                                 verify_files):
    """Algorithm 2 publishes each task's files at its task commit and withdraws the root marker there; the job
    commit writes it. Polled after every step (setup, each task commit, the job commit, and once more): no event
    before the job commit (neither for the withdrawn marker nor again for the earlier commit), one after."""
    root = str(tmp_path / "events")
    w = watch(CommittedOutputTrigger(target=root, poke_interval=0, verify_files=verify_files))
    if earlier:
        write_job(root, "job-a")
        assert w.next()["job_id"] == "job-a"
    committer = make_committer(root, "job-v2", mode="append", algorithm=2)
    committer.setup_job()
    assert w.pending() == [], "after setup"
    for task in range(3):
        run_task_attempt(committer, task, 1, lambda wr, t=task: wr.write(pa.table({"task": [t] * 3,
                                                                                    "row": [0, 1, 2]})))
        assert not (tmp_path / "events" / "_SUCCESS").exists(), "v2 withdraws the marker at its task commit"
        assert w.pending() == [], f"after task commit {task}: the task's files are visible, no commit is"
    committer.commit_job(3)
    event = w.next()
    assert event["job_id"] == "job-v2" and event["algorithm"] == 2 and event["totals"]["rows"] == 9
    assert event["retained_files"] == (2 if earlier else 0)
    assert w.pending() == [], "one event for one job commit"
