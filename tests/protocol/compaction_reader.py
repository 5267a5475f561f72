"""A reader in its own process that lists and reads a table over and over, as a dashboard query would, and records
every read in which a row was seen twice.

``python -m tests.protocol.compaction_reader ROOT STOP OUT``: reads until the file STOP exists, then once more,
and writes ``{"reads", "failed_reads", "twice", "fewest_rows", "most_rows"}`` to OUT as JSON. A read that fails
because a file it listed went before it was opened (a compaction deleting its inputs) is counted in
``failed_reads`` and retried (so is one that found no file at all: every partition directory between the
deletion of its inputs and the rename of its merged files); ``twice`` lists, per read that saw one, the ids seen
more than once.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter


def read_ids(root: str) -> list[int]:
    import pyarrow.dataset as ds

    return ds.dataset(root, format="parquet", partitioning="hive").to_table(columns=["id"]).column("id").to_pylist()


def main(root: str, stop: str, out: str) -> None:
    from pyarrow import ArrowException

    report = {"reads": 0, "failed_reads": 0, "twice": [], "fewest_rows": None, "most_rows": None}
    last = False
    while not last:
        last = os.path.exists(stop)
        try:
            ids = read_ids(root)
        except (OSError, ArrowException):   # a file listed, then deleted; or no file left to infer a schema from
            report["failed_reads"] += 1
            last = False  # the read after STOP must succeed
            continue
        report["reads"] += 1
        twice = sorted(i for i, n in Counter(ids).items() if n > 1)
        if twice:
            report["twice"].append(twice[:20])
        report["fewest_rows"] = min(len(ids), report["fewest_rows"] if report["fewest_rows"] is not None else len(ids))
        report["most_rows"] = max(len(ids), report["most_rows"] or 0)
    with open(out, "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main(*sys.argv[1:4])
