"""Partition values survive the path (invariant I11): what a reader gets back is exactly what was written.

Values are escaped into ``key=value`` directory names as Spark and Hive do (``%XX`` for Spark's escape set, plus NUL),
so hive readers that unescape (pyarrow, duckdb, Spark, Trino) turn them back into the original value. Every test
writes real Parquet through the real protocol, commits the job and reads the output with real readers.
"""

from __future__ import annotations

import os
import re
import uuid
from collections import Counter

import duckdb
import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_commit_provider.protocol import FileOutputCommitter, InvalidOutputSpec, run_task_attempt
from airflow_commit_provider.protocol.paths import (
    NULL_PARTITION,
    escape_path_name,
    parse_partition,
    partition_dir,
    unescape_path_name,
)
from airflow_commit_provider.protocol.tasks.writer import TaskAttemptWriter

from . import scenario as sc

#: The values the readers must return unchanged: everything a hive path could mangle.
TRICKY = [
    "%", "/", "=", ":", "#", "?", "*", " ", "a%20b", "%2F", "%", ".", "..", "_x", ".x", "\\", "tab\there",
    "bell\x07", "nul\x00here", "line\nbreak", "\x7f", "é", "日本", "🦆", " leading", "trailing ", " both ",
    "../../etc", "a/b/../c", "x=y", "k=v/k2=v2", '"quoted\'', "[a]{b}^", "+plus+", "semi;colon", "&amp",
    "~tilde", "!bang", "__HIVE_DEFAULT_PARTITION__x", "plain", "C:\\windows", "s3://bucket/key", None,
]
TRICKY = list(dict.fromkeys(TRICKY))  # unique, in order


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    if request.param == "local":
        yield str(tmp_path / "out")
        return
    path = f"memory://values-{uuid.uuid4().hex}/out"
    yield path
    fs, p = fsspec.core.url_to_fs(path)
    if fs.exists(p):
        fs.rm(p, recursive=True)


def rows_of(table: pa.Table, columns: list[str]) -> Counter:
    return Counter(tuple(row[c] for c in columns) for row in table.to_pylist())


def read_with_pyarrow(root: str) -> pa.Table:
    fs, path = fsspec.core.url_to_fs(root)
    return ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive").to_table()


def read_with_duckdb(root: str, columns: list[str]) -> Counter:
    con = duckdb.connect()
    try:
        if root.startswith("memory://"):
            con.register_filesystem(fsspec.filesystem("memory"))
        glob = root.rstrip("/") + "/**/*.parquet"
        sql = f"SELECT {', '.join(columns)} FROM read_parquet(?, hive_partitioning=true)"
        return Counter(tuple(r) for r in con.execute(sql, [glob]).fetchall())
    finally:
        con.close()


def write_job(root: str, table: pa.Table, partition_by: list[str], *, algorithm: int = 1, tasks: int = 2) -> None:
    c = FileOutputCommitter(root, "job", algorithm=algorithm, mode="append", partition_by=partition_by)
    c.setup_job()
    for task in range(tasks):
        start, end = task * table.num_rows // tasks, (task + 1) * table.num_rows // tasks
        part = table.slice(start, end - start)
        run_task_attempt(c, task, 1, lambda w, part=part: w.write(part))
    c.commit_job(tasks)


def tricky_table() -> pa.Table:
    """Column ``p`` takes every tricky value, ``q`` the next one (so nested directories are tricky too)."""
    n = len(TRICKY)
    return pa.table({
        "p": pa.array(TRICKY, pa.string()),
        "q": pa.array([TRICKY[(i + 1) % n] for i in range(n)], pa.string()),
        "x": pa.array(range(n), pa.int64()),
    })


# ---------------------------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("algorithm", [1, 2])
def test_pyarrow_reads_back_exactly_the_values_written(root, algorithm):
    table = tricky_table()
    write_job(root, table, ["p", "q"], algorithm=algorithm)
    got = read_with_pyarrow(root)
    assert got.schema.field("p").type == pa.string() and got.schema.field("q").type == pa.string()
    assert rows_of(got, ["p", "q", "x"]) == rows_of(table, ["p", "q", "x"])


def test_duckdb_reads_back_exactly_the_values_written(root):
    table = tricky_table()
    write_job(root, table, ["p", "q"])
    expected = rows_of(table, ["p", "q", "x"])
    got = read_with_duckdb(root, ["p", "q", "x"])
    assert got == expected, {"missing": expected - got, "unexpected": got - expected}


