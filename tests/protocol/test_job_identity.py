"""A job record remembers what named it, so a collision of job ids is detected, not obeyed (DESIGN section 10).

Two namings (``CommitConfig(names=...)``, as the operators give them: DAG id, job key, job name) forced onto one
job id, as the ids of earlier releases did for ``a__b``/``c`` and ``a``/``b__c``:

- while the first job is in flight, the second's set-up, task attempts, job commit and abort are refused
  (:class:`JobIdentityCollision` naming both namings and the way out) and the whole tree under the target, hidden
  records included, is byte for byte as before; the first job then commits exactly its own rows;
- after the first job committed, the second's set-up is refused by the commit log (in ``append`` mode obeying
  would make its commit a next generation replacing the first's rows); the target is unchanged;
- the advice works: the purge command the error gives, run as a process, removes the abandoned first job, and the
  second then sets up and commits;
- a record of an earlier release (no names) is accepted by a named committer, which finishes its job, and so is
  its commit log;
- names that are not strings are refused in the configuration, and in a record they make it corrupt;
- a Delta or Iceberg job named otherwise is refused before the table's log changes (read back by its reader).
"""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest

from airflow_commit_provider.protocol import CommitConfig, CorruptRecord, InvalidOutputSpec, JobIdentityCollision
from airflow_commit_provider.protocol.records.job import JobRecord
from tests.cli.test_cli import cli
from tests.protocol.scenario import ROWS, committer, read_rows, run_task
from tests.protocol.tables_worker import run_job
from tests.protocol.test_tables import base, fmt, rows  # noqa: F401 (fixtures: a Delta or an Iceberg table)
from tests.protocol.test_tree_shape import snapshot

JOB_ID = "a__b__c__n"
FIRST = {"dag_id": "a__b", "job_key": "c", "job_name": "n"}
SECOND = {"dag_id": "a", "job_key": "b__c", "job_name": "n"}


def configs(tmp_path, algorithm: int = 1) -> tuple[dict, dict]:
    base = {"root": str(tmp_path / "out"), "work": str(tmp_path / "work"), "algorithm": algorithm,
            "mode": "append"}
    os.makedirs(base["work"], exist_ok=True)
    return {**base, "names": FIRST}, {**base, "names": SECOND}


def tasks_of(root: str) -> list[int]:
    return sorted(r["task"] for r in read_rows(root))


def assert_names_both(exc: pytest.ExceptionInfo, where: str) -> None:
    message = str(exc.value)
    assert "'a__b'" in message and "'b__c'" in message and where in message, message
    assert "another job_name or job_key" in message and "purge" in message, message


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_second_naming_of_a_job_in_flight_is_refused_and_changes_nothing(tmp_path, algorithm):
    first, second = configs(tmp_path, algorithm)
    committer(first, JOB_ID).setup_job()
    run_task(first, 0, 1, job=JOB_ID)
    before = snapshot(tmp_path / "out")

    steps = {"setup_job": lambda: committer(second, JOB_ID).setup_job(),
             "task attempt": lambda: run_task(second, 1, 1, job=JOB_ID),
             "commit_job": lambda: committer(second, JOB_ID).commit_job(1),
             "abort_job": lambda: committer(second, JOB_ID).abort_job(keep_committed=True),
             "purge": lambda: committer(second, JOB_ID).abort_job()}
    for step, call in steps.items():
        with pytest.raises(JobIdentityCollision) as exc:
            call()
        assert_names_both(exc, "job record")
        assert snapshot(tmp_path / "out") == before, f"{step} of the second naming changed the target"

    record = json.loads((tmp_path / "out" / "_temporary" / JOB_ID / "_job.json").read_text())
    assert record["names"] == FIRST
    committer(first, JOB_ID).commit_job(1)
    assert tasks_of(first["root"]) == [0] * ROWS


