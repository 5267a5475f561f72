"""Maintenance meets table targets: a compaction or a deduplication pointed at a Delta or Iceberg table (its
location, its data directory, a directory inside it, or one that holds it) refuses before it writes anything,
and the table still reads every row with its own reader; the refusal's advice, followed, does the job through
the table.

Before the rule, a compaction of either table "committed", merged the small files and deleted the twelve Parquet
files the table's log still named: every later read failed with ``FileNotFoundError``. A deduplication of a
Parquet directory converted to Delta (or added to an Iceberg table) deleted a file the log names the same way.
"""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, LocalStore, OwnedByTable
from airflow_commit_provider.protocol.maintenance.compaction import compact
from airflow_commit_provider.protocol.maintenance.dedup import find_duplicates, remove_duplicates
from airflow_commit_provider.protocol.tables.ownership import table_at

from . import dedup_tables
from .tables_worker import committer_for, run_job
from .test_tables import expected, iceberg_table, rows

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

#: the advice each refusal gives, by (format, operation)
ADVICE = {("delta", "compaction"): "optimize.compact()", ("delta", "deduplication"): "write_deltalake(",
          ("iceberg", "compaction"): "rewrite_data_files", ("iceberg", "deduplication"): "table.overwrite("}


def two_jobs(cfg: dict) -> dict:
    """Two jobs of this provider's table committer: twelve small files in two partitions, rows of generations 0
    and 1 (told apart by ``gen``)."""
    run_job(cfg)
    run_job({**cfg, "job_id": "events-2", "gen": 1})
    return cfg


@pytest.fixture
def delta(tmp_path) -> dict:
    return two_jobs({"format": "delta", "location": str(tmp_path / "events"), "job_id": "events-1",
                     "mode": "append", "partition_by": ["day"], "tasks": 3, "rows": 4, "gen": 0})


@pytest.fixture
def iceberg(tmp_path) -> dict:
    return two_jobs({"format": "iceberg", "location": str(tmp_path / "warehouse"), "table_name": "ns.events",
                     "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 3, "rows": 4,
                     "gen": 0})


def both_generations() -> list[tuple[int, int, int]]:
    return sorted(expected() + expected(gen=1))


def run_maintenance(target: str, operation: str) -> None:
    """One maintenance entry point on *target*: the compaction, the deduplication's dry run, or its apply."""
    if operation == "compact":
        compact(FileOutputCommitter(target, "compact-1", algorithm=1, mode="append"), 1, 10**6)
    elif operation == "find_duplicates":
        find_duplicates(LocalStore(target))
    else:
        remove_duplicates(LocalStore(target))


def assert_refused(target: str, operation: str, table_format: str, everything: str) -> OwnedByTable:
    """*operation* on *target* raises :class:`OwnedByTable` naming the table kind and its way out, and changes
    nothing under *everything* (the table's whole location, the warehouse): every file there, byte for byte."""
    before = dedup_tables.all_files(everything)
    with pytest.raises(OwnedByTable) as refused:
        run_maintenance(target, operation)
    assert dedup_tables.all_files(everything) == before, "the refusal wrote, claimed or deleted something"
    message = str(refused.value)
    kind = "compaction" if operation == "compact" else "deduplication"
    assert refused.value.table_format == table_format and f"{table_format} table" in message, message
    assert ADVICE[(table_format, kind)] in message and "Nothing was changed" in message, message
    return refused.value


OPERATIONS = ["compact", "find_duplicates", "remove_duplicates"]


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("where", ["location", "partition", "parent"])
def test_maintenance_refuses_a_delta_table(delta, tmp_path, operation, where):
    location = delta["location"]
    target = {"location": location, "partition": f"{location}/day=0", "parent": str(tmp_path)}[where]
    refused = assert_refused(target, operation, "delta", str(tmp_path))
    assert refused.location == f"file://{location}"
    assert rows(delta) == both_generations()


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("where", ["data", "location", "partition", "warehouse"])
def test_maintenance_refuses_an_iceberg_table(iceberg, tmp_path, operation, where):
    location = iceberg_table(iceberg).location().removeprefix("file://")
    assert os.path.isdir(f"{location}/data") and os.path.isdir(f"{location}/metadata"), "the layout assumed"
    target = {"data": f"{location}/data", "location": location, "partition": f"{location}/data/day=1",
              "warehouse": iceberg["location"]}[where]
    refused = assert_refused(target, operation, "iceberg", str(tmp_path))
    assert refused.location == f"file://{location}"
    assert rows(iceberg) == both_generations()


