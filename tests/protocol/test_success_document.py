"""The ``_SUCCESS`` documents and the commit log stay byte for byte what they were when the manifest was turned into
JSON through ``dataclasses.asdict`` (issue 36: the manifest is now encoded once per commit, its long lists shared by
every record that holds them). The expected bytes are computed here the way the previous implementation did, from
the same manifest: the fields in their order, ``table`` left out when ``None``, the partition markers' own keys
after the manifest's, ``retained_files`` in the root marker's diagnostics only."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_commit_provider.protocol import FileOutputCommitter, run_task_attempt
from airflow_commit_provider.protocol.records.job import CommitLog
from airflow_commit_provider.protocol.records.success import SuccessManifest, write_markers
from airflow_commit_provider.protocol.stores import store_for

FORMAT = "airflow-commit-provider"


def old_encode(doc: dict[str, Any]) -> bytes:
    """``records.encode`` as it was: one compact ``json.dumps`` of the whole document."""
    return json.dumps(doc, sort_keys=False, separators=(",", ":"), default=str).encode()


def old_doc(manifest: SuccessManifest) -> dict[str, Any]:
    """``SuccessManifest.to_doc`` as it was: ``dataclasses.asdict``, the optional fields (``table``, ``names``,
    ``maintenance``, and ``audit`` since it exists) left out when ``None``."""
    doc = dataclasses.asdict(manifest)
    for optional in ("table", "names", "maintenance", "audit"):
        if doc[optional] is None:
            del doc[optional]
    return doc


def old_markers(manifest: SuccessManifest, visible: dict[str, int], partitions: set[str]) -> dict[str, bytes]:
    """Every marker the previous ``write_markers`` wrote for *manifest* (path -> bytes), *visible* being the other
    visible files (path -> size) and *partitions* the directories that get their own marker."""
    body = {k: v for k, v in old_doc(manifest).items() if k != "files"}
    out = {}
    for part in sorted(set(partitions) - {""}):
        files = [f for f in manifest.files if f["path"].startswith(part + "/")]
        kept = [{"path": p, "size": size} for p, size in sorted(visible.items()) if p.startswith(part + "/")]
        doc = {**body, "partition": part, "files": files, "partitions": [part], "retained": kept,
               "totals": {"files": len(files), "bytes": sum(f["size"] for f in files),
                          "rows": sum(f["rows"] or 0 for f in files), "tasks": len({f["task"] for f in files}),
                          "partitions": 1}}
        out[f"{part}/_SUCCESS"] = old_encode({"format": f"{FORMAT}/success", "version": 1, **doc})
    retained = [{"path": p, "size": visible[p]} for p in sorted(visible)]
    body["diagnostics"] = {**body["diagnostics"], "retained_files": len(retained)}
    out["_SUCCESS"] = old_encode({"format": f"{FORMAT}/success", "version": 1, **body, "files": manifest.files,
                                  "retained": retained})
    return out


def old_commit_log(manifest: SuccessManifest, history: list[dict[str, Any]]) -> bytes:
    """The commit log the previous ``SaveCommitLog`` wrote for *manifest* after *history*."""
    body = {k: v for k, v in old_doc(manifest).items() if k != "files"}
    return old_encode({"format": f"{FORMAT}/commit-log", "version": 1, **body, "history": history,
                       "files": manifest.files})


def fixed_manifest(table: dict[str, Any] | None) -> SuccessManifest:
    """A job of two partitions, a file of unknown rows, a task with failed attempts, labels nested and odd."""
    files = [{"path": "day=1/part-00000-u.c000.parquet", "size": 10, "rows": 1, "task": 0},
             {"path": "day=1/part-00001-u.c000.parquet", "size": 11, "rows": None, "task": 1},
             {"path": "day=2/part-00001-u.c001.parquet", "size": 12, "rows": 3, "task": 1}]
    tasks = [{"task": 0, "attempt": 1, "app_attempt": 0, "recovered_from_app": None, "committed_attempt": "0.1",
              "files": 1, "failed_attempts": [], "denied_attempts": [], "unfinished_attempts": []},
             {"task": 1, "attempt": 3, "app_attempt": 1, "recovered_from_app": 0, "committed_attempt": "0.3",
              "files": 2, "failed_attempts": ["0.1"], "denied_attempts": ["0.2"], "unfinished_attempts": []}]
    return SuccessManifest(
        committer="FileOutputCommitter", algorithm=1, mode="dynamic", partition_by=["day"], job_id="pinned",
        job_uuid="0" * 32, generation=2, app_attempt=1, labels={"dag_id": "d", "nested": {"a": [1, 2.5, None]},
                                                               "é": "ü"},
        started="2026-01-01T00:00:00.000000+00:00", finished="2026-01-01T00:00:01.000000+00:00",
        output="file:///out", files=files, totals={"files": 3, "bytes": 33, "rows": None, "tasks": 2, "partitions": 2},
        partitions=["day=1", "day=2"], tasks=tasks, deleted={"files": 4}, replaced_generation="f" * 32,
        durations={"recovery": 0.5, "moves": 1e-06}, diagnostics={"resumed": False, "warnings": ["w"], "pid": 7},
        table=table)


@pytest.mark.parametrize("table", [None, {"format": "delta", "table": "t", "version": 3, "files_added": 3}],
                         ids=["directory", "table"])
def test_markers_and_commit_log_are_the_documents_asdict_gave(tmp_path, table):
    manifest = fixed_manifest(table)
    root = tmp_path / "out"
    for rel, size in {"day=1/old.parquet": 5, "day=3/other.parquet": 6, "top.parquet": 7}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x" * size)
    for f in manifest.files:
        (root / f["path"]).parent.mkdir(parents=True, exist_ok=True)
        (root / f["path"]).write_bytes(b"x" * f["size"])
    store = store_for(str(root), durable=False)
    visible = {"day=1/old.parquet": 5, "day=3/other.parquet": 6, "top.parquet": 7}
    expected = old_markers(manifest, visible, {"day=1", "day=2"})

    assert write_markers(store, manifest, partitions={"day=1", "day=2"}) == 3
    assert {rel: store.read_bytes(rel) for rel in expected} == expected

    history = [{"job_uuid": "e" * 32, "generation": 1, "app_attempt": 0, "finished": "x", "totals": {"files": 1}}]
    log = CommitLog(manifest.to_doc(), tuple(history))
    assert log.to_json() == old_commit_log(manifest, history)


def test_to_doc_is_asdicts_document_and_the_callers_copy():
    manifest = fixed_manifest(None)
    doc = manifest.to_doc()
    assert old_encode(doc) == old_encode(old_doc(manifest))
    doc["durations"]["total"] = 2.0
    doc["diagnostics"]["cleanup_deferred"] = True
    assert "total" not in manifest.durations and "cleanup_deferred" not in manifest.diagnostics, \
        "commit_job adds to the document it returns, never to the manifest"


def test_a_real_commit_writes_the_documents_asdict_gave(tmp_path):
    """A dynamic job of two application attempts (a task recovered, a failed attempt, a retained partition):
    each marker and the commit log, read back, re-encoded as the previous implementation encoded the same
    manifest, are the same bytes."""
    root = tmp_path / "out"
    (root / "day=9").mkdir(parents=True)
    (root / "day=9" / "kept.parquet").write_bytes(b"kept")

    def committer() -> FileOutputCommitter:
        return FileOutputCommitter(str(root), "pinned", algorithm=1, mode="dynamic", partition_by=["day"],
                                   labels={"dag_id": "d"})

    def rows(task: int):
        return lambda w: w.write(pa.table({"day": [1, 2], "task": [task, task]}))

    c = committer()
    c.setup_job()
    run_task_attempt(c, 0, 1, rows(0))
    with pytest.raises(RuntimeError):
        run_task_attempt(c, 1, 1, lambda w: (_ for _ in ()).throw(RuntimeError("first try fails")))
    c = committer()
    c.setup_job()   # a cleared run: application attempt 1 recovers task 0
    run_task_attempt(c, 0, 1, rows(0))
    run_task_attempt(c, 1, 2, rows(1))
    returned = c.commit_job(2)

    success = json.loads((root / "_SUCCESS").read_bytes())
    manifest = SuccessManifest.validate(success, "_SUCCESS")
    assert manifest.tasks[1]["failed_attempts"] == ["0.1"] and manifest.tasks[0]["recovered_from_app"] == 0
    visible = {"day=9/kept.parquet": 4}
    parts = {"day=1", "day=2"}
    body = dataclasses.replace(manifest, diagnostics={k: v for k, v in manifest.diagnostics.items()
                                                      if k != "retained_files"})
    expected = old_markers(body, visible, parts)
    assert {rel: (root / rel).read_bytes() for rel in expected} == expected
    log_bytes = (Path(root) / "_commits" / "pinned.json").read_bytes()
    logged = json.loads(log_bytes)
    at_log = dataclasses.replace(manifest, durations=logged["durations"], diagnostics=logged["diagnostics"])
    assert log_bytes == old_commit_log(at_log, logged["history"])
    assert {k: v for k, v in returned.items() if k not in ("durations", "diagnostics")} == \
        {k: v for k, v in old_doc(manifest).items() if k not in ("durations", "diagnostics")}
