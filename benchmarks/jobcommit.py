"""Job commit against its floor at every task shape, both durability modes (issue 36).

``python -m benchmarks.jobcommit [--n 10000] [--runs 5] [--dir DIR] [--json FILE]`` prepares, per run, a job of N
one-row Parquet files at each shape (tasks x files per task, as :mod:`benchmarks.shapes`), v1, appending into an
empty directory, once with ``durable=False`` and once with the default (durable), and times
``commit_job(defer_cleanup=True)``: what Airflow's commit task waits for. Just before each commit, once its job is
prepared, it measures that mode's floor (:mod:`benchmarks.durability`): a plain ``os.rename`` loop over N files (for
``durable=False``), or the same loop with both directories fsynced and a 1 KB marker written durably (for the
default). The table gives the medians (ms) and the median of each commit's ratio to its own floor (this 2-core VM's
speed drifts by half within minutes: a floor measured once per run compared commits with another machine's
floor), and ``x_floor_min``, the fastest commit over the fastest floor (the phases last seconds, and a commit of
10,000 tasks can start in one and end in the other): the goal is at most 2 everywhere, at 10,000 and at 100,000 files
(``--n 10000,100000``; preparing the 100,000 one-file tasks of the durable job alone took 25 minutes on a loaded
2-core machine, the task side's fsyncs, so the default is 10,000).

A package without the ``durable`` option (0.3.0, which never fsynced) is measured without it, its rows marked
``durable=n/a``. ``python -m benchmarks.versions --bench jobcommit --ref REF`` runs this very module against
REF's package too, alternately, and prints both versions' ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_commit_provider.protocol import make_committer  # noqa: E402
from benchmarks.durability import durable_floor  # noqa: E402
from benchmarks.run import prepare_job, rename_floor  # noqa: E402
from benchmarks.shapes import merge_json, print_table, shapes  # noqa: E402


def has_durable_option(base: str) -> bool:
    """Whether the package under test has the ``durable`` option (0.3.0 had none, and never fsynced)."""
    try:
        make_committer(os.path.join(base, "probe"), "probe", durable=False)
    except TypeError:
        return False
    return True


def one_commit(base: str, n: int, tasks: int, fpt: int, durable: bool | None) -> tuple[float, float]:
    """Seconds of ``commit_job(defer_cleanup=True)`` of a fresh job (``durable=None``: the package's only mode), and
    of its floor (the rename floor, or the durable floor for the durable mode) measured just before it, once the
    job is prepared: this VM's speed drifts by half within minutes, so a floor measured at the start of a run and
    a commit made later compared two machines."""
    root = os.path.join(base, f"{tasks}x{fpt}-{durable}")
    c, tasks = prepare_job(root, n, 1, files_per_task=fpt, **({} if durable is None else {"durable": durable}))
    measure = durable_floor if durable else rename_floor
    floor = measure(os.path.join(base, f"floor-{tasks}x{fpt}-{durable}"), n)
    os.sync()  # no other job's writeback in this one's fsyncs
    t0 = time.perf_counter()
    c.commit_job(tasks, defer_cleanup=True)
    seconds = time.perf_counter() - t0
    c.remove_trash()
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(os.path.join(base, f"floor-{tasks}x{fpt}-{durable}"), ignore_errors=True)
    return seconds, floor


def bench(n: int, runs: int, where: str | None, per_task: set[int] | None = None) -> list[dict[str, Any]]:
    """One row per shape and mode: medians of *runs* over fresh jobs, each commit against the floor measured just
    before it (:func:`one_commit`): the ratio is the median of those pairs' ratios."""
    got: dict[tuple[int, int, bool | None], list[tuple[float, float]]] = defaultdict(list)
    for _ in range(runs):
        base = tempfile.mkdtemp(prefix="bench-jobcommit-", dir=where)
        try:
            modes: tuple[bool | None, ...] = (False, True) if has_durable_option(base) else (None,)
            for tasks, fpt in [s for s in shapes(n) if per_task is None or s[1] in per_task]:
                for durable in modes:   # alternating, so that the machine's drift hits both alike
                    got[(tasks, fpt, durable)].append(one_commit(base, n, tasks, fpt, durable))
        finally:
            shutil.rmtree(base, ignore_errors=True)
    rows = []
    for (tasks, fpt, durable), samples in sorted(got.items(), key=lambda kv: (-kv[0][0], str(kv[0][2]))):
        commit = statistics.median(s for s, _ in samples)
        floor = statistics.median(f for _, f in samples)
        rows.append({"bench": "job commit", "n": n, "shape": f"{tasks}x{fpt}", "committer": "ours v1",
                     "durable": "n/a" if durable is None else durable, "runs": len(samples), "median": commit,
                     "floor_ms": round(1000 * floor), "commit_ms": round(1000 * commit),
                     "x_floor": statistics.median(s / f for s, f in samples),
                     # each at the machine's fastest: what the code costs, whichever phase the median met
                     "x_floor_min": min(s for s, _ in samples) / min(f for _, f in samples)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="10000", help="comma-separated file counts (default 10000)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--files-per-task", default=None, help="comma-separated: only these shapes (e.g. 1)")
    parser.add_argument("--dir", default=None, help="where the jobs run (its file system is what is measured)")
    parser.add_argument("--json", default="benchmarks/results.json",
                        help='the JSON file: key "jobcommit" (other keys kept)')
    args = parser.parse_args()
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
               "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    print(f"machine: {machine}")
    per_task = {int(f) for f in args.files_per_task.split(",")} if args.files_per_task else None
    rows = [row for n in args.n.split(",") for row in bench(int(n), args.runs, args.dir, per_task)]
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print_table(f"job commit, v1, append into an empty directory (medians of {args.runs}; each commit over its own "
                "floor, measured just before it: os.rename loop for durable=False, the durable floor for the "
                "default)", rows,
                ["n", "shape", "durable", "floor_ms", "commit_ms", "x_floor", "x_floor_min"])
    print(f"load average at the end: {machine['loadavg_at_end']}")
    merge_json(args.json, "jobcommit", {"machine": machine, "runs": args.runs, "rows": rows,
                                        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


if __name__ == "__main__":
    main()