def iceberg_metadata_elsewhere(tmp_path) -> tuple[dict, str]:
    """An Iceberg table whose metadata is not beside its data (``write.metadata.path``), written by two jobs of
    the table committer: its configuration and its data directory, where only their commit logs name it."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField

    from airflow_commit_provider.protocol.tables.iceberg import IcebergTarget

    cfg = {"format": "iceberg", "location": str(tmp_path / "warehouse"), "table_name": "ns.events",
           "job_id": "events-1", "mode": "append", "partition_by": ["day"], "tasks": 3, "rows": 4, "gen": 0}
    target = IcebergTarget.open(cfg["table_name"], None, cfg["location"])
    schema = Schema(*(NestedField(i, name, LongType()) for i, name in enumerate(["id", "day", "gen"], 1)))
    target.catalog.create_table(cfg["table_name"], schema=schema, location=target.location,
                                partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "day")),
                                properties={"write.metadata.path": f"file://{tmp_path}/elsewhere"})
    two_jobs(cfg)
    assert not os.path.exists(f"{target.location}/metadata") and os.listdir(tmp_path / "elsewhere")
    return cfg, f"{target.location}/data"


def test_iceberg_metadata_kept_elsewhere_is_found_by_the_job_records(tmp_path):
    """The table's metadata is not beside its data: the commit logs the table committer left in the data
    directory name the table, and the compaction is refused by them."""
    cfg, data = iceberg_metadata_elsewhere(tmp_path)
    refused = assert_refused(data, "compact", "iceberg", str(tmp_path))
    assert refused.name == "ns.events" and "_commits/events-" in str(refused)
    assert rows(cfg) == both_generations()


def first_table_job_under_way(tmp_path, table_format: str) -> str:
    """A new table's first job (``first``), set up only: no Delta log nor Iceberg metadata yet, only the job record
    that names the table. Returns the table's data directory."""
    cfg = {"format": table_format, "location": str(tmp_path / "t"), "table_name": "ns.t", "job_id": "first"}
    if table_format == "delta":
        del cfg["table_name"]
    committer = committer_for(cfg)
    committer.setup_job()
    return committer.store.url().removeprefix("file://")


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_a_first_table_job_under_way_is_found_by_its_job_record(tmp_path, table_format):
    """Before a new table's first commit, the job record the table job's setup wrote names the table, and
    maintenance is refused by it."""
    data = first_table_job_under_way(tmp_path, table_format)
    refused = assert_refused(data, "compact", table_format, str(tmp_path))
    assert "_temporary/first/_job.json (job record)" in str(refused)


def test_a_plain_directory_is_no_table(tmp_path):
    """Names alone do not make a table: a ``metadata`` directory without table metadata, a job's records that
    name no table. The compaction runs."""
    root = str(tmp_path / "plain")
    dedup_tables.our_append(root, "w0", {0: [0, 1], 1: [2, 3]})
    dedup_tables.our_append(root, "w1", {0: [4, 5]})
    os.makedirs(f"{root}/metadata")
    open(f"{root}/metadata/notes.json", "w").close()
    assert table_at(LocalStore(root)) is None
    assert compact(FileOutputCommitter(root, "compact-1", algorithm=1, mode="append"), 1, 10**6)["state"] == \
        "committed"
    os.remove(f"{root}/metadata/notes.json")   # not Parquet: the readers below would stop at it
    dedup_tables.assert_rows_once(root, list(range(6)))


