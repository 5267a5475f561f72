"""What a job's next generation replaces: its previous generation's files, where a compaction may have merged them.

A job's next generation (a DAG run cleared after success, the next run of a ``job_key``) replaces the files of the
generation before it: its commit deletes the files that generation's commit log lists. A compaction in between
merged some of them into a file of its own, under another name: without more, the replacing commit would find
nothing to delete and leave the old rows in the merged file beside the new ones (every row twice, with no error).
Merged files name the files they hold (:mod:`.records.merged`); the set-up of the next generation resolves the old
one's files through them (:func:`holders`) and keeps the result in its job record, so that a compaction under way
leaves them alone and the commit deletes them: a merged file holding only rows of the replaced generation is
replaced with it; one that also holds rows of other files cannot be, and the job is refused before anything
visible changes (:func:`refuse_mixed`), saying what would work instead. The footers are read only when a replaced
file is missing.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from .errors import InvalidOutputSpec
from .parallel import parallel
from .records.merged import read_origins
from .stores import Store


@dataclass
class Holders:
    """Where the rows of a replaced generation's files are: the files themselves (*present*), merged files that
    hold only them (*merged*), and merged files that hold them with rows of other files (*mixed*: file -> the
    replaced ones it holds)."""

    present: set[str] = field(default_factory=set)
    merged: set[str] = field(default_factory=set)
    mixed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def files(self) -> set[str]:
        """The files a replacing commit deletes (the mixed ones aside)."""
        return self.present | self.merged


def holders(store: Store, replaced: Set[str], visible: Set[str], skip: Set[str] = frozenset(), threads: int = 1,
            generation_uuid: str | None = None) -> Holders:
    """:class:`Holders` of *replaced* (the generation *generation_uuid*'s files, and merged files a set-up found
    holding some) among *visible*. Footers are read only when a replaced file is missing: first those of the
    recorded merged files (among *replaced*, the files whose names do not carry the generation), then, for what is
    still missing, those of every other visible Parquet file (with *threads* workers; *skip*: files the commit
    deletes anyway): after a compaction, or once after a file was deleted by hand."""
    found = Holders(present=set(replaced & visible))
    missing = set(replaced - visible)
    if not missing:
        return found
    recorded = [rel for rel in sorted(found.present) if rel.endswith(".parquet") and generation_uuid
                and generation_uuid not in rel.rsplit("/", 1)[-1]]
    for rel in recorded:
        held = read_origins(store, rel)
        if held:
            missing -= set(held)
    if not missing:
        return found
    candidates = sorted(rel for rel in visible - replaced - skip if rel.endswith(".parquet"))
    held_by: dict[str, list[str] | None] = {}

    def read(rel: str) -> None:
        held_by[rel] = read_origins(store, rel)

    parallel(read, candidates, threads)
    for rel in candidates:
        held = held_by[rel]
        if held is None or missing.isdisjoint(held):
            continue
        if set(held) <= replaced:
            found.merged.add(rel)
        else:
            found.mixed[rel] = [o for o in held if o in replaced]
    return found


def refuse_mixed(store: Store, found: Holders, job_id: str, generation: int | None, mode: str) -> None:
    """:class:`InvalidOutputSpec` naming the first merged file that holds rows of the replaced generation with
    rows of other files: those cannot be replaced on their own. Nothing was changed yet."""
    if not found.mixed:
        return
    rel, ours = sorted(found.mixed.items())[0]
    advice = "mode 'overwrite' to replace everything there" if mode == "dynamic" else \
        "mode 'overwrite' (or 'dynamic', partitioned by what tells its rows apart) to replace them with the rest"
    raise InvalidOutputSpec(
        f"job {job_id} replaces the files of its generation {generation}, but a compaction merged {len(ours)} of "
        f"them ({', '.join(ours[:3])}) into {store.url(rel)} together with rows of other files: those rows cannot "
        f"be replaced on their own, and replacing the rest would leave them in the target twice. Nothing was "
        f"changed. Run the job in {advice}; to keep the old rows and add the new ones beside them, run it as "
        "another job (a new run, or another job_key)")


__all__ = ["Holders", "holders", "refuse_mixed"]
