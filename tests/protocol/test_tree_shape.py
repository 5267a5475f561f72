"""A hostile tree: a symlink where a directory was expected, a partition or ``_temporary`` on another volume.

Found from outside: a partition directory that is a symlink (cold partitions on another disk) made ``dynamic``
keep old and new rows and write ``_SUCCESS`` into the link's target, ``overwrite`` write outside the root and then
delete the link (every committed row lost), ``append`` write a marker that failed its own check; a partition or
``_temporary`` on another volume failed with ``EXDEV`` after the markers were withdrawn and left the job stuck.
The protocol refuses such a tree, naming the path, before the first visible change: nothing outside the root is
created, moved or deleted, and the table is as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_commit_provider.protocol import InvalidOutputSpec, make_committer, read_success_marker
from tests.protocol.scenario import JOB, assert_exactly_once, read_rows, run_task

MODES = ["append", "overwrite", "dynamic"]


def snapshot(*roots: Path) -> dict[str, str]:
    """Every entry under *roots* without following links: files by content hash, links by target, dirs."""
    out: dict[str, str] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    out[path] = "link:" + os.readlink(path)
                elif os.path.isdir(path):
                    out[path] = "dir"
                else:
                    out[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return out


def committed_table(tmp_path: Path, algorithm: int) -> dict:
    """A table of two partitions (day=d0, day=d1) committed by an earlier job; returns the scenario config."""
    cfg = {"root": str(tmp_path / "table"), "work": str(tmp_path / "work"), "algorithm": algorithm,
           "mode": "append"}
    Path(cfg["work"]).mkdir()
    make_committer(cfg["root"], "earlier", algorithm=algorithm, mode="append", partition_by=["day"]).setup_job()
    run_task(cfg, 0, 1, job="earlier")
    make_committer(cfg["root"], "earlier", algorithm=algorithm, mode="append",
                   partition_by=["day"]).commit_job(1)
    return cfg


def run_job(cfg: dict, mode: str) -> None:
    cfg = {**cfg, "mode": mode}
    committer = make_committer(cfg["root"], "next", algorithm=cfg["algorithm"], mode=mode, partition_by=["day"])
    committer.setup_job()
    run_task(cfg, 0, 1, job="next")
    committer.commit_job(1)


def move_partition_behind_link(cfg: dict, cold: Path) -> Path:
    part = Path(cfg["root"]) / "day=d1"
    cold.mkdir()
    shutil.move(str(part), str(cold / "day=d1"))
    part.symlink_to(cold / "day=d1", target_is_directory=True)
    return part


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_a_partition_that_is_a_symlink_is_refused_and_nothing_changes(tmp_path, mode, algorithm):
    cfg = committed_table(tmp_path, algorithm)
    move_partition_behind_link(cfg, tmp_path / "cold")
    before = snapshot(Path(cfg["root"]), tmp_path / "cold")
    with pytest.raises(InvalidOutputSpec, match=r"day=d1 is a symbolic link"):
        run_job(cfg, mode)
    after = snapshot(Path(cfg["root"]), tmp_path / "cold")
    visible_before = {p: h for p, h in before.items() if "/_" not in p}
    visible_after = {p: h for p, h in after.items() if "/_" not in p}
    assert visible_after == visible_before, "the refused job changed what readers see, or the link's target"
    assert {p for p in after if p.startswith(str(tmp_path / "cold"))} == \
        {p for p in before if p.startswith(str(tmp_path / "cold"))}


@pytest.mark.parametrize("mode", MODES)
def test_a_link_the_job_does_not_write_to_is_refused_at_the_plan(tmp_path, mode):
    """The job writes day=d0 only; day=d1 behind a link would be deleted by overwrite and listed wrongly by the
    marker otherwise. Refused at the plan, before any marker is withdrawn."""
    cfg = committed_table(tmp_path, 1)
    move_partition_behind_link(cfg, tmp_path / "cold")
    marker_before = (Path(cfg["root"]) / "_SUCCESS").read_bytes()
    committer = make_committer(cfg["root"], "next", algorithm=1, mode=mode, partition_by=["day"])
    committer.setup_job()
    ta = committer.setup_task(0, 1)
    import pyarrow as pa
    import pyarrow.parquet as pq

    with committer.open_task_file(ta, "day=d0/part-00000-next.parquet") as fh:
        pq.write_table(pa.table({"task": pa.array([7], pa.int32()), "row": pa.array([0], pa.int32()),
                                 "attempt": pa.array([1], pa.int32())}), fh)
    committer.commit_task(ta)
    with pytest.raises(InvalidOutputSpec, match=r"day=d1 is a symbolic link"):
        committer.commit_job(1)
    assert (Path(cfg["root"]) / "_SUCCESS").read_bytes() == marker_before, "a marker went before the refusal"
    assert not (Path(cfg["root"]) / "day=d0" / "part-00000-next.parquet").exists()
    # the operator puts the partition back; the same job then commits, every row once
    link = Path(cfg["root"]) / "day=d1"
    link.unlink()
    shutil.move(str(tmp_path / "cold" / "day=d1"), str(link))
    committer.commit_job(1)
    read_success_marker(cfg["root"], verify_files=True)


def test_a_file_symlink_is_refused_too(tmp_path):
    cfg = committed_table(tmp_path, 1)
    (tmp_path / "elsewhere.parquet").write_bytes(b"not ours")
    (Path(cfg["root"]) / "day=d0" / "linked.parquet").symlink_to(tmp_path / "elsewhere.parquet")
    with pytest.raises(InvalidOutputSpec, match=r"linked.parquet is a symbolic link"):
        run_job(cfg, "overwrite")
    assert (tmp_path / "elsewhere.parquet").read_bytes() == b"not ours"
    assert (Path(cfg["root"]) / "day=d0" / "linked.parquet").is_symlink()


def test_the_root_itself_may_be_a_link(tmp_path):
    """Where the table lives is the user's choice: a root that is a link is used as the directory it names."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "table").symlink_to(real, target_is_directory=True)
    cfg = {"root": str(tmp_path / "table"), "work": str(tmp_path / "work"), "algorithm": 1, "mode": "overwrite"}
    Path(cfg["work"]).mkdir()
    committer = make_committer(cfg["root"], JOB, algorithm=1, mode="overwrite", partition_by=["day"])
    committer.setup_job()
    for task in range(4):
        run_task(cfg, task, 1)
    committer.commit_job(4)
    assert_exactly_once(read_rows(str(real)))
    read_success_marker(str(real), verify_files=True)