def test_directory_names_are_the_ones_spark_writes(tmp_path):
    root = str(tmp_path / "out")
    values = ["a/b", "a%20b", "%2F", ".", "..", "_x", "k=v:w", "\\", "tab\t", "nul\x00", "é 日本", "#?*",
              '"\'{[]}^', "\x7f", " sp ", None]
    write_job(root, pa.table({"p": pa.array(values, pa.string()), "x": range(len(values))}), ["p"], tasks=1)
    dirs = sorted(d for d in os.listdir(root) if not d.startswith("_"))
    assert dirs == sorted([
        "p=a%2Fb", "p=a%2520b", "p=%252F", "p=.", "p=..", "p=_x", "p=k%3Dv%3Aw", "p=%5C", "p=tab%09",
        "p=nul%00", "p=é 日本", "p=%23%3F%2A", "p=%22%27%7B%5B%5D}%5E", "p=%7F", "p= sp ",
        "p=__HIVE_DEFAULT_PARTITION__"])
    for d in dirs:
        assert any(f.endswith(".parquet") for f in os.listdir(os.path.join(root, d)))
    # nothing escaped out of the output root
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_open_file_escapes_the_partition(root):
    c = FileOutputCommitter(root, "job", mode="append", partition_by=["p"])
    c.setup_job()

    def produce(w):
        with w.open_file("data.csv", partition={"p": "../a/b", "q": "%41"}) as fh:
            fh.write(b"x\n1\n")

    run_task_attempt(c, 0, 1, produce)
    c.commit_job(1)
    assert sc.visible_files(root) == ["p=..%2Fa%2Fb/q=%2541/data.csv"]
    assert parse_partition("p=..%2Fa%2Fb/q=%2541") == {"p": "../a/b", "q": "%41"}


@pytest.mark.parametrize("key", ["../x", "a/b", "_hidden", ""])
def test_open_file_partition_columns_follow_the_column_rule(root, key):
    c = FileOutputCommitter(root, "job", mode="append")
    c.setup_job()
    with pytest.raises(InvalidOutputSpec, match="cannot be a directory name"):
        run_task_attempt(c, 0, 1, lambda w: w.open_file("data.csv", partition={key: "v"}))
    assert not any("x=v" in f or "b=v" in f or "_hidden=v" in f for f in sc.all_files(root))


# ---------------------------------------------------------------------------------------------- length
def _long_value_cases():
    return [
        ("y" * 300, "300 plain characters"),
        ("/" * 100, "100 characters, 300 once escaped"),
        ("日" * 85, "85 characters, 255 bytes of UTF-8, 257 with 'p='"),
    ]


@pytest.mark.parametrize("value,why", _long_value_cases(), ids=["ascii", "escaped", "utf8"])
def test_too_long_value_is_refused_before_any_file_is_opened(root, value, why):
    c = FileOutputCommitter(root, "job", mode="append", partition_by=["p"])
    c.setup_job()
    ta = c.setup_task(0, 1)
    writer = TaskAttemptWriter(c, ta, partition_by=c.partition_by)
    # the short value comes first: its file must not be opened either
    table = pa.table({"p": ["short", value, "other"], "x": [1, 2, 3]})
    with pytest.raises(InvalidOutputSpec) as err:
        writer.write(table)
    message = str(err.value)
    assert "'p'" in message and "255" in message and value[:20] in message, message
    assert len(message) < 600, "the value is shortened in the message"
    assert writer.rows == {}
    assert c.store.list_files(ta.work_dir) == [], "no file of that write() call was opened"
    writer.close()
    c.abort_task(ta)

    # the same through run_task_attempt: refused, attempt removed, nothing visible after job commit
    with pytest.raises(InvalidOutputSpec, match="255"):
        run_task_attempt(c, 0, 2, lambda w: w.write(table))
    with pytest.raises(InvalidOutputSpec, match="255"):
        run_task_attempt(c, 0, 3, lambda w: w.open_file("x.csv", partition={"p": value}))
    assert not any("/_temporary/attempt_" in f for f in sc.all_files(root)), "failed attempts leave no files"
    run_task_attempt(c, 0, 4, lambda w: w.write(pa.table({"p": ["ok"], "x": [1]})))
    c.commit_job(1)
    assert sc.visible_files(root) and all(f.startswith("p=ok/") for f in sc.visible_files(root))
    assert [r["p"] for r in sc.read_rows(root)] == ["ok"]


def test_length_limit_is_bytes_of_the_escaped_component():
    assert partition_dir(["p"], ["a" * 253]) == "p=" + "a" * 253  # 255 bytes: the longest allowed
    with pytest.raises(InvalidOutputSpec, match="255"):
        partition_dir(["p"], ["a" * 254])
    assert partition_dir(["p"], ["é" * 126]) == "p=" + "é" * 126  # 254 bytes
    with pytest.raises(InvalidOutputSpec, match="255"):
        partition_dir(["p"], ["é" * 127])  # 256 bytes
    with pytest.raises(InvalidOutputSpec, match="255"):
        partition_dir(["p"], ["%" * 85])  # 2 + 255 bytes once escaped


