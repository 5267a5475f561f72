"""Two versions side by side in one run: ``python -m benchmarks.versions [--ref REF] [--rounds 3] [--only local,s3]``.

The checkout and the tree of git *REF* (default: the last release tag, else ``HEAD~1``) each run
``benchmarks.run --quick --only ...`` in its own process, alternately, *rounds* times; the table gives each row's
median per version and their ratio (this checkout / REF). Alternating in one run keeps the machine's load the same
for both (a restructuring must stay within noise of what it replaces; issue 21).
"""

from __future__ import annotations

import argparse
import json
import os
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


def export(ref: str, into: Path) -> Path:
    """The tree of *ref* (package and benchmarks) under *into*."""
    archive = into / "ref.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), ref, "airflow_commit_provider",
                    "benchmarks"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def run_once(tree: Path, only: str, out: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--only", only, "--json", str(out)],
                   cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())["rows"]


def key(row: dict) -> tuple:
    return (row.get("bench"), row.get("n"), row.get("committer"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=None, help="the other version (a git ref); default: last tag, else HEAD~1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="local,s3")
    args = parser.parse_args()
    ref = args.ref or default_ref()
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        old_tree = export(ref, Path(tmp))
        samples: dict[str, dict[tuple, list[float]]] = {"this": {}, ref: {}}
        for n in range(args.rounds):
            for name, tree in (("this", REPO), (ref, old_tree)) if n % 2 == 0 else ((ref, old_tree), ("this", REPO)):
                for row in run_once(tree, args.only, Path(tmp) / f"{n}.json"):
                    if isinstance(row.get("median"), (int, float)):
                        samples[name].setdefault(key(row), []).append(row["median"])
    print(f"{'bench':28} {'n':>7} {'committer':24} {'this (s)':>10} {ref[:10]:>10} {'ratio':>6}")
    for k in sorted(samples["this"], key=str):
        if k not in samples[ref]:
            continue
        a, b = statistics.median(samples["this"][k]), statistics.median(samples[ref][k])
        print(f"{str(k[0])[:28]:28} {str(k[1]):>7} {str(k[2])[:24]:24} {a:10.4f} {b:10.4f} {a / b if b else 0:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
