"""One job's configuration, validated once: the operators, the committer, the setup context and the job record use
this object, so a bad value is refused by name in one place and a job's settings cannot drift between its tasks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import CorruptRecord, InvalidOutputSpec
from .modes import Mode, mode_named
from .paths import check_partition_key

_ALGORITHMS: dict[str, int | str] = {"1": 1, "v1": 1, "2": 2, "v2": 2, "magic": "magic"}


def check_number(value: Any, what: str) -> int:
    """*value* if it is a non-negative integer (``bool`` is not); :class:`InvalidOutputSpec` naming *what*."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOutputSpec(f"{what} must be a non-negative integer, got {value!r}")
    return value


def normalize_algorithm(algorithm: int | str) -> int | str:
    """``1``/``"v1"``/``"1"`` -> 1, ``2``/``"v2"`` -> 2, ``"magic"``; anything else is refused by name."""
    key = str(algorithm).strip().lower()
    if key not in _ALGORITHMS or isinstance(algorithm, bool):
        raise InvalidOutputSpec(
            f"unknown committer algorithm {algorithm!r}: use 1 (v1, atomic job commit), 2 (v2, task commit moves "
            "files into the output; faster, partial output visible on failure) or 'magic' (S3, zero copy)")
    return _ALGORITHMS[key]


def partition_columns(partition_by: str | Iterable[str] | None) -> tuple[str, ...]:
    """The partition columns as a tuple, each a valid name, none repeated."""
    if partition_by is None:
        return ()
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    if not isinstance(partition_by, Iterable):
        raise InvalidOutputSpec(f"give a partition column name or a list of them, not {partition_by!r}")
    cols = tuple(check_partition_key(k) for k in partition_by)
    if len(set(cols)) != len(cols):
        raise InvalidOutputSpec(f"partition columns repeat: {cols}")
    return cols


def check_threads(commit_threads: Any) -> int | None:
    """*commit_threads* if it is ``None`` (the store's default) or a positive integer."""
    if commit_threads is not None and (isinstance(commit_threads, bool) or not isinstance(commit_threads, int)
                                       or commit_threads < 1):
        raise InvalidOutputSpec("commit_threads must be a positive integer (or None: the store's default)")
    return commit_threads


@dataclass(frozen=True)
class RunOwner:
    """One DAG run (Airflow's ``dag_id``, ``run_id``), as the owner of the application attempts its setup
    claims (:mod:`.owners` says the rule); *clear_number* says which clear of the run set one up."""

    dag_id: str
    run_id: str
    clear_number: int = 0

    def __post_init__(self) -> None:
        for key in ("dag_id", "run_id"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise InvalidOutputSpec(f"RunOwner: {key} must be a non-empty string, got {value!r}")
        check_number(self.clear_number, "RunOwner: clear_number")

    def same_run(self, other: RunOwner) -> bool:
        """Whether *other* is this very run (any clear of it): its attempts are this run's to use."""
        return (self.dag_id, self.run_id) == (other.dag_id, other.run_id)

    def describe(self) -> str:
        return f"DAG run {self.run_id!r} of DAG {self.dag_id!r} (clear {self.clear_number})"

    def key(self) -> str:
        """A short name for the run (any clear of it) in a record's file name: a digest of its ids, which may
        hold characters no file name takes."""
        return hashlib.sha256(f"{self.dag_id}\0{self.run_id}".encode()).hexdigest()[:20]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, value: Any, where: str) -> RunOwner | None:
        """The owner an application attempt's marker names (``None``: it names none); :class:`CorruptRecord`
        naming *where* for one that is not an owner."""
        if value is None:
            return None
        try:
            if not isinstance(value, Mapping):
                raise InvalidOutputSpec(f"not a mapping: {value!r}")
            return cls(value["dag_id"], value["run_id"], value.get("clear_number", 0))
        except (KeyError, InvalidOutputSpec) as exc:
            raise CorruptRecord(f"{where}: owner is not a DAG run ({exc})") from None


@dataclass(frozen=True)
class CommitConfig:
    """What a job is set up with. Built once (``CommitConfig(...)`` validates); frozen, so every part of the
    protocol that holds it holds the same values.

    :param algorithm: 1 (task output hidden until job commit), 2 (task commit moves files into the output) or
        ``"magic"`` (S3 multipart uploads completed at job commit); ``"v1"``, ``"2"``... are accepted.
    :param mode: ``error``, ``append``, ``overwrite`` or ``dynamic`` (:mod:`.modes`).
    :param partition_by: partition columns, in directory order.
    :param commit_threads: parallel file moves at job commit; ``None``: the store's default.
    :param labels: free-form JSON values copied into ``_SUCCESS`` (dag id, run id, ...).
    :param part_size: the magic committer's multipart part size (bytes); ``None``: its default.
    :param durable: on a local disk, fsync what each step needs to survive a power cut; ``False`` for scratch.
    :param names: what names the job, as strings (the operators give its DAG id, job key and job name): its job
        record and commit log keep them, and a set-up of the same job id named otherwise is refused
        (:class:`~.errors.JobIdentityCollision`), since one id for two namings would make the second run's commit
        replace the first's files. Empty: the caller names nothing, and nothing is checked.
    :param owner: the run this committer works for (:mod:`.owners`): its setup records it in the application
        attempt it claims, and its tasks work only in an attempt it owns; ``None``: any attempt (the newest).
    """

    algorithm: int | str = 1
    mode: str = "error"
    partition_by: tuple[str, ...] = ()
    commit_threads: int | None = None
    labels: Mapping[str, Any] = field(default_factory=dict)
    part_size: int | None = None
    durable: bool = True
    names: Mapping[str, str] = field(default_factory=dict)
    owner: RunOwner | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "algorithm", normalize_algorithm(self.algorithm))
        set_(self, "partition_by", partition_columns(self.partition_by))
        self.strategy.check(self.partition_by)
        check_threads(self.commit_threads)
        if self.part_size is not None and check_number(self.part_size, "part_size") < 1:
            raise InvalidOutputSpec("part_size must be a positive number of bytes")
        if not isinstance(self.durable, bool):
            raise InvalidOutputSpec(f"durable must be True or False, got {self.durable!r}")
        if not isinstance(self.labels, Mapping):
            raise InvalidOutputSpec(f"labels must be a mapping of names to JSON values, got {self.labels!r}")
        if self.owner is not None and not isinstance(self.owner, RunOwner):
            raise InvalidOutputSpec(f"owner must be a RunOwner (the DAG run) or None, got {self.owner!r}")
        set_(self, "labels", dict(self.labels))
        if not isinstance(self.names, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in self.names.items()):
            raise InvalidOutputSpec(f"names must map names to strings (say {{'dag_id': 'etl', 'job_key': "
                                    f"'2024-01-01', 'job_name': 'load'}}), got {self.names!r}")
        set_(self, "names", dict(self.names))

    @property
    def strategy(self) -> Mode:
        """The mode as the object the plan, the markers and the abort ask (:mod:`.modes`)."""
        return mode_named(self.mode)


__all__ = ["CommitConfig", "RunOwner", "check_number", "check_threads", "normalize_algorithm", "partition_columns"]
