"""Write, audit, publish under a real Airflow (``dag.test()``, SQLite): the example DAGs of ``example_audit.py``.

A stage whose audit fails publishes nothing (no file, no ``_SUCCESS``), blames the shard that wrote the bad rows
in its XCom and in the Commit status view, and its teardown keeps the committed shards; the clear of the run after
the source was fixed runs that shard only (the others are recovered), the audit's first try there dies after its
record and its retry judges the same commits, and the job commits with the verdict in ``_SUCCESS``. An approval
holds the commit until it is answered through Airflow's own human-in-the-loop REST API (``PATCH
.../hitlDetails``, the route the "Required actions" page calls): a rejection publishes nothing; the clear of the
run computes the output again, asks again, and the approval publishes it.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections import Counter
from datetime import datetime, timezone

import pytest

from airflow_commit_provider.plugins import app as plugin_app
from airflow_commit_provider.protocol import faults, read_success_marker

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags
from ..protocol import scenario as sc
from .openlineage_runs import run_dags

pytestmark = pytest.mark.airflow

ROOT = TEST_ROOT / "demo"
CALLS = TEST_WORK / "demo-calls.log"


@pytest.fixture
def example(airflow_db):
    return fresh_test_dags("example_audit")


def calls(dag_id: str) -> Counter:
    lines = CALLS.read_text().splitlines() if CALLS.exists() else []
    return Counter(int(m) for d, _, m, _ in map(str.split, lines) if d == dag_id)


def states(dr) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {f"{ti.task_id}[{ti.map_index}]": ti.state for ti in dr.get_task_instances(session=session)}


def xcom(dr, task_id: str, key: str = "return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dr.dag_id, run_id=dr.run_id, task_id=task_id,
                                                 key=key).one_or_none()
    value = None if row is None else row.value
    return json.loads(value) if isinstance(value, str) else value


def stage_view(dr, stage: str):
    return next(s for s in plugin_app.build_model(dr.dag_id, dr.run_id, "v").summary.stages
                if s.setup_task_id == f"{stage}.setup")


def test_a_failed_audit_publishes_nothing_and_the_clear_reruns_only_the_blamed_shard(example):
    from airflow.models import Variable

    when = datetime(2024, 5, 1, tzinfo=timezone.utc)
    target = ROOT / "audited_events"
    Variable.set("commit_demo_broken_shard", "2")
    try:
        dr = example.dag.test(logical_date=when, run_after=when)
    finally:
        Variable.delete("commit_demo_broken_shard")
    s = states(dr)
    assert dr.state == "failed" and s["write_events.audit[-1]"] == "failed", s
    assert s["write_events.commit[-1]"] == "upstream_failed" and s["write_events.abort[-1]"] == "success", s
    assert sc.visible_files(str(target)) == [], "a failed audit publishes nothing"
    verdict = xcom(dr, "write_events.audit", "audit")
    assert verdict["passed"] is False and verdict["blamed_tasks"] == [2], verdict
    failed = {c["check"].split("(")[0] for c in verdict["checks"] if not c["passed"]}
    assert failed == {"NotNull", "Between"}, verdict["checks"]
    view = stage_view(dr, "write_events")
    assert view.state == "failed" and view.audit.state == "failed" and view.audit.blamed_tasks == [2]
    # the teardown kept every commit; the view lists those a clear recovers: not the blamed one, which runs again
    assert view.aborted is not None and view.aborted.kept_tasks == [0, 1, 3], view.aborted
    rows = {r.task: r for r in plugin_app.CACHE.build(dr.dag_id, dr.run_id, "v").stages["write_events.setup"].rows}
    assert "blamed it" in rows[2].why and "runs it again" in rows[2].why and "blamed" not in rows[0].why

    # the source is fixed (the Variable is gone); the run is cleared: shard 2 runs again, the others are recovered.
    # The audit's first try of the clear dies after writing its record; its retry judges the same commits.
    faults.arm("audit.after_record", "raise")
    dr = example.dag.test(logical_date=when, run_after=when)
    assert dr.state == "success", states(dr)
    assert calls("commit_audit") == {0: 1, 1: 1, 2: 2, 3: 1}, "only the blamed shard ran again"
    manifest = read_success_marker(str(target), verify_files=True)
    verdict = manifest["audit"]
    app, audit_try = map(int, verdict["ref"].split("."))
    assert verdict["passed"] is True and app == 1 and audit_try > 1, "the verdict is the retry's, in the clear"
    assert verdict["tasks"] == {"0": "0.1", "1": "0.1", "2": "1.1", "3": "0.1"}, "shard 2 re-run, the rest recovered"
    assert {c["check"]: c["passed"] for c in manifest["audit"]["checks"]} == dict.fromkeys(
        [c["check"] for c in manifest["audit"]["checks"]], True)
    ids = [r["event_id"] for r in sc.read_rows(str(target))]
    assert len(ids) == len(set(ids)) == 12000 and None not in ids
    assert stage_view(dr, "write_events").audit.state == "passed"


def _hitl_client():
    """Airflow's core REST API in this process, as the UI's "Required actions" calls it: signed in as an admin of
    the simple auth manager with a token it issued (its all-admins switch does not let a token-less PATCH through on
    Airflow 3.1)."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    client = TestClient(create_app())
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="approver", role="admin"))
    client.headers["Authorization"] = f"Bearer {token}"
    return client


