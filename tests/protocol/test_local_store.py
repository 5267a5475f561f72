"""The local store's fast paths: whole-file reads through plain system calls, and listings that skip the job's own
files without a stat. Correctness at the edges that a fast path could get wrong."""

from __future__ import annotations

import os

import pytest

from airflow_commit_provider.protocol.stores import LocalStore
from airflow_commit_provider.protocol.stores.local import _FIRST_READ


@pytest.mark.parametrize("size", [0, 1, _FIRST_READ - 1, _FIRST_READ, _FIRST_READ + 1, 3 * 2**20 + 7])
def test_read_bytes_returns_the_whole_file(tmp_path, size):
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    assert LocalStore(str(tmp_path)).read_bytes("f") == data


def test_read_bytes_errors_are_the_os_errors(tmp_path):
    store = LocalStore(str(tmp_path))
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError):
        store.read_bytes("missing")
    with pytest.raises(IsADirectoryError):
        store.read_bytes("d")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        with pytest.raises(IsADirectoryError):
            store.read_bytes("d")
    assert len(os.listdir("/proc/self/fd")) == before, "a failed read leaks no descriptor"


def test_list_files_skips_what_it_is_told_to(tmp_path):
    for rel, n in (("a/x.parquet", 3), ("a/y.parquet", 5), ("b.parquet", 7), ("_temporary/z", 1)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"." * n)
    store = LocalStore(str(tmp_path))
    assert sorted(store.list_files("", visible_only=True, skip={"a/x.parquet"})) == [("a/y.parquet", 5),
                                                                                    ("b.parquet", 7)]
    assert sorted(store.list_files("", visible_only=True)) == [("a/x.parquet", 3), ("a/y.parquet", 5),
                                                               ("b.parquet", 7)]
    assert sorted(store.list_names("", visible_only=True)) == ["a/x.parquet", "a/y.parquet", "b.parquet"]
    assert sorted(store.list_names("")) == ["_temporary/z", "a/x.parquet", "a/y.parquet", "b.parquet"]
