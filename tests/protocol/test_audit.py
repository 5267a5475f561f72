"""The audit step of the protocol (write, audit, publish), in process on a local disk and ``memory://``.

What a task commit records (column statistics from the footers its writer held), what each declarative check
judges and blames, the data callable on the staged files, the job commit's gate (nothing visible unless a passing
verdict of this specification judged exactly the commits it publishes), determinism across tries, what a clear
after a failed audit runs again (the blamed tasks) and what it keeps (the rest), a changed specification judged
on the same commits, and the approval's records (a rejection refuses every task for recovery).
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_commit_provider.protocol import (AuditFailed, FileOutputCommitter, InvalidOutputSpec, JobIncomplete,
                                              faults, read_success_marker, run_task_attempt)
from airflow_commit_provider.protocol.audit import Approval, Audit, checks
from airflow_commit_provider.protocol.audit.record import latest_audit
from airflow_commit_provider.protocol.audit.run import (AuditGate, audited_records, decide_approval,
                                                        request_approval, run_audit)
from airflow_commit_provider.protocol.audit.stats import MAX_TEXT, JobStats

from . import scenario as sc

TASKS = 4


def rows(task: int, *, null_at: int | None = None, amount: float = 1.0) -> pa.Table:
    ids = [task * 10 + i for i in range(4)]
    if null_at is not None:
        ids[null_at] = None
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([amount * i for i in range(4)]),
                     "day": [f"d{i % 2}" for i in range(4)]})


def committer(root, **kw) -> FileOutputCommitter:
    return FileOutputCommitter(str(root), "job", **{"mode": "append", "partition_by": ["day"], **kw})


def write_all(root, data=rows, attempt: int = 1, tasks=range(TASKS)) -> FileOutputCommitter:
    c = committer(root)
    for t in tasks:
        run_task_attempt(c, t, attempt, lambda w, t=t: w.write(data(t)))
    return c


AUDIT = Audit(checks=[checks.Rows(min=1, per="partition"), checks.NotNull("id"),
                      checks.Between("amount", 0, 10)]).for_stage("t", algorithm=1, table_format=None,
                                                                  partition_by=["day"])


def gate(audit: Audit = AUDIT) -> AuditGate:
    return AuditGate(audit.digest(), approval=audit.approval is not None)


def test_task_commits_record_column_statistics_per_partition(tmp_path):
    """From the footers the writer held: null counts and min/max per column and partition, typed bounds in JSON
    (dates, timestamps, decimals as text; long text and NaN-only floats unknown)."""
    c = committer(tmp_path / "out", partition_by=[])
    c.setup_job()
    long_text = "x" * (MAX_TEXT + 1)
    table = pa.table({"d": [dt.date(2024, 1, 2), dt.date(2024, 1, 1), None],
                      "ts": pa.array([dt.datetime(2024, 1, 1, 5)] * 3, pa.timestamp("us", tz="UTC")),
                      "dec": pa.array([decimal.Decimal("9.50"), decimal.Decimal("10.25"), None], pa.decimal128(6, 2)),
                      "s": ["b", "a", long_text], "nan": [float("nan")] * 3, "l": [[1], [2], None]})

    def produce(w):
        w.write(table.slice(0, 2))
        w.write(table.slice(2))

    run_task_attempt(c, 0, 1, produce, max_rows_per_file=2)
    rec = audited_records(c.job, c.job.require_job(), [0])[0]
    assert len(rec.files) == 2, "two files, one statistics"
    assert dict(map(tuple, rec.stats_doc["columns"]))["l"] == "list<item: int64>"
    cols = rec.stats_doc["partitions"][""]
    assert cols["d"] == [1, "2024-01-01", "2024-01-02", 2], "a file of nulls only has no bounds, and says so"
    assert cols["ts"] == [0, "2024-01-01T05:00:00+00:00", "2024-01-01T05:00:00+00:00", 3]
    assert cols["dec"] == [1, "9.50", "10.25", 2], "decimals ordered as numbers, not as text"
    assert cols["s"] == [0, None, None, 3], "a bound over the kept length is unknown, not truncated"
    assert cols["nan"][1:3] == [None, None] and "l" not in cols


def test_checks_blame_the_tasks_that_broke_them_and_whole_job_checks_blame_every_task(tmp_path):
    _c(tmp_path / "out")
    c = write_all(tmp_path / "out", lambda t: rows(t, null_at=1 if t == 2 else None, amount=5.0 if t == 3 else 1.0))
    stats = JobStats.from_records(audited_records(c.job, c.job.require_job(), range(TASKS)).values())

    def judge(check):
        return check.evaluate(stats)

    assert judge(checks.NotNull("id")).blamed == (2,)
    assert judge(checks.Between("amount", 0, 10)).blamed == (3,)    # task 3 wrote 15.0
    assert judge(checks.Between("amount", max=20)).passed
    assert judge(checks.Rows(min=5, per="task")).blamed == (0, 1, 2, 3)
    assert judge(checks.Rows(max=16)).passed and judge(checks.Rows(max=15)).blamed is None
    assert judge(checks.Rows(min=9, per="partition")).blamed == (0, 1, 2, 3)   # 8 rows per day
    assert judge(checks.Partitions(expected=["day=d0", "day=d1"])).passed
    assert judge(checks.Partitions(expected=["day=d2"])).blamed is None
    assert judge(checks.Files(max=7)).blamed is None and judge(checks.Files(max=8)).passed
    assert judge(checks.Columns({"id": "int64", "day": None}).with_partitions(["day"])).passed
    assert judge(checks.Columns({"id": "string"})).blamed == (0, 1, 2, 3)
    assert judge(checks.Columns(["id", "amount"], exact=True)).passed   # the files hold no partition column
    assert not judge(checks.Columns(["id", "amount"], exact=True).with_partitions(["day"])).passed   # the stage does
    assert judge(checks.Columns(["id", "amount", "day"], exact=True).with_partitions(["day"])).passed
    with pytest.raises(InvalidOutputSpec, match="min"):
        checks.Rows()
    with pytest.raises(InvalidOutputSpec, match="name the columns"):
        checks.NotNull()


def _c(root):
    c = committer(root)
    c.setup_job()
    return c


def test_a_failed_audit_publishes_nothing_the_same_on_every_try_and_its_clear_reruns_only_the_blamed(tmp_path):
    root = tmp_path / "out"
    _c(root)
    write_all(root, lambda t: rows(t, null_at=0 if t == 1 else None))
    first = run_audit(committer(root).job, AUDIT, TASKS, 1)
    again = run_audit(committer(root).job, AUDIT, TASKS, 2)   # a retry: the same commits, the same verdict
    assert not first.passed and first.blamed == [1]
    assert (again.passed, again.checks, again.blamed, again.tasks) == (first.passed, first.checks, first.blamed,
                                                                        first.tasks)
    with pytest.raises(AuditFailed, match="failed"):
        committer(root).commit_job(TASKS, gate=gate())
    assert sc.visible_files(str(root)) == [], "nothing visible"
    committer(root).abort_job(keep_committed=True)   # the failed run's teardown

    committer(root).setup_job()   # the clear of the run, the source fixed
    ran = [t for t in range(TASKS) if run_task_attempt(committer(root), t, 3,
                                                       lambda w, t=t: w.write(rows(t))).ran_callable]
    assert ran == [1], "only the blamed task ran again; the others were recovered"
    assert run_audit(committer(root).job, AUDIT, TASKS, 4).passed
    manifest = committer(root).commit_job(TASKS, gate=gate())
    assert manifest["audit"]["ref"] == "1.4" and manifest["audit"]["tasks"]["1"] == "1.3"
    assert read_success_marker(str(root), verify_files=True)["audit"]["passed"]


def test_a_changed_audit_judges_the_same_commits_and_the_old_verdict_does_not_pass_the_new_gate(tmp_path):
    """"Clear only failed" after the audit was changed: no setup, no write runs again; the new specification
    judges the same commits; the commit takes only the verdict of the specification it has."""
    root = tmp_path / "out"
    _c(root)
    write_all(root, lambda t: rows(t, amount=5.0))
    assert not run_audit(committer(root).job, AUDIT, TASKS, 1).passed   # amounts up to 15
    committer(root).abort_job(keep_committed=True)
    relaxed = Audit(checks=[checks.NotNull("id"), checks.Between("amount", 0, 20)])
    assert run_audit(committer(root).job, relaxed, TASKS, 2).passed
    with pytest.raises(AuditFailed, match="another audit specification"):
        committer(root).commit_job(TASKS, gate=gate(AUDIT))
    manifest = committer(root).commit_job(TASKS, gate=gate(relaxed))
    assert manifest["audit"]["spec"] == relaxed.digest() and len(sc.read_rows(str(root))) == 16


def test_the_gate_refuses_commits_the_audit_did_not_judge_and_a_job_without_a_verdict(tmp_path):
    root = tmp_path / "out"
    _c(root)
    for t in range(TASKS - 1):
        run_task_attempt(committer(root), t, 1, lambda w, t=t: w.write(rows(t)), inputs="a")
    with pytest.raises(JobIncomplete):
        run_audit(committer(root).job, AUDIT, TASKS, 1)   # a task not committed: the commit would refuse too
    with pytest.raises(AuditFailed, match="no audit record"):
        committer(root).commit_job(TASKS - 1, gate=gate())
    assert run_audit(committer(root).job, AUDIT, TASKS - 1, 2).passed
    committer(root).setup_job()   # a clear: task 0 runs again (its inputs changed), the rest is recovered
    assert run_task_attempt(committer(root), 0, 3, lambda w: w.write(rows(0)), inputs="b").ran_callable
    with pytest.raises(AuditFailed, match="checked other task commits"):
        committer(root).commit_job(TASKS - 1, gate=gate())
    assert sc.visible_files(str(root)) == []


def test_the_data_callable_reads_exactly_the_staged_rows_with_their_partition_values(tmp_path):
    root = tmp_path / "out"
    _c(root)
    write_all(root, tasks=[0, 1])
    committer(root).abort_job(keep_committed=True)
    committer(root).setup_job()   # task 1's commit recovered from the first application attempt
    write_all(root, tasks=[2, 3], attempt=2)
    seen = {}

    def data(dataset, stats):
        seen["rows"] = sorted(dataset.to_table().to_pylist(), key=lambda r: r["id"])
        seen["stats_rows"] = stats.total.rows
        ids = dataset.to_table(columns=["id"]).column("id")
        if pc.max(ids).as_py() > 30:
            raise AuditFailed("ids above 30", tasks=[3])

    audit = Audit(data=data).for_stage("t", algorithm=1, table_format=None, partition_by=["day"])
    rec = run_audit(committer(root).job, audit, TASKS, 3)
    assert [r["id"] for r in seen["rows"]] == sorted(t * 10 + i for t in range(TASKS) for i in range(4))
    assert {r["day"] for r in seen["rows"]} == {"d0", "d1"} and seen["stats_rows"] == 16
    assert not rec.passed and rec.blamed == [3]
    assert run_audit(committer(root).job, Audit(data=lambda d: False), TASKS, 4).blamed == [0, 1, 2, 3]


@pytest.mark.parametrize("algorithm", [2, "magic"])
def test_a_data_callable_is_refused_where_the_staged_files_cannot_be_read(algorithm):
    with pytest.raises(InvalidOutputSpec, match="magic committer's staged files" if algorithm == "magic"
                       else "no staged output"):
        Audit(data=lambda d: True).for_stage("stage", algorithm=algorithm, table_format=None, partition_by=())
    with pytest.raises(InvalidOutputSpec, match="visible from its task commit"):
        Audit(approval=Approval()).for_stage("stage", algorithm=2, table_format=None, partition_by=())
    Audit(checks=[checks.Rows(min=1)]).for_stage("stage", algorithm=algorithm, table_format=None, partition_by=())


def test_declarative_checks_with_algorithm_2_gate_the_commit_and_the_abort_withdraws_the_tasks(tmp_path):
    root = tmp_path / "out"
    c = committer(root, algorithm=2)
    c.setup_job()
    for t in range(TASKS):
        run_task_attempt(committer(root, algorithm=2), t, 1, lambda w, t=t: w.write(rows(t, null_at=0)))
    assert not run_audit(committer(root, algorithm=2).job, AUDIT, TASKS, 1).passed
    with pytest.raises(AuditFailed):
        committer(root, algorithm=2).commit_job(TASKS, gate=gate())
    assert not os.path.exists(root / "_SUCCESS")
    committer(root, algorithm=2).abort_job()
    assert sc.visible_files(str(root)) == [], "v2's visible task commits went with the abort"


def test_the_approval_gates_the_commit_and_a_rejection_refuses_every_task_for_recovery(tmp_path):
    root = tmp_path / "out"
    audit = Audit(checks=[checks.Rows(min=1)], approval=Approval())
    _c(root)
    write_all(root)
    assert run_audit(committer(root).job, audit, TASKS, 1).passed
    with pytest.raises(AuditFailed, match="not yet asked"):
        committer(root).commit_job(TASKS, gate=gate(audit))
    request_approval(committer(root).job, "2030-01-01T00:00:00+00:00", None)
    with pytest.raises(AuditFailed, match="waiting"):
        committer(root).commit_job(TASKS, gate=gate(audit))
    decide_approval(committer(root).job, "rejected", "ann", "wrong day")
    with pytest.raises(AuditFailed, match="rejected"):
        committer(root).commit_job(TASKS, gate=gate(audit))
    committer(root).abort_job(keep_committed=True)
    committer(root).setup_job()   # the clear of the run: every task runs again
    ran = [t for t in range(TASKS) if run_task_attempt(committer(root), t, 2,
                                                       lambda w, t=t: w.write(rows(t))).ran_callable]
    assert ran == list(range(TASKS))
    assert run_audit(committer(root).job, audit, TASKS, 3).passed
    request_approval(committer(root).job, None, None)
    decide_approval(committer(root).job, "approved", "bob")
    manifest = committer(root).commit_job(TASKS, gate=gate(audit))
    assert manifest["audit"]["approval"]["state"] == "approved" and manifest["audit"]["approval"]["by"] == "bob"


def test_an_answer_to_an_outdated_request_is_refused(tmp_path):
    root = tmp_path / "out"
    audit = Audit(checks=[checks.Rows(min=1)], approval=Approval())
    _c(root)
    write_all(root)
    run_audit(committer(root).job, audit, TASKS, 1)
    request_approval(committer(root).job, None, None)
    run_audit(committer(root).job, audit, TASKS, 2)   # the audit ran again meanwhile
    with pytest.raises(AuditFailed, match="ask again"):
        decide_approval(committer(root).job, "approved", "bob")
    assert latest_audit(committer(root).job, committer(root).job.require_job().job_uuid).attempt == 2


def test_a_try_after_the_commit_fixed_its_plan_returns_the_verdict_the_commit_took(tmp_path):
    root = tmp_path / "out"
    _c(root)
    write_all(root)
    assert run_audit(committer(root).job, AUDIT, TASKS, 1).passed
    faults.arm("commit_job.after_plan")
    with pytest.raises(faults.InjectedFault):
        committer(root).commit_job(TASKS, gate=gate())
    faults.disarm()
    late = run_audit(committer(root).job, AUDIT, TASKS, 2)
    assert late.passed and late.message == "the job commit took this verdict already"
    manifest = committer(root).commit_job(TASKS, gate=gate())   # resumed: no gate again, the plan's verdict
    assert manifest["audit"]["ref"] == "0.1"
    assert run_audit(committer(root).job, AUDIT, TASKS, 3).passed   # after the commit too


@pytest.mark.parametrize("mode", ["error", "append", "overwrite", "dynamic"])
@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_failed_audit_leaves_the_target_as_it_was_in_every_mode(tmp_path, mode, where):
    """Overwrite and dynamic delete old data only at the job commit, which a failed audit never reaches; every
    mode then commits once the data is fixed. Declarative checks and a data callable, local disk and memory."""
    import uuid

    root = str(tmp_path / "out") if where == "local" else f"memory://audit-{uuid.uuid4().hex}/out"
    if mode != "error":
        sc.write_old_data(root)
    before = sorted(sc.visible_files(root)) if mode != "error" else []
    audit = Audit(checks=AUDIT.checks, data=lambda d: d.count_rows() == 16).for_stage(
        "t", algorithm=1, table_format=None, partition_by=["day"])
    c = committer(root, mode=mode)
    c.setup_job()
    for t in range(TASKS):
        run_task_attempt(committer(root, mode=mode), t, 1, lambda w, t=t: w.write(rows(t, null_at=0 if t else None)))
    assert run_audit(committer(root, mode=mode).job, audit, TASKS, 1).blamed == [1, 2, 3]
    with pytest.raises(AuditFailed):
        committer(root, mode=mode).commit_job(TASKS, gate=gate(audit))
    assert sorted(sc.visible_files(root)) == before, "a failed audit changes nothing visible"
    committer(root, mode=mode).abort_job(keep_committed=True)
    committer(root, mode=mode).setup_job()
    ran = [t for t in range(TASKS) if run_task_attempt(committer(root, mode=mode), t, 2,
                                                       lambda w, t=t: w.write(rows(t))).ran_callable]
    assert ran == [1, 2, 3]
    assert run_audit(committer(root, mode=mode).job, audit, TASKS, 2).passed
    committer(root, mode=mode).commit_job(TASKS, gate=gate(audit))
    import pyarrow.parquet as pq

    fs, base = sc._fs(root)
    ids = sorted(i for rel in sc.visible_files(root) if "/part-" in rel
                 for i in pq.read_table(f"{base}/{rel}", filesystem=fs).column("id").to_pylist())
    assert ids == sorted(t * 10 + i for t in range(TASKS) for i in range(4)), "every row once"
    old = [rel for rel in sc.visible_files(root) if "/old-" in rel]
    assert old == {"error": [], "append": before, "overwrite": [], "dynamic": ["day=d9/old-01.parquet"]}[mode]
    assert read_success_marker(root, verify_files=True)["audit"]["passed"]


def test_a_clear_after_success_is_a_new_generation_audited_again(tmp_path):
    root = tmp_path / "out"
    _c(root)
    write_all(root)
    run_audit(committer(root).job, AUDIT, TASKS, 1)
    first = committer(root).commit_job(TASKS, gate=gate())
    committer(root).setup_job()   # the clear after success: a new generation
    write_all(root, attempt=2)
    with pytest.raises(AuditFailed, match="no audit record"):
        committer(root).commit_job(TASKS, gate=gate())   # the first generation's verdict is not this one's
    assert run_audit(committer(root).job, AUDIT, TASKS, 3).passed
    second = committer(root).commit_job(TASKS, gate=gate())
    assert second["replaced_generation"] == first["job_uuid"] and second["audit"]["ref"] == "1.3"
    assert len(sc.read_rows(str(root))) == 16, "the new generation replaced the old one's rows"


def test_an_audit_of_another_runs_application_attempt_is_refused_as_an_overlap(tmp_path):
    from airflow_commit_provider.protocol import OverlappingRun, RunOwner

    root = tmp_path / "out"
    a, b = RunOwner("d", "run-a"), RunOwner("d", "run-b")
    committer(root, owner=a).setup_job()
    for t in range(TASKS):
        run_task_attempt(committer(root, owner=a), t, 1, lambda w, t=t: w.write(rows(t)))
    with pytest.raises(OverlappingRun):
        run_audit(committer(root, owner=b).job, AUDIT, TASKS, 1)
    assert latest_audit(committer(root).job, committer(root).job.require_job().job_uuid) is None
    assert run_audit(committer(root, owner=a).job, AUDIT, TASKS, 1).passed


def test_shards_committed_together_record_the_statistics_of_every_shard(tmp_path):
    """A task instance whose 4 shards commit together (``shard_commit="together"``) records one task's statistics
    merged from its shards' files (each shard's writer held its own footers): the same per partition, null count,
    bounds and row count as the 4 tasks each shard would have been, and a check blames that one task."""
    from airflow_commit_provider.operators.shards import run_shards_together

    _c(tmp_path / "each")
    separate = write_all(tmp_path / "each", lambda t: rows(t, null_at=1 if t == 2 else None, amount=float(t + 1)))
    c = _c(tmp_path / "together")
    run_shards_together(c, 0, TASKS, 1, lambda s, task, w: w.write(rows(
        task, null_at=1 if task == 2 else None, amount=float(task + 1))), threads=TASKS)
    [whole] = audited_records(c.job, c.job.require_job(), [0]).values()
    parts = JobStats.from_records(audited_records(separate.job, separate.job.require_job(), range(TASKS)).values())
    together = JobStats.from_records([whole])
    assert together.summary()["rows"] == parts.summary()["rows"] == TASKS * 4
    # amount = (task + 1) * i for rows i = 0..3, day d(i % 2); task 2's id is null at row 1 (day d1)
    expected = {"day=d0": (0, 0.0, 8.0), "day=d1": (1, 1.0, 12.0)}
    assert {p: (cols["id"][0], *cols["amount"][1:3]) for p, cols in whole.stats_doc["partitions"].items()} == \
        expected
    assert checks.NotNull("id").evaluate(together).blamed == (0,)
    assert checks.Between("amount", 0, 10).evaluate(together).blamed == (0,)   # the 4th shard wrote 12.0
    assert checks.Rows(min=16).evaluate(together).passed