# ---------------------------------------------------------------------- other volumes (tmpfs mounts: root only)
def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


needs_mount = pytest.mark.skipif(not _can_mount(), reason="mounting a tmpfs needs root and mount(8)")


class Tmpfs:
    def __init__(self, where: Path) -> None:
        self.where = where

    def __enter__(self) -> Path:
        self.where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(self.where)], check=True)
        return self.where

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", "-l", str(self.where)], check=False)


@needs_mount
@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_a_partition_on_another_volume_is_refused_before_any_marker_goes(tmp_path, mode, algorithm):
    cfg = committed_table(tmp_path, algorithm)
    part = Path(cfg["root"]) / "day=d1"
    saved = tmp_path / "saved"
    shutil.move(str(part), str(saved))
    with Tmpfs(part):
        for name in os.listdir(saved):
            shutil.copy2(saved / name, part / name)
        marker_before = (Path(cfg["root"]) / "_SUCCESS").read_bytes()
        rows_before = sorted(map(str, read_rows(cfg["root"])))
        with pytest.raises(InvalidOutputSpec, match=r"day=d1 is a mount point below the output root"):
            run_job(cfg, mode)
        assert (Path(cfg["root"]) / "_SUCCESS").read_bytes() == marker_before
        assert sorted(map(str, read_rows(cfg["root"]))) == rows_before
        read_success_marker(cfg["root"], verify_files=True)


@needs_mount
def test_temporary_on_another_volume_is_refused_at_setup(tmp_path):
    root = tmp_path / "table"
    root.mkdir()
    with Tmpfs(root / "_temporary"):
        committer = make_committer(str(root), "j", algorithm=1, mode="overwrite", partition_by=["day"])
        with pytest.raises(InvalidOutputSpec, match=r"_temporary is a mount point below the output root"):
            committer.setup_job()
        assert os.listdir(root / "_temporary") == []


@needs_mount
@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_bind_mount_of_the_same_file_system_is_refused_too(tmp_path, algorithm):
    """A bind mount keeps the device number, but rename(2) does not cross it (EXDEV) all the same."""
    cfg = committed_table(tmp_path, algorithm)
    part = Path(cfg["root"]) / "day=d1"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(part), str(elsewhere))
    part.mkdir()
    subprocess.run(["mount", "--bind", str(elsewhere), str(part)], check=True)
    try:
        assert os.stat(part).st_dev == os.stat(cfg["root"]).st_dev
        before = snapshot(Path(cfg["root"]))
        with pytest.raises(InvalidOutputSpec, match=r"day=d1 is a mount point below the output root"):
            run_job(cfg, "dynamic")
        assert {p: h for p, h in snapshot(Path(cfg["root"])).items() if "/_" not in p} == \
            {p: h for p, h in before.items() if "/_" not in p}
        read_success_marker(cfg["root"], verify_files=True)
    finally:
        subprocess.run(["umount", "-l", str(part)], check=False)


