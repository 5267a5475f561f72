"""How each algorithm makes committed files visible: one publisher per algorithm, chosen once by :func:`publisher_for`.

==================  ========================================  =============================================
publisher           task commit (after the record)            job commit
==================  ========================================  =============================================
``RenamePublisher``  v1, local disk: move the files into the   rename new partition directories whole, then
                    application attempt's ``_committed``       the remaining files one by one
``MovePublisher``   v1, object stores and other file systems:  move (S3: copy, then delete the sources in
                    nothing, the record alone commits          batches): every byte copied once
``TaskCommitPublisher``  v2: withdraw the markers above, move  check every file is there
                    the files to their final names
``MultipartPublisher``   magic (S3): nothing, the record       complete the recorded multipart uploads, abort
                    lists the pending uploads                  the job's other uploads (see :mod:`.magic`)
==================  ========================================  =============================================

Everything a committer does differently per algorithm lives here (and in :mod:`.magic`); the committer chooses
one with :func:`~.committer.publisher_for` and neither it nor the job-commit stages compare algorithms.
"""

from __future__ import annotations

from ..config import CommitConfig
from ..layout import JobLayout
from ..stores import Store
from .base import Publisher
from .magic import MultipartPublisher
from .rename import MovePublisher, RenamePublisher
from .taskcommit import TaskCommitPublisher

def publisher_for(config: CommitConfig, store: Store, layout: JobLayout, job_id: str, threads: int) -> Publisher:
    """The publisher of *config*'s algorithm on *store*: chosen once, so nothing else compares algorithms or asks
    what the store can do to publish."""
    if config.algorithm == "magic":
        return MultipartPublisher(store, layout, job_id, threads, part_size=config.part_size)
    if config.algorithm == 2:
        return TaskCommitPublisher(store, layout, job_id, threads)
    if store.link_moves:
        return RenamePublisher(store, layout, job_id, threads)
    return MovePublisher(store, layout, job_id, threads)


__all__ = ["MovePublisher", "MultipartPublisher", "Publisher", "RenamePublisher", "TaskCommitPublisher",
           "publisher_for"]
