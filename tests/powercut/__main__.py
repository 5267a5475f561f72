"""The power-cut matrix as one command: ``python -m tests.powercut [--fs ext4,btrfs] [--points P,..] [-v]``.

Every commit point of task and job commit, and "just after commit_job returned", x every mode (error, append,
overwrite with old data, dynamic with old partitions) x v1 and v2, on each file system asked for (ext4 by default;
:mod:`.disk` says how each is cut, :mod:`.cell` what one cell does and checks). Needs root and loop devices; a file
system's missing tools are installed with apt-get. Prints one matrix per file system, then what failed; exits
non-zero on any failure. ``--fsyncs files`` (no directory fsync) or ``none`` runs the job on a store that breaks
the durability rules on purpose: what each file system's simulation catches then.

A cell reads ``ok``, ``-`` (the point is not on that algorithm's path), ``BROKEN`` (its control failed or it
could not run: the simulation proved nothing there), ``unclean`` (a writeback nobody asked for made every try's
cut milder) or the checks that failed: ``s`` the state after the reboot is not true (unreadable files, lost old
rows, a false ``_SUCCESS``), ``d`` the committed state was not on the disk after ``commit_job`` returned, ``r``
the job could not be resumed to exactly once, ``c`` it could not be cleared and recomputed to exactly once.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from tests.powercut import disk  # noqa: E402
from tests.powercut.cell import ALGORITHMS, MODES, POINTS, Cell, Outcome, run_cell  # noqa: E402
from tests.protocol.scenario import FSYNCS  # noqa: E402

Key = tuple[str, str, str, int]

LETTERS = (("state after reboot", "s"), ("committed when commit_job returned", "d"), ("resume", "r"), ("clear", "c"))


def mark(outcome: Outcome) -> str:
    if outcome.status == "pass":
        return "ok"
    if outcome.status == "n/a":
        return "-"
    if outcome.status == "broken":
        return "BROKEN"
    if outcome.status == "unclean":
        return "unclean"
    failed = outcome.failures()
    return "".join(letter for check, letter in LETTERS if any(k.endswith(": " + check) for k in failed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fs", default="ext4", help="comma-separated file systems: " + ", ".join(disk.FILE_SYSTEMS))
    parser.add_argument("--points", help="comma-separated subset of: " + ", ".join(POINTS))
    parser.add_argument("--modes", help="comma-separated subset of: " + ", ".join(MODES))
    parser.add_argument("--algorithms", help="comma-separated subset of: 1, 2")
    parser.add_argument("--fsyncs", default="all", choices=FSYNCS,
                        help="what the job's store fsyncs: all (the product), files (never a directory), none")
    parser.add_argument("-v", "--verbose", action="store_true", help="every failed check of every cell")
    args = parser.parse_args()
    names = args.fs.split(",")
    if set(names) - set(disk.FILE_SYSTEMS):
        parser.error(f"unknown file systems: {', '.join(sorted(set(names) - set(disk.FILE_SYSTEMS)))}")
    for fs in names:
        disk.install_tools(disk.FILE_SYSTEMS[fs])
        why = disk.unavailable(disk.FILE_SYSTEMS[fs])
        if why:
            print(f"cannot simulate a power cut of {fs} here: {why}", file=sys.stderr)
            return 2
    points = args.points.split(",") if args.points else list(POINTS)
    modes = args.modes.split(",") if args.modes else list(MODES)
    algorithms = [int(a) for a in args.algorithms.split(",")] if args.algorithms else list(ALGORITHMS)
    unknown = sorted(set(points) - set(POINTS)) + sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown points or modes: {', '.join(unknown)}")
    columns = [(m, a) for m in modes for a in algorithms]
    base = tempfile.mkdtemp(prefix="powercut-")
    results: dict[Key, Outcome] = {}
    seconds: dict[str, float] = {}
    try:
        for fs in names:
            t0 = time.monotonic()
            for point in points:
                for mode, alg in columns:
                    results[(fs, point, mode, alg)] = outcome = run_cell(Cell(alg, mode, point, fs, args.fsyncs), base)
                    print(f"  {outcome.cell.name()}: {mark(outcome)} ({outcome.seconds:.1f} s)", file=sys.stderr,
                          flush=True)
            seconds[fs] = time.monotonic() - t0
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for fs in names:
        report(fs, points, columns, {k: o for k, o in results.items() if k[0] == fs}, seconds[fs], args.verbose)
    return 0 if all(o.status in ("pass", "n/a") for o in results.values()) else 1


def report(fs: str, points: list[str], columns: list[tuple[str, int]], results: dict[Key, Outcome],
           seconds: float, verbose: bool) -> None:
    """The matrix of one file system, what failed in it, and its counts."""
    heads = [f"v{a} {m}" for m, a in columns]
    width = max(map(len, points + [fs]))
    print(fs.ljust(width) + " | " + " | ".join(heads))
    for point in points:
        cells = [mark(results[(fs, point, m, a)]) for m, a in columns]
        print(point.ljust(width) + " | " + " | ".join(c.center(len(h)) for c, h in zip(cells, heads)))
    counts = {s: sum(o.status == s for o in results.values()) for s in ("pass", "fail", "broken", "unclean", "n/a")}
    retried = sum(o.tries > 1 for o in results.values())
    forced = sum(o.canaries.get("lost") == "empty" for o in results.values())
    committed = "" if disk.FILE_SYSTEMS[fs].ordered else f"; {forced} whose job forced a commit of the whole disk"
    print()
    for outcome in results.values():
        if outcome.status in ("fail", "broken", "unclean"):
            failed = outcome.failures()
            shown = failed if verbose else dict(list(failed.items())[:2])
            print(f"{outcome.cell.name()}: " + "; ".join(f"{k}: {v[:220]}" for k, v in shown.items()))
    print(f"{fs}: {len(results) - counts['n/a']} cells: {counts['pass']} passed, {counts['fail']} failed, "
          f"{counts['broken']} broken, {counts['unclean']} unclean ({counts['n/a']} not on that algorithm's path; "
          f"{retried} cut again after a writeback nobody asked for{committed}) in {seconds:.0f} s\n")


if __name__ == "__main__":
    sys.exit(main())
