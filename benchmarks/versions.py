"""Two versions side by side in one run: ``python -m benchmarks.versions [--ref REF] [--rounds 3] [--only local,s3]
[--bench MODULE]``.

The checkout and the tree of git *REF* (default: the last release tag, else ``HEAD~1``) each run
``benchmarks.run --quick --only ...`` in its own process, alternately, *rounds* times; the table gives each row's
median per version and their ratio (this checkout / REF). Alternating in one run keeps the machine's load the same
for both (a restructuring must stay within noise of what it replaces; issue 21).

With ``--bench MODULE`` (e.g. ``jobcommit``), both versions run *this checkout's* ``benchmarks.MODULE`` (with its
defaults, which measure several runs themselves, or with ``--bench-args``) over their own package: REF's tree gets
this checkout's benchmarks, so a benchmark added after REF measures REF too, and both run the same measurement. Where the rows
carry ``x_floor`` (a floor measured in the same run), both versions' ratios are printed as well: under a load that
changes between rounds, they are what compares.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def default_ref() -> str:
    tag = subprocess.run(["git", "-C", str(REPO), "describe", "--tags", "--abbrev=0"], capture_output=True, text=True)
    return tag.stdout.strip() if tag.returncode == 0 and tag.stdout.strip() else "HEAD~1"


def export(ref: str, into: Path, bench: str | None = None) -> Path:
    """The tree of *ref* (package and benchmarks) under *into*; with *bench*, this checkout's benchmarks instead
    of REF's."""
    archive = into / "ref.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), ref, "airflow_commit_provider",
                    *([] if bench else ["benchmarks"])], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    if bench:
        shutil.copytree(REPO / "benchmarks", into / "tree" / "benchmarks",
                        ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    return into / "tree"


def run_once(tree: Path, only: str, out: Path, bench: str | None = None, bench_args: str = "") -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [*shlex.split(bench_args), "--json", str(out)] if bench else ["--quick", "--only", only, "--json", str(out)]
    print(f"== {tree}", flush=True)
    subprocess.run([sys.executable, "-m", f"benchmarks.{bench or 'run'}", *args],   # a --bench prints its table
                   cwd=tree, env=env, check=True, stdout=None if bench else subprocess.DEVNULL)
    doc = json.loads(out.read_text())
    return doc[bench]["rows"] if bench else doc["rows"]


def key(row: dict) -> tuple:
    return (row.get("bench"), row.get("n"), row.get("committer"), row.get("shape"), row.get("durable"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=None, help="the other version (a git ref); default: last tag, else HEAD~1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="local,s3")
    parser.add_argument("--bench", default=None, help="run this checkout's benchmarks.BENCH against both packages")
    parser.add_argument("--bench-args", default="", help='arguments for --bench, e.g. "--n 10000,100000 --runs 3"')
    args = parser.parse_args()
    ref = args.ref or default_ref()
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        old_tree = export(ref, Path(tmp), args.bench)
        samples: dict[str, dict[tuple, list[float]]] = {"this": {}, ref: {}}
        ratios: dict[str, dict[tuple, list[float]]] = {"this": {}, ref: {}}
        for n in range(args.rounds):
            for name, tree in (("this", REPO), (ref, old_tree)) if n % 2 == 0 else ((ref, old_tree), ("this", REPO)):
                for row in run_once(tree, args.only, Path(tmp) / f"{n}.json", args.bench, args.bench_args):
                    if isinstance(row.get("median"), (int, float)):
                        samples[name].setdefault(key(row), []).append(row["median"])
                    if isinstance(row.get("x_floor"), (int, float)):
                        ratios[name].setdefault(key(row), []).append(row["x_floor"])
    print(f"{'bench':28} {'n':>7} {'committer':16} {'shape':>9} {'durable':>7} {'this (s)':>10} {ref[:10]:>10} "
          f"{'ratio':>6} {'this x_floor':>12} {'ref x_floor':>12}")
    for k in sorted(samples["this"], key=str):
        if k not in samples[ref] and not (k[4] is False and k[:4] + ("n/a",) in samples[ref]):
            continue
        other = k if k in samples[ref] else k[:4] + ("n/a",)   # REF had one mode only: it compares with False
        a, b = statistics.median(samples["this"][k]), statistics.median(samples[ref][other])
        xa, xb = (f"{statistics.median(r[kk]):12.2f}" if kk in r else f"{'':12}"
                  for r, kk in ((ratios["this"], k), (ratios[ref], other)))
        print(f"{str(k[0])[:28]:28} {str(k[1]):>7} {str(k[2])[:16]:16} {str(k[3] or ''):>9} "
              f"{'' if k[4] is None else str(k[4]):>7} {a:10.4f} {b:10.4f} {a / b if b else 0:6.2f} {xa} {xb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