# ---------------------------------------------------------------------------------------------- still refused
@pytest.mark.parametrize("value,message", [
    ("", "empty string.*__HIVE_DEFAULT_PARTITION__"),
    (NULL_PARTITION, "null"),
    ("\ud800", "UTF-8"),
])
def test_values_that_cannot_survive_the_path_are_refused(value, message):
    with pytest.raises(InvalidOutputSpec, match=message) as err:
        partition_dir(["day"], [value])
    assert "'day'" in str(err.value)


# ---------------------------------------------------------------------------------------------- escaping
def test_escape_matches_spark():
    # Spark's ExternalCatalogUtils.escapePathName on POSIX: ASCII 01-1F, " # % ' * / : = ? \ 7F { [ ] ^
    assert escape_path_name("a b/c%d=e:f") == "a b%2Fc%25d%3De%3Af"
    assert escape_path_name("".join(chr(c) for c in range(0x20))) == "".join(f"%{c:02X}" for c in range(0x20))
    assert escape_path_name("\"#%'*/:=?\\\x7f{[]^") == "%22%23%25%27%2A%2F%3A%3D%3F%5C%7F%7B%5B%5D%5E"
    assert escape_path_name(" !$&()+,-.;<>@_`|}~é日🦆") == " !$&()+,-.;<>@_`|}~é日🦆"


def test_unescape_matches_spark():
    assert unescape_path_name("a%2Fb%3d%25") == "a/b=%"
    assert unescape_path_name("100%") == "100%"
    assert unescape_path_name("%4") == "%4"
    assert unescape_path_name("%zz%41") == "%zzA"
    assert unescape_path_name("é%20日") == "é 日"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_escape_and_unescape_are_inverse(text):
    escaped = escape_path_name(text)
    assert unescape_path_name(escaped) == text
    assert not any(ch in escaped for ch in "/\\\x00:=?*#\"'{[]^") and not any(ord(ch) < 32 for ch in escaped)
    assert all(re.fullmatch("[0-9A-F]{2}", escaped[i + 1:i + 3]) for i, ch in enumerate(escaped) if ch == "%")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(min_size=1, max_size=60).filter(lambda v: v != NULL_PARTITION)),
                min_size=1, max_size=3))
def test_parse_partition_inverts_partition_dir(values):
    # st.text() makes no lone surrogates, and 60 characters stay under 255 bytes escaped: all are writable
    text = partition_dir([f"k{i}" for i in range(len(values))], values)
    assert len(text.split("/")) == len(values)
    parsed = parse_partition(text)
    assert [None if parsed[f"k{i}"] == NULL_PARTITION else parsed[f"k{i}"] for i in range(len(values))] == values


# ---------------------------------------------------------------------------------------- every row in one partition
@pytest.mark.parametrize("values", [
    [1.5, float("nan"), float("nan"), 2.5],     # an equality filter drops NaN rows (NaN != NaN): silent loss
    [0.0, -0.0, 0.0],                           # ... and puts -0.0 rows in the 0.0 partition too: duplicates
], ids=["nan", "signed-zero"])
def test_every_row_lands_in_exactly_one_partition(tmp_path, values):
    root = str(tmp_path / "out")
    c = FileOutputCommitter(root, "j", mode="append", partition_by=["p"])
    c.setup_job()
    table = pa.table({"x": list(range(len(values))), "p": values})
    run_task_attempt(c, 0, 1, lambda w: w.write(table))
    manifest = c.commit_job(1)
    assert manifest["totals"]["rows"] == len(values)
    got = sorted(r["x"] for r in sc.read_rows(root))
    assert got == list(range(len(values))), "every row exactly once"


@pytest.mark.parametrize("column", [
    pa.array([1_700_000_000_000_000_001, 1_700_000_000_000_000_002], pa.timestamp("ns")),
    pa.array([[1], [2]]),
], ids=["timestamp-ns", "list"])
def test_partition_values_without_a_directory_name_are_refused_clearly(tmp_path, column):
    root = str(tmp_path / "out")
    c = FileOutputCommitter(root, "j", mode="append", partition_by=["p"])
    c.setup_job()
    with pytest.raises(InvalidOutputSpec, match="partition column"):
        run_task_attempt(c, 0, 1, lambda w: w.write(pa.table({"x": [1, 2], "p": column})))
    assert sc.visible_files(root) == []
