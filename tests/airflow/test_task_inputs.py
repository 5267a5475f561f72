"""A task is recovered only when its inputs are the same, under ``dag.test()`` (composition: mapped list x clear).

Run 1 maps ``[a, b, c]`` and fails: every try of the write given ``c`` fails, so ``a`` and ``b`` commit and the job
does not. Between it and the clear the list becomes ``[a, x, c]`` -- same length, element 1 replaced -- through a
DAG edit read at parse time (``in_operator``) or an upstream task's XCom (``in_decorator``, a ``@task.commit_stage``
with two shards per task instance). The cleared run recovers task 0 (its callable not called), runs task 1 again
with ``x`` and task 2 with ``c``, and the output holds the rows of ``a``, ``x`` and ``c`` exactly once and none of
``b``. Before the rule, task 1 was recovered with ``b``'s rows, ``x``'s were missing, and the run succeeded.
"""

from __future__ import annotations

import importlib
from collections import Counter
from datetime import datetime, timezone

import pytest

from airflow_commit_provider.protocol import read_success_marker

from ..conftest import TEST_ROOT, TEST_WORK, fresh_test_dags
from ..protocol import scenario as sc
from .test_recover_valid import states

pytestmark = pytest.mark.airflow


@pytest.fixture
def dags(airflow_db):
    return fresh_test_dags("inputs_test_dags")


def calls(dag_id: str, mapped: bool = True) -> Counter:
    """Calls of the write callable per item (``calls.log``): of the mapped write, or of the unmapped one."""
    path = TEST_WORK / "calls.log"
    lines = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    return Counter(words[2] for words in lines if words[0] == dag_id and (words[1] != "-1") == mapped)


@pytest.mark.parametrize("dag_id,shards", [("in_operator", 1), ("in_decorator", 2)])
def test_a_cleared_run_reruns_the_task_whose_mapped_element_changed(dags, dag_id, shards):
    when = datetime(2024, 6, 1, tzinfo=timezone.utc)
    fail = TEST_WORK / f"fail-{dag_id}-c-always"
    fail.touch()
    dr = getattr(dags, dag_id).test(logical_date=when, run_after=when)
    assert dr.state == "failed", states(dr)
    assert calls(dag_id) == {"a": shards, "b": shards, "c": 2 * shards}
    assert calls(dag_id, mapped=False) == ({"b": 1} if dag_id == "in_operator" else {})
    fail.unlink()
    (TEST_WORK / "calls.log").unlink()
    (TEST_WORK / f"{dag_id}-items").write_text("a,x,c")   # same length, element 1 replaced
    dags = importlib.reload(dags)                           # the DAG file parsed again
    dr = getattr(dags, dag_id).test(logical_date=when, run_after=when)   # the whole run cleared
    assert dr.state == "success", states(dr)
    assert calls(dag_id) == {"x": shards, "c": shards}, "task 0 was recovered; task 1 ran again with x"
    root = str(TEST_ROOT / dag_id)
    got = Counter((r["item"], r["shard"], r["row"]) for r in sc.read_rows(root))
    assert got == {(i, s, r): 1 for i in "axc" for s in range(shards) for r in range(5)}, "a, x, c once; no b"
    manifest = read_success_marker(root, verify_files=True)
    recovered = {t["task"]: t["recovered_from_app"] for t in manifest["tasks"]}
    assert recovered == {**{t: 0 for t in range(shards)}, **{t: None for t in range(shards, 3 * shards)}}
    if dag_id == "in_operator":   # the unmapped write's op_kwargs changed too (b -> x): it ran again
        assert calls(dag_id, mapped=False) == {"x": 1}
        single = Counter(r["item"] for r in sc.read_rows(str(TEST_ROOT / "in_operator_single")))
        assert single == {"x": 5}


def test_the_inputs_digest_is_the_canonical_json_of_op_args_and_op_kwargs(caplog):
    """Key order, a set's order and tuple-or-list do not change the digest; another element, a key of another
    type, or a value JSON has no form for (compared by its repr) does. A value whose repr names its memory address
    is logged: such a task is never recovered."""
    from datetime import date
    from decimal import Decimal

    from airflow_commit_provider.operators.inputs import inputs_digest

    d = inputs_digest([1, ("p", "q")], {"day": date(2024, 1, 1), "tags": {"x", "y", "z"}, "n": Decimal("1.5")})
    assert d.startswith("sha256:")
    assert d == inputs_digest([1, ["p", "q"]], {"n": Decimal("1.5"), "tags": {"z", "y", "x"}, "day": date(2024, 1, 1)})
    assert d != inputs_digest([1, ["p", "q"]], {"n": Decimal("1.5"), "tags": {"z", "y"}, "day": date(2024, 1, 1)})
    assert d != inputs_digest([1, ["p", "q"]], {"n": Decimal("1.5"), "tags": {"x", "y", "z"}, "day": date(2024, 1, 2)})
    assert inputs_digest([], {"m": {1: "a", "b": 2}}) != inputs_digest([], {"m": {"1": "a", "b": 2}})
    assert inputs_digest(["a"], {}) != inputs_digest([], {"a": None})
    with caplog.at_level("WARNING", logger="airflow_commit_provider.operators.inputs"):
        assert inputs_digest([], {"o": object()}) != inputs_digest([], {"o": object()})
    assert any("repr names a memory address" in r.getMessage() for r in caplog.records)