def _answer_when_asked(dag_id: str, task_id: str, choice: str, seen: dict) -> None:
    """Wait until the approval task is parked for input, look at what is visible then, and answer it through the
    REST API."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    client = _hitl_client()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with create_session() as session:
            ti = session.query(TI).filter(TI.dag_id == dag_id, TI.task_id == task_id).order_by(
                TI.try_number.desc()).first()
            parked = ti is not None and ti.state in ("awaiting_input", "deferred")
            run_id = ti.run_id if ti is not None else None
        if parked:
            break
        time.sleep(0.2)
    else:
        seen["error"] = "the approval task was never parked for input"
        return
    seen["visible"] = sc.visible_files(str(ROOT / "reviewed_events"))
    detail = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails")
    seen["body"] = detail.json().get("body")
    seen["view"] = plugin_app.build_model(dag_id, run_id, "v").summary.stages[0].audit
    answer = client.patch(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails",
                          json={"chosen_options": [choice], "params_input": {}})
    seen["status"] = answer.status_code


def _run_answered(example, choice: str, when: datetime) -> tuple:
    seen: dict = {}

    def answer() -> None:   # the thread's exception, if any, fails the test with its traceback
        try:
            _answer_when_asked("commit_audit_approval", "load_for_review.approve", choice, seen)
        except BaseException:
            seen["error"] = traceback.format_exc()

    helper = threading.Thread(target=answer)
    helper.start()
    dr = example.approval_dag.test(logical_date=when, run_after=when)
    helper.join(timeout=30)
    assert "error" not in seen, seen
    return dr, seen


def test_an_approval_holds_the_commit_until_answered_and_a_rejection_publishes_nothing(example):
    when = datetime(2024, 5, 2, tzinfo=timezone.utc)
    target = ROOT / "reviewed_events"
    dr, seen = _run_answered(example, "Reject", when)
    assert seen["status"] == 200 and seen["visible"] == [], "nothing visible while the approval waits"
    assert "400 rows" in seen["body"] and "NotNull" in seen["body"], "the approver sees the audit's summary"
    assert seen["view"].approval.state == "waiting" and seen["view"].approval.deadline is not None
    s = states(dr)
    assert dr.state == "failed" and s["load_for_review.approve[-1]"] == "failed", s
    assert s["load_for_review.commit[-1]"] == "upstream_failed", s
    assert sc.visible_files(str(target)) == [], "a rejection publishes nothing"
    assert stage_view(dr, "load_for_review").audit.approval.state == "rejected"

    dr, seen = _run_answered(example, "Approve", when)   # the clear: every shard computed again, asked again
    assert seen["visible"] == [] and dr.state == "success", states(dr)
    assert calls("commit_audit_approval") == {m: 2 for m in range(4)}, \
        "a rejection refuses every task for recovery: the clear computed them again"
    manifest = read_success_marker(str(target), verify_files=True)
    assert manifest["totals"]["rows"] == 400 and manifest["audit"]["approval"]["state"] == "approved"
    assert manifest["audit"]["approval"]["by"]


def test_hand_wired_sharded_and_keyed_stages_are_audited_and_report_data_quality_to_openlineage(airflow_db):
    """``audit_test_dags.audit_styles`` run twice for one job key (in a process of its own, its OpenLineage events
    written by the file transport): every stage commits with the verdict in ``_SUCCESS``; the keyed stage's second
    generation is audited again (its own verdict) and replaces the first; each commit's output, and each audit
    task's input, carries the data-quality facets."""
    pytest.importorskip("airflow.providers.openlineage", reason="the optional openlineage extra is not installed")
    fresh_test_dags("commit_test_dags")   # empties the outputs and control files of earlier tests
    runs = """
        from datetime import datetime, timezone
        for day in (1, 2):
            when = datetime(2024, 6, day, tzinfo=timezone.utc)
            report(audit_test_dags.audit_styles.test(logical_date=when, run_after=when).state)
    """
    proc, events = run_dags("audit_test_dags", runs, TEST_WORK / "openlineage-audit.jsonl")
    assert proc.stdout.count("STATE success") == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    root = TEST_ROOT / "audit_styles"
    for stage, rows in (("ops", 15), ("shards", 20), ("together", 20), ("keyed", 10)):
        manifest = read_success_marker(str(root / stage), verify_files=True)
        assert manifest["audit"]["passed"] and manifest["totals"]["rows"] == rows, (stage, manifest["totals"])
    assert len(sc.read_rows(str(root / "keyed"))) == 10, "the second generation replaced the first's rows"
    assert [read_success_marker(str(root / s))["totals"]["tasks"] for s in ("shards", "together")] == [4, 2], \
        "two task instances of two shards: four tasks, or two whose shards committed together"
    keyed = read_success_marker(str(root / "keyed"))
    assert keyed["generation"] == 1 and keyed["replaced_generation"] and keyed["audit"]["ref"].startswith("1.")
    ops = [c["check"] for c in read_success_marker(str(root / "ops"))["audit"]["checks"]]
    assert ops[-1].startswith("data: ids_unique"), "the hand-wired stage ran its data callable"
    commits = [e for e in events if e["job"]["name"].endswith(("ops_commit", "shards.commit", "together.commit",
                                                               "keyed.commit")) and e["eventType"] == "COMPLETE"]
    assert len(commits) == 8
    for event in commits:
        [output] = event["outputs"]
        assertions = output["facets"]["dataQualityAssertions"]["assertions"]
        assert assertions and all(a["success"] for a in assertions), assertions
        assert output["facets"]["dataQualityMetrics"]["rowCount"] > 0
    audits = [e for e in events if e["job"]["name"].endswith(("ops_audit", ".audit")) and e["eventType"] == "COMPLETE"]
    assert len(audits) == 8 and all(e["inputs"][0]["facets"]["dataQualityAssertions"] for e in audits)
