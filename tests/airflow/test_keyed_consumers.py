"""Consumers of a stage whose runs share one job through ``job_key`` (``ct_job_key``: two DAG runs, at two logical
dates so that ``dag.test()`` keeps both, rendering one key from their conf): the second run is a new generation of
the first run's job.

- The asset watcher (``CommittedOutputTrigger``) fires once per run's commit: two events, in order, each with its
  own commit id and generation, the second naming the generation it replaced; none doubled, none lost.
- The Commit status view of the *first* run, read after the second committed, shows the first run's own
  generation (its job uuid, generation and totals, from the job's commit log; its job commit's stages, from its
  commit task) and says which run replaced it; it does not show the second run's generation, tasks or files as
  the first's.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_commit_provider.plugins.app import build_model
from airflow_commit_provider.protocol import read_success_marker
from airflow_commit_provider.triggers.committed_output import CommittedOutputTrigger

from ..conftest import TEST_ROOT
from ..protocol import scenario as sc
from .test_committed_output_trigger import watch  # noqa: F401 (the fixture)
from .test_dag_test import dags  # noqa: F401 (the fixture)

pytestmark = pytest.mark.airflow


def test_two_runs_of_one_key_fire_once_each_and_the_first_runs_view_says_it_was_replaced(dags, watch):  # noqa: F811
    day = datetime(2024, 3, 1, tzinfo=timezone.utc)
    keyed = str(TEST_ROOT / "ct_job_key")
    w = watch(CommittedOutputTrigger(target=keyed, poke_interval=0))
    assert w.pending() == [], "nothing committed yet"

    first = dags.ct_job_key.test(logical_date=day, run_after=day, run_conf={"key": "k"})
    assert first.state == "success"
    one = w.next()
    assert w.pending() == [], "one event for the first run's commit"
    later = day + timedelta(days=1)
    second = dags.ct_job_key.test(logical_date=later, run_after=later, run_conf={"key": "k"})
    assert second.state == "success" and second.run_id != first.run_id
    two = w.next()
    assert w.pending() == [], "one event for the second run's commit"

    marker = read_success_marker(keyed, verify_files=True)
    assert one["job_id"] == two["job_id"] == marker["job_id"], "one job: the key's"
    assert (one["generation"], two["generation"]) == (0, 1)
    assert one["commit_id"] != two["commit_id"] == marker["job_uuid"]
    assert (one["labels"]["run_id"], two["labels"]["run_id"]) == (first.run_id, second.run_id)
    assert two["replaced_generation"] == one["commit_id"], "the second event names the generation it replaced"
    assert one["totals"]["rows"] == two["totals"]["rows"] == 40 == len(sc.read_rows(keyed)), "rows once"

    def stage(run_id: str):
        stages = build_model("ct_job_key", run_id, "v").summary.stages
        found = [s for s in stages if s.setup_task_id == "stage.setup"]
        assert len(found) == 1, [(s.stage, s.setup_task_id) for s in stages]
        return found[0]

    now = stage(second.run_id)
    assert (now.state, now.job_uuid, now.generation, now.replaced_by) == ("committed", two["commit_id"], 1, None)
    assert now.tasks_total == 4 and now.counts == {"committed": 4}

    then = stage(first.run_id)
    assert then.state == "committed" and then.job_id == now.job_id
    assert (then.job_uuid, then.generation) == (one["commit_id"], 0), "the first run's own generation"
    assert then.replaced_by == f"run {second.run_id} (generation 1)"
    assert then.totals is not None and then.totals.rows == 40 and then.totals.tasks == 4
    assert then.tasks_total == 0 and then.files_total == 0 and then.counts == {}, \
        "no tasks or files of the second run's generation shown as the first run's"
    assert {s.name for s in then.timeline} >= {"moves", "markers"}, "the first run's own job commit's stages"
    assert len(then.next_steps) == 1 and second.run_id in then.next_steps[0] and \
        "replaced" in then.next_steps[0], then.next_steps
