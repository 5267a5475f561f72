"""What a reader that does NOT wait for ``_SUCCESS`` can see during an overwrite or dynamic commit, and for how long.

``python -m benchmarks.reader_window [--files 1000,10000] [--runs 5]`` prints a table and writes
``benchmarks/reader_window.json``.

A job replaces N existing one-row files (N/10 tasks of 10 files) on the local disk. The job commit withdraws the
markers, publishes the new files, then deletes the old ones, then writes the new markers. Measured from the
commit's own stage clock (``_SUCCESS.durations``):

- *mixed window* (v1): from the first new file made visible to the last old file deleted: a plain directory
  reader listing in that window may see old and new rows together (duplicated or mixed data);
- *no-marker window*: from the withdrawal of the old ``_SUCCESS`` to the new one: a ``_SUCCESS``-gated reader
  waits through it and never sees the mix.

With v2 each task's files become visible at its own task commit, so the mixed window of a v2 overwrite lasts from
the first task commit to the end of job commit: the whole write stage (v2's documented trade-off).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import prepare_job  # noqa: E402


def one_run(n: int, mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = f"{tmp}/out"
        shape: dict[str, Any] = {"partitions": 10, "partition_by": ["p"]} if mode == "dynamic" else {}
        old, tasks = prepare_job(root, n, 1, mode=mode, job_id="old", **shape)
        old.commit_job(tasks)
        new, tasks = prepare_job(root, n, 1, mode=mode, job_id="new", **shape)
        d = new.commit_job(tasks)["durations"]
        # stages in order: recovery, plan, (withdraw inside moves), moves, deletes, commit_log, markers: the mix is
        # visible during moves and deletes; no marker from the withdrawal (start of moves) to the end
        mixed = d["moves"] + d["deletes"]
        no_marker = d["moves"] + d["deletes"] + d["commit_log"] + d.get("markers", 0.0)
        return {"mixed_ms": mixed * 1000, "no_marker_ms": no_marker * 1000, "job_commit_ms": d["total"] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    print(f"{'mode':10} {'files':>7} {'mixed window (ms)':>18} {'no marker (ms)':>15} {'job commit (ms)':>16}")
    for mode in ("overwrite", "dynamic"):
        for n in (int(x) for x in args.files.split(",")):
            runs = [one_run(n, mode) for _ in range(args.runs)]
            row = {"mode": mode, "files": n, "runs": args.runs,
                   **{k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}}
            results.append(row)
            print(f"{mode:10} {n:>7} {row['mixed_ms']:>18} {row['no_marker_ms']:>15} {row['job_commit_ms']:>16}")
    out = Path(__file__).with_name("reader_window.json")
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
