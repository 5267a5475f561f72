"""During a v1 job the directories are Hadoop's, scoped per job, except that committed tasks' files share one
``_committed`` directory per application attempt (see layout.py); nothing is visible before job commit."""

from __future__ import annotations

import os

from airflow_commit_provider.protocol import FileOutputCommitter, TaskAttemptWriter

from . import scenario as sc


def tree(root: str) -> list[str]:
    out = []
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def test_v1_layout_is_scoped_per_job(tmp_path):
    root = str(tmp_path / "out")
    c = FileOutputCommitter(root, "daily-2024-01-01", algorithm=1, mode="append", partition_by=["day"])
    job = c.setup_job()
    assert job.app_attempt == 0
    ta = c.setup_task(3, 2)
    with TaskAttemptWriter(c.store, ta, partition_by=["day"]) as w:
        w.write(sc.task_table(3, 2))
    name = f"part-00003-{job.job_uuid}-c000.snappy.parquet"
    attempt_file = f"_temporary/daily-2024-01-01/0/_temporary/attempt_00003_2/day=d0/{name}"
    assert attempt_file in tree(root)
    assert sc.visible_files(root) == []

    c.commit_task(ta, w.rows)
    entries = tree(root)
    assert f"_temporary/daily-2024-01-01/0/_committed/day=d0/{name}" in entries
    assert "_temporary/daily-2024-01-01/0/_commits/task_00003.json" in entries
    assert not any("_temporary/attempt_00003_2" in e for e in entries), "task commit empties and removes the attempt directory"
    assert sc.visible_files(root) == [], "I2: nothing visible before job commit"

    # a second application attempt (a cleared DAG run) recovers the task without moving its data
    assert c.setup_job().app_attempt == 1
    rec = c.recover_task(3)
    assert rec["recovered_from_app"] == 0 and rec["data_dir"] == "_temporary/daily-2024-01-01/0/_committed"
    assert "_temporary/daily-2024-01-01/1/_commits/task_00003.json" in tree(root)

    c.commit_job([3])
    assert sorted(sc.visible_files(root)) == [f"day=d0/{name}", f"day=d1/{name.replace('c000', 'c001')}"]
    assert not os.path.exists(os.path.join(root, "_temporary"))
    assert os.path.exists(os.path.join(root, "_commits", "daily-2024-01-01.json"))


def test_two_jobs_keep_separate_temporary_dirs(tmp_path):
    root = str(tmp_path / "out")
    a = FileOutputCommitter(root, "job-a", algorithm=1, mode="append")
    b = FileOutputCommitter(root, "job-b", algorithm=1, mode="append")
    a.setup_job()
    b.setup_job()
    ta, tb = a.setup_task(0, 1), b.setup_task(0, 1)
    assert ta.work_dir == "_temporary/job-a/0/_temporary/attempt_00000_1"
    assert tb.work_dir == "_temporary/job-b/0/_temporary/attempt_00000_1"
    for c, t in ((a, ta), (b, tb)):
        with TaskAttemptWriter(c.store, t) as w:
            w.write(sc.task_table(0, 1))
        c.commit_task(t, w.rows)
    a.commit_job(1)  # cleanup of job a must leave job b's work alone
    assert os.listdir(os.path.join(root, "_temporary", "job-b", "0", "_committed"))
    b.commit_job(1)
    assert len(sc.read_rows(root)) == 2 * sc.ROWS
    assert not os.path.exists(os.path.join(root, "_temporary"))
