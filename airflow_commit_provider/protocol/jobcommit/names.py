"""The job commit's stage names, in the order they run, with what each does: their one home.

Each stage (:mod:`.stages`, :mod:`.table`) takes its name from here; ``_SUCCESS.durations`` and the commit task's
summary key their times by it; the Commit status view's API serves this list (``commit_stages``) and its timeline
and help panel show the stages it names, in this order. A stage added to the protocol and not here would be timed
and never shown (``table_commit`` was, once).
"""

from __future__ import annotations

RECOVERY = "recovery"
PLAN = "plan"
WITHDRAW = "withdraw"
MOVES = "moves"
DELETES = "deletes"
TABLE_COMMIT = "table_commit"
COMMIT_LOG = "commit_log"
MARKERS = "markers"
CLEANUP_AFTER_SUCCESS = "cleanup_after_success"

#: Every stage in run order (``total`` and ``client_start`` are durations, not stages), and what it does.
COMMIT_STAGES: dict[str, str] = {
    RECOVERY: "reading every expected task's commit record (adopting tasks committed in earlier application "
              "attempts)",
    PLAN: "fixing the commit plan: every move and deletion, written before the first move",
    WITHDRAW: "withdrawing the _SUCCESS markers the commit is about to make untrue",
    MOVES: "publishing the files (renames, S3 copies, or completing multipart uploads)",
    DELETES: "removing the old files the mode replaces",
    TABLE_COMMIT: "the table's one transaction (Delta or Iceberg): the files added, the replaced ones removed",
    COMMIT_LOG: "writing the commit log _commits/<job>.json",
    MARKERS: "writing _SUCCESS (and each partition's, in dynamic mode), the root's last",
    CLEANUP_AFTER_SUCCESS: "deleting the job's working directory _temporary/<job> after _SUCCESS",
}

__all__ = ["CLEANUP_AFTER_SUCCESS", "COMMIT_LOG", "COMMIT_STAGES", "DELETES", "MARKERS", "MOVES", "PLAN",
           "RECOVERY", "TABLE_COMMIT", "WITHDRAW"]
