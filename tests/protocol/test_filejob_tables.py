"""A plain file job (no ``table``) meets a table: pointed at a Delta or Iceberg table's location, a directory
inside it, or one that holds it, job setup refuses in every mode, before the job record or anything else is
written; the table still reads every row with its own reader, and the advice the refusal gives (the same job
with the table) commits into the table exactly once.

Before the rule, such a job set up and committed as if the target were a directory of files: ``overwrite``
deleted the table's files at job commit and the next read of the table failed with ``FileNotFoundError``;
``dynamic`` did the same to each partition it wrote; ``append`` and ``error`` added Parquet files the table's log
does not know (invisible to the table's readers, counted by every reader of the plain directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, OwnedByTable, run_task_attempt

from . import dedup_tables
from .tables_worker import committer_for, run_job, task_rows
from .test_maintenance_tables import (  # noqa: F401 - delta, iceberg: the two tables' fixtures
    both_generations,
    delta,
    first_table_job_under_way,
    iceberg,
    iceberg_metadata_elsewhere,
)
from .test_tables import expected, iceberg_table, rows

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

MODES = ["overwrite", "dynamic", "append", "error"]
#: the way out each refusal names, by format
ADVICE = {"delta": "table_format='delta'", "iceberg": "table_format='iceberg' with table_name="}


def file_job(target: str, mode: str, job_id: str = "files-1") -> FileOutputCommitter:
    """The file committer a ``commit_stage`` without ``table_format`` makes."""
    return FileOutputCommitter(target, job_id, algorithm=1, mode=mode, partition_by=["day"], durable=False)


def assert_setup_refused(target: str, mode: str, table_format: str, everything: str) -> OwnedByTable:
    """Setting up a file job on *target* raises :class:`OwnedByTable` naming the table and both ways out, and
    leaves every file under *everything* as it was, byte for byte (no job record, no ``_temporary``)."""
    before = dedup_tables.all_files(everything)
    with pytest.raises(OwnedByTable) as refused:
        file_job(target, mode).setup_job()
    assert dedup_tables.all_files(everything) == before, "the refused setup wrote or deleted something"
    message = str(refused.value)
    assert refused.value.table_format == table_format and f"{table_format} table" in message, message
    assert ADVICE[table_format] in message and "choose a target outside it" in message, message
    assert f"{mode} mode" in message and "Nothing was changed" in message, message
    return refused.value


def iceberg_location(cfg: dict) -> str:
    return iceberg_table(cfg).location().removeprefix("file://")


@pytest.mark.parametrize("mode", MODES)
def test_a_file_job_into_a_delta_table_is_refused_at_setup(delta, tmp_path, mode):  # noqa: F811
    refused = assert_setup_refused(delta["location"], mode, "delta", str(tmp_path))
    assert refused.location == f"file://{delta['location']}"
    assert rows(delta) == both_generations()


@pytest.mark.parametrize("mode", MODES)
def test_a_file_job_into_an_iceberg_tables_data_is_refused_at_setup(iceberg, tmp_path, mode):  # noqa: F811
    location = iceberg_location(iceberg)
    refused = assert_setup_refused(f"{location}/data", mode, "iceberg", str(tmp_path))
    assert refused.location == f"file://{location}"
    assert rows(iceberg) == both_generations()


@pytest.mark.parametrize("where", ["partition", "parent"])
def test_a_file_job_inside_or_above_a_delta_table_is_refused(delta, tmp_path, where):  # noqa: F811
    target = {"partition": f"{delta['location']}/day=0", "parent": str(tmp_path)}[where]
    refused = assert_setup_refused(target, "overwrite", "delta", str(tmp_path))
    assert refused.location == f"file://{delta['location']}"
    assert rows(delta) == both_generations()


@pytest.mark.parametrize("where", ["location", "warehouse"])
def test_a_file_job_on_an_iceberg_tables_location_or_warehouse_is_refused(iceberg, tmp_path, where):  # noqa: F811
    location = iceberg_location(iceberg)
    target = {"location": location, "warehouse": iceberg["location"]}[where]
    refused = assert_setup_refused(target, "overwrite", "iceberg", str(tmp_path))
    assert refused.location == f"file://{location}"
    assert rows(iceberg) == both_generations()


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_a_file_job_into_iceberg_data_whose_metadata_is_elsewhere_is_refused(tmp_path, mode):
    """Only the table jobs' commit logs name the table there: setup reads one of them (not every one, see
    :mod:`~airflow_commit_provider.protocol.tables.ownership`), which is enough."""
    cfg, data = iceberg_metadata_elsewhere(tmp_path)
    refused = assert_setup_refused(data, mode, "iceberg", str(tmp_path))
    assert refused.name == "ns.events" and "table_name='ns.events'" in str(refused)
    assert rows(cfg) == both_generations()


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_a_file_job_into_a_first_table_job_under_way_is_refused(tmp_path, table_format):
    """A new table before its first commit has no log nor metadata yet: the table job's record names it."""
    data = first_table_job_under_way(tmp_path, table_format)
    refused = assert_setup_refused(data, "append", table_format, str(tmp_path))
    assert "_temporary/first/_job.json (job record)" in str(refused)