def test_a_second_naming_of_a_committed_job_is_refused_by_its_commit_log(tmp_path):
    first, second = configs(tmp_path)
    committer(first, JOB_ID).setup_job()
    run_task(first, 0, 1, job=JOB_ID)
    manifest = committer(first, JOB_ID).commit_job(1)
    assert manifest["names"] == FIRST
    log = json.loads((tmp_path / "out" / "_commits" / f"{JOB_ID}.json").read_text())
    assert log["names"] == FIRST
    before = snapshot(tmp_path / "out")

    with pytest.raises(JobIdentityCollision) as exc:
        committer(second, JOB_ID).setup_job()
    assert_names_both(exc, "commit log")
    assert "generation 0" in str(exc.value)
    assert snapshot(tmp_path / "out") == before
    # the first naming's own re-run is still the next generation of its job
    assert committer(first, JOB_ID).setup_job().generation == 1


def test_purging_the_abandoned_job_as_advised_lets_the_second_naming_commit(tmp_path):
    first, second = configs(tmp_path)
    committer(first, JOB_ID).setup_job()
    run_task(first, 0, 1, job=JOB_ID)
    with pytest.raises(JobIdentityCollision) as exc:
        committer(second, JOB_ID).setup_job()

    command = shlex.split(re.search(r"`(airflow-commit [^`]+)`", str(exc.value)).group(1))
    assert command[-1] == "--purge"
    cli(*command[1:])   # run as a person runs it: a process of its own
    committer(second, JOB_ID).setup_job()
    run_task(second, 1, 1, job=JOB_ID)
    assert committer(second, JOB_ID).commit_job([1])["names"] == SECOND
    assert tasks_of(second["root"]) == [1] * ROWS


def test_a_record_of_an_earlier_release_is_finished_by_a_named_committer(tmp_path):
    first, _ = configs(tmp_path)
    unnamed = {k: v for k, v in first.items() if k != "names"}
    started = committer(unnamed, JOB_ID).setup_job()
    run_task(unnamed, 0, 1, job=JOB_ID)
    record = json.loads((tmp_path / "out" / "_temporary" / JOB_ID / "_job.json").read_text())
    assert "names" not in record   # what earlier releases wrote

    resumed = committer(first, JOB_ID).setup_job()
    assert resumed.job_uuid == started.job_uuid and resumed.app_attempt == started.app_attempt + 1
    run_task(first, 1, 1, job=JOB_ID)
    manifest = committer(first, JOB_ID).commit_job(2)
    assert "names" not in manifest and tasks_of(first["root"]) == [0] * ROWS + [1] * ROWS
    # its commit log names nothing either: the named committer's re-run is the job's next generation
    assert committer(first, JOB_ID).setup_job().generation == 1


def test_names_that_are_not_strings_are_refused_naming_them(tmp_path):
    with pytest.raises(InvalidOutputSpec, match=r"names must map names to strings .*got \{'dag_id': 1\}"):
        CommitConfig(names={"dag_id": 1})
    first, _ = configs(tmp_path)
    committer(first, JOB_ID).setup_job()
    path = tmp_path / "out" / "_temporary" / JOB_ID / "_job.json"
    doc = json.loads(path.read_text())
    with pytest.raises(CorruptRecord, match=r"field 'names' is \{'dag_id': \['a'\]\}"):
        JobRecord.from_json(json.dumps({**doc, "names": {"dag_id": ["a"]}}).encode(), str(path))


def test_a_second_naming_of_a_table_job_is_refused_before_the_table_changes(tmp_path, base):
    first = run_job({**base, "names": FIRST})
    assert first["names"] == FIRST and first["table"]["format"] == base["format"]
    committed = rows(base)
    before = snapshot(tmp_path)

    with pytest.raises(JobIdentityCollision) as exc:
        run_job({**base, "names": SECOND, "gen": 1})
    assert_names_both(exc, "commit log")
    assert rows(base) == committed and snapshot(tmp_path) == before, "the refused job changed the table"
