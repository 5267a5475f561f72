"""Job identity is injective (DESIGN section 10): distinct (dag id, job key, job name) never share a job id.

- the collisions found from outside, one test each: ``..`` against ``_`` in a key (a natural key is
  ``{{ ds }}..{{ next_ds }}``), and ``__`` moving between the DAG id, the key and the job name;
- a property test over adversarial parts (dots, underscores, ``..``, ``__``, unicode, long, empty after the
  strip): for every naming, each other naming built to look like it (the readable form split elsewhere, ``..`` and
  ``_`` swapped, unsafe characters replaced) gets another id, and every id is a valid directory name;
- the ids of unambiguous namings are the ids earlier releases gave, so that jobs in flight at an upgrade keep
  theirs (pinned values);
- a stage nested in a task group is named by its full group id, so two stages of one name in two groups are two
  jobs;
- end to end under ``dag.test()``: runs keyed ``2024-01-01..2024-01-07`` and ``2024-01-01_2024-01-07`` append into
  one target and each key's rows are there exactly once (earlier releases lost the first key's); a stage whose job
  id another naming holds fails at set-up without a retry and without changing the target, and the advice of
  its error (another job key) works.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import pytest
from airflow.sdk import DAG, TaskGroup
from airflow.utils.session import create_session
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_commit_provider.operators.identity import make_job_id
from airflow_commit_provider.operators.stage import commit_stage
from airflow_commit_provider.protocol import check_job_id, make_committer, read_success_marker

from ..conftest import TEST_ROOT
from ..protocol import scenario as sc
from ..protocol.test_tree_shape import snapshot
from .test_dag_test import dags  # noqa: F401 (the fixture: commit_test_dags, with a clean root and work dir)

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize("one, other", [
    (("d", "a_b", "n"), ("d", "a..b", "n")),
    (("d", "..", "n"), ("d", "_", "n")),
    (("d", "2024-01-01..2024-01-07", "n"), ("d", "2024-01-01_2024-01-07", "n")),
    (("a__b", "c", "n"), ("a", "b__c", "n")),
    (("d", "k__n", "x"), ("d", "k", "n__x")),
    (("d_", "k", "n"), ("d", "_k", "n")),
], ids=["dots-in-key", "dotdot-underscore", "date-range", "dunder-dag-key", "dunder-key-name", "underscore-edge"])
def test_namings_that_read_alike_get_distinct_job_ids(one, other):
    assert make_job_id(*one) != make_job_id(*other)
    check_job_id(make_job_id(*one))
    check_job_id(make_job_id(*other))


#: the ids earlier releases gave unambiguous namings (a job in flight at an upgrade keeps its id)
EARLIER_IDS = [
    (("etl", "manual__2024-01-01T00:00:00+00:00", "load"), "etl__manual__2024-01-01T00_00_00_00_00__load-c3324c8acb"),
    (("etl", "scheduled__2024-01-01T00:00:00+00:00", "stage.write"),
     "etl__scheduled__2024-01-01T00_00_00_00_00__stage.write-be5489d540"),
    (("tf_job_key", "2024-03-01 00:00:00+00:00", "per_interval"),
     "tf_job_key__2024-03-01_00_00_00_00_00__per_interval-0846b176b9"),
    (("d", "2024-01-01", "default"), "d__2024-01-01__default"),
    (("a_b", "k", "n"), "a_b__k__n"),
    (("d", "2024-01-01_2024-01-07", "n"), "d__2024-01-01_2024-01-07__n"),
    (("d", "x" * 200, "n"), f"d__{'x' * 177}-d138554b15"),
]


@pytest.mark.parametrize("parts, earlier", EARLIER_IDS, ids=[e[1][:40] for e in EARLIER_IDS])
def test_unambiguous_namings_keep_the_ids_of_earlier_releases(parts, earlier):
    assert make_job_id(*parts) == earlier


#: pieces that make namings read alike: separators, dots, unsafe and non-ASCII characters
PIECES = ["a", "b", "_", "__", ".", "..", "-", " ", ":", "+", "/", "é", "日", "🦆", "\t", "x" * 90]
part = st.one_of(st.lists(st.sampled_from(PIECES), max_size=8).map("".join), st.text(max_size=40))
naming = st.tuples(part, part, part)


def look_alikes(parts: tuple[str, str, str]) -> set[tuple[str, str, str]]:
    """Other namings built to collide with *parts*: its readable form split at every other pair of ``__``, and
    each part with ``..`` and ``_`` swapped or its unsafe characters made ``_``."""
    readable = "__".join(parts)
    seps = [i for i in range(len(readable) - 1) if readable[i:i + 2] == "__"]
    out = {(readable[:i], readable[i + 2:j], readable[j + 2:]) for i in seps for j in seps if j >= i + 2}
    for k, p in enumerate(parts):
        for variant in (p.replace("..", "_"), p.replace("_", ".."), p.replace("__", "_"),
                        "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in p),
                        p.strip("._-"), p + "_", "_" + p):
            out.add(parts[:k] + (variant,) + parts[k + 1:])
    out.discard(parts)
    return out


@settings(max_examples=400, deadline=None)
@given(naming)
def test_job_id_is_injective_over_look_alike_namings(parts):
    job_id = check_job_id(make_job_id(*parts))
    for other in look_alikes(parts):
        assert make_job_id(*other) != job_id, (parts, other)


@settings(max_examples=300, deadline=None)
@given(naming, naming)
def test_distinct_namings_get_distinct_valid_job_ids(one, other):
    ids = check_job_id(make_job_id(*one)), check_job_id(make_job_id(*other))
    assert (ids[0] == ids[1]) == (one == other)


def test_stages_of_one_name_in_two_task_groups_are_two_jobs():
    with DAG("identity_nested", schedule=None, start_date=datetime(2024, 1, 1)):
        setups = []
        for outer in ("eu", "us"):
            with TaskGroup(outer):
                group = commit_stage("load", target="/tmp/unused", python_callable=lambda: None, mode="append")
                setups.append(group.children[f"{outer}.load.setup"])
    names = [s._job_name() for s in setups]
    assert names == ["eu.load", "us.load"]


# ------------------------------------------------------------------ end to end: two keys into one target
def test_two_keys_that_read_alike_keep_their_rows_in_one_append_target(dags):
    keys = ["2024-01-01..2024-01-07", "2024-01-01_2024-01-07"]   # a natural key: "{{ ds }}..{{ next_ds }}"
    for day, key in enumerate(keys, start=1):
        when = datetime(2024, 2, day, tzinfo=timezone.utc)
        assert dags.ct_job_key.test(logical_date=when, run_after=when, run_conf={"key": key}).state == "success"
    target = str(TEST_ROOT / "ct_job_key")
    rows = sc.read_rows(target)
    per_task = dags.ROWS
    assert Counter((r["key"], r["task"], r["row"]) for r in rows) == {
        (key, t, r): 1 for key in keys for t in range(dags.TASKS) for r in range(per_task)}
    manifest = read_success_marker(target, verify_files=True)
    assert manifest["generation"] == 0 and manifest["names"]["job_key"] == keys[-1]


def test_a_stage_whose_job_id_another_naming_holds_fails_at_setup_and_another_key_works(dags, capfd):
    target = TEST_ROOT / "ct_job_key"
    taken = make_job_id("ct_job_key", "taken", "stage")
    other = make_committer(str(target), taken, algorithm=1, mode="append",
                           names={"dag_id": "elsewhere", "job_key": "taken", "job_name": "stage"})
    other.setup_job()
    before = snapshot(target)

    when = datetime(2024, 3, 1, tzinfo=timezone.utc)
    dr = dags.ct_job_key.test(logical_date=when, run_after=when, run_conf={"key": "taken"})
    with create_session() as session:
        setup = next(ti for ti in dr.get_task_instances(session=session) if ti.task_id == "stage.setup")
    assert dr.state == "failed" and setup.state == "failed" and setup.try_number == 1, "refused, not retried"
    assert snapshot(target) == before, "the refused stage changed the target"
    log = capfd.readouterr()
    assert "AirflowFailException: JobIdentityCollision: job id ct_job_key__taken__stage" in log.out + log.err
    assert "'dag_id': 'elsewhere'" in log.out + log.err and "another job_name or job_key" in log.out + log.err

    # the way out the error names: another job key (or job name) is another job
    when = datetime(2024, 3, 2, tzinfo=timezone.utc)
    assert dags.ct_job_key.test(logical_date=when, run_after=when, run_conf={"key": "free"}).state == "success"
    assert sorted({r["key"] for r in sc.read_rows(str(target))}) == ["free"]
    assert other.job.job_record() is not None, "the other naming's job is still there"