@pytest.mark.parametrize("mode", ["overwrite", "dynamic", "append"])
@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_following_the_advice_commits_into_the_table_once(tmp_path, table_format, mode):
    """The refused job, run again as the refusal says (the same job id, with the table): its rows are in the
    table exactly once, as the mode decides, and no file is left that the table's log does not name."""
    from .test_maintenance_tables import two_jobs

    cfg = {"format": table_format, "location": str(tmp_path / ("events" if table_format == "delta" else "wh")),
           "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 3, "rows": 4, "gen": 0}
    if table_format == "iceberg":
        cfg["table_name"] = "ns.events"
    two_jobs(cfg)
    data = committer_for(cfg).store.url().removeprefix("file://")
    assert_setup_refused(data, mode, table_format, str(tmp_path))
    advised = {**cfg, "job_id": "files-1", "mode": mode, "gen": 2}
    manifest = run_job(advised)
    assert manifest["table"]["format"] == table_format
    new = expected(gen=2)
    want = {"append": both_generations() + new, "overwrite": new,
            "dynamic": new}[mode]   # every day the earlier jobs wrote is one the new job writes too
    assert rows(cfg) == sorted(want)
    run_job({**advised, "phase": "commit"})   # a retry of the commit adds nothing
    assert rows(cfg) == sorted(want)


def test_a_table_job_is_not_refused_by_its_own_table(delta):  # noqa: F811
    """The table job's data root is the table: its setup and commit go through (the fixture's second job already
    set up on the existing table); a task of a third one commits into it as usual."""
    c = committer_for({**delta, "job_id": "events-3"})
    c.setup_job()
    assert run_task_attempt(c, 0, 1, lambda w: w.write(task_rows(0, 4, 3))).status == "committed"
    c.commit_job(1)
    assert rows(delta) == sorted(both_generations() + expected(tasks=1, gen=3))


def test_a_file_job_beside_a_table_is_not_refused(delta, tmp_path):  # noqa: F811
    """A sibling directory of a table is no part of it: the file job there commits as always."""
    target = str(tmp_path / "plain")
    c = file_job(target, "overwrite")
    c.setup_job()
    assert run_task_attempt(c, 0, 1, lambda w: w.write(task_rows(0, 4, 0))).status == "committed"
    assert c.commit_job(1)["totals"]["rows"] == 4
    assert os.path.exists(f"{target}/_SUCCESS") and rows(delta) == both_generations()


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_an_append_beside_tables_is_not_refused_and_leaves_them_as_they_were(delta, iceberg, tmp_path,  # noqa: F811
                                                                           table_format):
    """An append into a directory that holds a table (a warehouse, a parent) adds files beside it, never in it:
    allowed, and the table reads back as before; an overwrite there is refused (its commit would delete it)."""
    import pyarrow as pa

    from airflow_commit_provider.protocol import run_task_attempt

    cfg = {"delta": delta, "iceberg": iceberg}[table_format]
    parent = str(Path(cfg["location"] if table_format == "delta" else iceberg_location(cfg)).parent)
    job = file_job(parent, "append", job_id="beside")
    job.setup_job()
    run_task_attempt(job, 0, 1, lambda w: w.write(pa.table({"id": [1], "day": [0]})))
    job.commit_job(1)
    assert rows(cfg) == both_generations()
    assert_setup_refused(parent, "overwrite", table_format, str(tmp_path))
