"""The local store's fast paths: whole-file reads through plain system calls, and listings that skip the job's own
files without a stat. Correctness at the edges that a fast path could get wrong."""

from __future__ import annotations

import os
from collections.abc import Sequence

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


def test_visible_listings_skip_what_they_are_told_to(tmp_path):
    for rel, n in (("a/x.parquet", 3), ("a/y.parquet", 5), ("b.parquet", 7), ("_temporary/z", 1)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"." * n)
    store = LocalStore(str(tmp_path))
    assert sorted(store.visible_files_except({"a/x.parquet"})) == [("a/y.parquet", 5), ("b.parquet", 7)]
    assert sorted(store.list_files("", visible_only=True)) == [("a/x.parquet", 3), ("a/y.parquet", 5),
                                                               ("b.parquet", 7)]
    assert sorted(store.visible_names()) == ["a/x.parquet", "a/y.parquet", "b.parquet"]
    assert sorted(store.list_names("")) == ["_temporary/z", "a/x.parquet", "a/y.parquet", "b.parquet"]


class OldSignatureStore(LocalStore):
    """A user's store written against the previous release's interface: ``list_files`` and ``list_names`` with
    their old signatures, overridden (here to count calls)."""

    calls = 0

    def list_files(self, rel: str = "", *, visible_only: bool = False) -> list[tuple[str, int]]:
        OldSignatureStore.calls += 1
        return super().list_files(rel, visible_only=visible_only)

    def list_names(self, rel: str) -> list[str]:
        return super().list_names(rel)

    def read_in_dir(self, rel: str, names: Sequence[str]) -> list[bytes | None]:
        return super().read_in_dir(rel, names)


def test_a_store_written_against_the_previous_interface_still_commits(tmp_path):
    """The fast listings are new methods with defaults in the base class, not new parameters of existing ones: a
    user's store subclass that overrides the old signatures commits and writes _SUCCESS (it failed after
    publishing, with a TypeError, when the markers passed a new keyword to list_files)."""
    from airflow_commit_provider.protocol import make_committer, read_success_marker, run_task_attempt
    from airflow_commit_provider.protocol.stores.base import Store

    class Minimal(Store):  # only the abstract methods: the defaults of the new listings must work on it
        pass

    assert "visible_names" not in getattr(Minimal, "__abstractmethods__", set())
    store = OldSignatureStore(str(tmp_path / "out"))
    c = make_committer(store, "j", mode="append")
    c.setup_job()
    def write(w, t):
        with w.open_file(extension="txt") as fh:
            fh.write(b"x" * (t + 1))

    for t in range(2):
        run_task_attempt(c, t, 1, lambda w, t=t: write(w, t))
    manifest = c.commit_job(2)
    assert manifest["totals"]["files"] == 2
    assert read_success_marker(str(tmp_path / "out"), verify_files=True)["job_uuid"] == manifest["job_uuid"]