def test_following_the_delta_advice_compacts_the_table(delta):
    """``optimize.compact()`` then ``vacuum``, as the refusal says: one file per partition, every row."""
    import deltalake

    with pytest.raises(OwnedByTable):
        compact(FileOutputCommitter(delta["location"], "compact-1", algorithm=1, mode="append"), 1, 10**6)
    dt = deltalake.DeltaTable(delta["location"])
    assert len(dt.file_uris()) == 12
    dt.optimize.compact()
    dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    dt = deltalake.DeltaTable(delta["location"])
    assert len(dt.file_uris()) == 2
    assert rows(delta) == both_generations()
    parquet = [f for _, _, names in os.walk(delta["location"]) for f in names if f.endswith(".parquet")]
    assert len(parquet) == 2, "vacuum deleted the small files no version needs"


def spark_copy_table(root: str) -> list[int]:
    """Spark's speculative table (a task's file also under ``_copy_1``, the same bytes): what deduplication
    deletes in a plain directory. Returns the ids, each once."""
    dedup_tables.spark_table("speculative", root)
    plan = find_duplicates(LocalStore(str(root)))
    assert [d.path.rpartition("_")[2] for d in plan.deletions] == ["1.parquet"], "the copy is a duplicate"
    return dedup_tables.spark_ids("speculative")


def distinct(table: pa.Table) -> pa.Table:
    return table.group_by(table.column_names).aggregate([]).select(table.column_names)


def test_deduplication_of_a_directory_converted_to_delta_is_refused_and_the_advice_works(tmp_path):
    """``convert_to_deltalake`` made the Parquet directory a table whose log names the copy too: deleting the
    copy would break it. Refused; the table's own transaction (an overwrite with the distinct rows) and vacuum
    remove the duplicate instead."""
    import deltalake

    root = tmp_path / "spec"
    ids = spark_copy_table(root)
    deltalake.convert_to_deltalake(str(root))
    table_rows = Counter(pa.table(deltalake.DeltaTable(str(root)).to_pyarrow_table())["id"].to_pylist())
    assert sorted(table_rows) == ids and max(table_rows.values()) == 2, "the table holds the copy's rows twice"
    for operation in ("find_duplicates", "remove_duplicates"):
        assert_refused(str(root), operation, "delta", str(tmp_path))
    assert Counter(pa.table(deltalake.DeltaTable(str(root)).to_pyarrow_table())["id"].to_pylist()) == table_rows
    deltalake.write_deltalake(str(root), distinct(pa.table(deltalake.DeltaTable(str(root)).to_pyarrow_table())),
                              mode="overwrite")
    deltalake.DeltaTable(str(root)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert sorted(pa.table(deltalake.DeltaTable(str(root)).to_pyarrow_table())["id"].to_pylist()) == ids


def test_deduplication_of_files_added_to_an_iceberg_table_is_refused_and_the_advice_works(tmp_path):
    """The Spark files added to an Iceberg table (``add_files``) in place, in its data directory: refused; the
    table's overwrite with the distinct rows removes the duplicate from the table."""
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    catalog = SqlCatalog("t", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    catalog.create_namespace("ns")
    data = warehouse / "ns" / "spec" / "data"
    ids = spark_copy_table(data)
    files = sorted(f"file://{data}/{n}" for n in os.listdir(data) if n.endswith(".parquet"))
    import pyarrow.parquet as pq

    table = catalog.create_table("ns.spec", schema=pq.read_schema(files[0].removeprefix("file://")),
                                 location=f"file://{warehouse}/ns/spec")
    table.add_files(files)
    table_rows = Counter(table.scan().to_arrow()["id"].to_pylist())
    assert sorted(table_rows) == ids and max(table_rows.values()) == 2, "the table holds the copy's rows twice"
    for operation in ("find_duplicates", "remove_duplicates"):
        assert_refused(str(data), operation, "iceberg", str(tmp_path))
    table = catalog.load_table("ns.spec")
    assert Counter(table.scan().to_arrow()["id"].to_pylist()) == table_rows
    table.overwrite(distinct(table.scan().to_arrow()))
    assert sorted(catalog.load_table("ns.spec").scan().to_arrow()["id"].to_pylist()) == ids