@needs_mount
def test_a_full_disk_during_job_commit_is_finished_by_the_retry_once_there_is_room(tmp_path):
    """ENOSPC while writing the commit log (after the data moved): the retry, once there is room again, finishes
    the commit exactly once, and the failed write left no temporary file behind."""
    from airflow_commit_provider.protocol import faults

    with Tmpfs(tmp_path / "disk") as disk:
        cfg = {"root": str(disk / "table"), "work": str(tmp_path / "work"), "algorithm": 1, "mode": "overwrite"}
        Path(cfg["work"]).mkdir()
        committer = make_committer(cfg["root"], JOB, algorithm=1, mode="overwrite", partition_by=["day"])
        committer.setup_job()
        for task in range(4):
            run_task(cfg, task, 1)
        faults.arm("commit_job.after_deletes", "raise")
        with pytest.raises(faults.InjectedFault):
            committer.commit_job(4)
        faults.disarm()
        # the disk fills up (another process's log, say)
        filler = fill(disk)
        with pytest.raises(OSError, match="No space left"):
            committer.commit_job(4)
        assert not [n for n in os.listdir(disk / "table" / "_commits") if n.endswith(".tmp")]
        filler.unlink()
        committer.commit_job(4)
        assert_exactly_once(read_rows(cfg["root"]))
        read_success_marker(cfg["root"], verify_files=True)


def fill(disk: Path) -> Path:
    """Fill the file system at *disk* (unbuffered: closing the filler has nothing left to write); returns the
    filler, whose removal makes room again."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


@needs_mount
@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_task_commit_asked_again_on_a_full_disk_finishes_without_writing_a_byte(tmp_path, algorithm):
    """Found from outside: a task attempt's commit stopped right after its record (its claim and record exist,
    its files not yet moved); the disk fills; the same attempt's commit is asked again (the request repeated, or
    a zombie of the attempt). Every name it creates exclusively exists already, so it needs no byte, and it
    finished before 82ac19b; when the exclusive create stopped looking before writing its temporary file, the
    write failed with ENOSPC first and the commit could not finish until there was room. It finishes, and the
    job commits once there is room for the job's own records."""
    from airflow_commit_provider.protocol import TaskAttemptWriter, faults
    from tests.protocol.scenario import task_table

    with Tmpfs(tmp_path / "disk") as disk:
        root = str(disk / "table")
        committer = make_committer(root, JOB, algorithm=algorithm, mode="append", partition_by=["day"])
        committer.setup_job()
        ta = committer.setup_task(0, 1)
        with TaskAttemptWriter(committer, ta, partition_by=["day"]) as writer:
            writer.write(task_table(0, 1))
        faults.arm("commit_task.after_record", "raise")
        try:
            with pytest.raises(faults.InjectedFault):
                committer.commit_task(ta, writer.rows, sizes=writer.sizes)
        finally:
            faults.disarm()
        filler = fill(disk)
        record = committer.commit_task(ta, writer.rows, sizes=writer.sizes)
        assert record["attempt"] == 1 and len(record["files"]) == len(writer.rows)
        assert not [p for p in Path(root).rglob("*.tmp")], "no temporary file left behind"
        filler.unlink()
        committer.commit_job(1)
        assert_exactly_once(read_rows(root), tasks=1)
        read_success_marker(root, verify_files=True)


@pytest.mark.parametrize("below", [False, True], ids=["root_is_a_file", "root_below_a_file"])
def test_a_root_that_is_or_lies_below_a_regular_file_is_refused_naming_it(tmp_path, below):
    """Found from outside: a target below a regular file failed set-up with a raw ``NotADirectoryError`` (an
    ``OSError``, which the operators retry as a storage fault, the same way every try). It is refused, naming the
    file, with nothing created."""
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    root = blocker / "out" if below else blocker
    before = snapshot(tmp_path)
    with pytest.raises(InvalidOutputSpec, match=rf"{blocker}.* is a file, not a directory"):
        make_committer(str(root), JOB).setup_job()
    assert snapshot(tmp_path) == before, "nothing created"
