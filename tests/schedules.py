"""The long run of the lifecycle schedules (tests/protocol/lifecycle.py), as one command::

    .venv/bin/python -m tests.schedules --memory 10000 --local 10000 --s3 1000 --processes 500 --delta 1000 \
        --iceberg 300

- ``--memory N`` / ``--local N``: N random schedules on fsspec's memory file system / the local disk (``--steps``
  steps each, default 40), algorithms 1 and 2, every mode;
- ``--s3 N``: N schedules on S3, moto's server over HTTP on 127.0.0.1 (started here, as tests/s3/conftest.py
  does), algorithms 1, 2 and magic, ``--s3-steps`` steps each (default 16: a step costs ~90-150 ms there, and
  1,000 schedules should take no more than ~40 minutes);
- ``--gcs N`` / ``--azure N``: N schedules on Google Cloud Storage (fake-gcs-server) / Azure Blob Storage
  (Azurite), over HTTP on 127.0.0.1 (started here, as tests/clouds/conftest.py does), algorithms 1 and 2,
  ``--s3-steps`` steps each;
- ``--delta N`` / ``--iceberg N``: N schedules whose target is a Delta table / an Iceberg table (SQL catalog on
  SQLite) on the local disk, algorithm 1, every mode, the job commit also killed at the table transaction's points;
  rows read back by the format's own reader after every step (``--table-steps`` steps each, default 30: a step
  costs ~25 ms on Delta, ~70 ms on Iceberg, whose reader loads the catalog and scans the manifests);
- ``--processes N``: N schedules on the local disk whose every protocol call runs in a real worker process,
  SIGKILLed at random fault points or by timers (tests/protocol/test_lifecycle_processes.py), ``--process-steps``
  steps each (default 30);
- ``--shards N``: N schedules of task instances of several shards each (tests/protocol/shard_schedules.py), every
  try a real worker process killed, ``os._exit``-ed or paused as a zombie at random task-side fault points, with
  clears and job commits between; exactly once after each, and no try calls the user code of a committed shard;
  ``--shard-steps`` steps each (default 14).

Seeds run from ``--seed`` (default 0), so a run is reproducible and a failure is replayed with
``python -m tests.schedules --memory 1 --seed <seed>``. Each part is cut into chunks of ``--chunk`` schedules run
by ``--jobs`` interpreter processes at a time (default 2, the CI machine's cores). For every part it prints
schedules, steps and time; every violation with its seed and its shrunk schedule, as a plain test; and the
schedules that hit a known open bug (``lifecycle.KNOWN_OPEN``). Exit status 1 when any violation is not a known
open bug. No per-test timeout applies (this is not pytest).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PARTS = ("memory", "local", "s3", "gcs", "azure", "processes", "shards", "delta", "iceberg")


def run_chunk(part: str, first: int, count: int, steps: int, report_limit: int = 3) -> dict:
    """One chunk, in this process; returns what the parent aggregates."""
    if part == "shards":
        return run_shard_chunk(first, count, steps, report_limit)
    from tests.protocol import lifecycle as lc

    kwargs: dict = {}
    store = part
    if part == "s3":
        import boto3

        bucket = f"lc-{uuid.uuid4().hex[:12]}"
        boto3.client("s3").create_bucket(Bucket=bucket)
        kwargs["bucket"] = bucket
    if part in ("gcs", "azure"):
        from airflow_commit_provider.protocol.stores.azure import azure_filesystem
        from airflow_commit_provider.protocol.stores.gcs import gcs_filesystem

        bucket = f"lc-{uuid.uuid4().hex[:12]}"
        (gcs_filesystem() if part == "gcs" else azure_filesystem()).mkdir(bucket)
        kwargs["bucket"] = bucket
    if part == "processes":
        from tests.protocol.test_lifecycle_processes import ProcessLifecycle

        store, kwargs["lifecycle"] = "local", ProcessLifecycle
    reports: list[str] = []

    def report(text: str) -> None:
        if len(reports) < report_limit:
            reports.append(text)
            print(text, file=sys.stderr, flush=True)

    started = time.monotonic()
    tally = lc.run_many(store, count, first_seed=first, steps=steps, known=lc.known_open, stop_after=0,
                        report=report, **kwargs)
    return {"part": part, "first": first, "schedules": tally.schedules, "steps": tally.steps,
            "seconds": round(time.monotonic() - started, 1),
            "failures": [{"seed": r.seed, "kind": r.violation.kind} for r in tally.failures],
            "reports": reports, "known": dict(Counter(bug for _, bug in tally.known)),
            "known_seeds": [r.seed for r, _ in tally.known][:10]}


def run_shard_chunk(first: int, count: int, steps: int, report_limit: int) -> dict:
    import tempfile

    from tests.protocol import shard_schedules as sh

    base = tempfile.mkdtemp(prefix="shard-schedules-")
    started = time.monotonic()
    failures, reports, total = [], [], 0
    for seed in range(first, first + count):
        violation, schedule = sh.run_schedule(seed, base, steps)
        total += len(schedule.steps)
        if violation:
            failures.append({"seed": seed, "kind": violation[:200]})
            if len(reports) < report_limit:
                reports.append(f"shards seed {seed} {schedule.cfg}: {violation}\n  " + "\n  ".join(schedule.steps))
                print(reports[-1], file=sys.stderr, flush=True)
    return {"part": "shards", "first": first, "schedules": count, "steps": total,
            "seconds": round(time.monotonic() - started, 1), "failures": failures, "reports": reports,
            "known": {}, "known_seeds": []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for part in PARTS:
        parser.add_argument(f"--{part}", type=int, default=0, metavar="N", help=f"schedules on {part}")
    parser.add_argument("--steps", type=int, default=40, help="steps per memory/local schedule")
    parser.add_argument("--s3-steps", type=int, default=16, help="steps per S3 schedule")
    parser.add_argument("--process-steps", type=int, default=30, help="steps per real-process schedule")
    parser.add_argument("--shard-steps", type=int, default=14, help="steps per sharded schedule")
    parser.add_argument("--table-steps", type=int, default=30, help="steps per Delta/Iceberg schedule")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--jobs", type=int, default=2, help="chunks run at once")
    parser.add_argument("--chunk", type=int, default=250, help="schedules per chunk")
    parser.add_argument("--run-chunk", help=argparse.SUPPRESS)   # part:first:count:steps (a child)
    args = parser.parse_args()

    if args.run_chunk:
        part, first, count, steps = args.run_chunk.split(":")
        result = run_chunk(part, int(first), int(count), int(steps))
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        sys.stdout.flush()
        os._exit(0)   # no interpreter teardown: pyarrow/s3fs threads have nothing left to do

    steps = {"memory": args.steps, "local": args.steps, "s3": args.s3_steps, "gcs": args.s3_steps,
             "azure": args.s3_steps,
             "processes": args.process_steps,
             "shards": args.shard_steps, "delta": args.table_steps, "iceberg": args.table_steps}
    by_part = [[(part, first, min(args.chunk, getattr(args, part) - (first - args.seed)), steps[part])
                for first in range(args.seed, args.seed + getattr(args, part), args.chunk)] for part in PARTS]
    # S3 first, then round robin: the slowest part is never left to run alone at the end
    by_part.sort(key=lambda chunks: chunks[0][0] != "s3" if chunks else True)
    chunks = [c for group in itertools.zip_longest(*by_part) for c in group if c is not None]
    if not chunks:
        parser.error("nothing to run: give --memory, --local, --s3, --gcs, --azure, --processes, --shards, --delta "
                     "and/or --iceberg")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    moto = None
    if args.s3:
        from tests.support import start_moto

        moto, url = start_moto(env)
        print(f"moto server at {url}", flush=True)
    gcs = None
    if args.gcs:
        from tests.support import start_fake_gcs

        gcs, url = start_fake_gcs(env)
        print(f"fake-gcs-server at {url}", flush=True)
    azurite = None
    if args.azure:
        from tests.support import start_azurite

        azurite, url = start_azurite(env)
        print(f"Azurite at {url}", flush=True)
    totals: dict[str, Counter] = {part: Counter() for part in PARTS}
    walls: dict[str, list[float]] = {}
    failures: list[dict] = []
    known: dict[str, Counter] = {part: Counter() for part in PARTS}
    started = time.monotonic()
    running: list[tuple[subprocess.Popen, tuple]] = []
    pending = list(chunks)
    try:
        while pending or running:
            while pending and len(running) < args.jobs:
                chunk = pending.pop(0)
                walls.setdefault(chunk[0], [time.monotonic(), 0.0])
                proc = subprocess.Popen([sys.executable, "-m", "tests.schedules", "--run-chunk",
                                         ":".join(map(str, chunk))], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                        text=True)
                running.append((proc, chunk))
            time.sleep(0.2)
            for proc, chunk in list(running):
                if proc.poll() is None:
                    continue
                running.remove((proc, chunk))
                out = proc.stdout.read() if proc.stdout else ""
                line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
                part, first, count, _ = chunk
                if line is None:
                    failures.append({"part": part, "seed": first, "kind": f"chunk crashed (rc={proc.returncode})"})
                    print(f"{part} seeds {first}..{first + count - 1}: chunk crashed, rc={proc.returncode}",
                          flush=True)
                    continue
                r = json.loads(line[len("RESULT "):])
                totals[part].update(schedules=r["schedules"], steps=r["steps"], seconds=r["seconds"])
                walls[part][1] = time.monotonic()
                known[part].update(r["known"])
                failures += [{**f, "part": part} for f in r["failures"]]
                print(f"{part:9} seeds {first}..{first + count - 1}: {r['schedules']} schedules, {r['steps']} steps "
                      f"in {r['seconds']} s; violations {len(r['failures'])}"
                      + (f"; known open {r['known']} (seeds {r['known_seeds']})" if r["known"] else ""), flush=True)
    finally:
        for proc, _ in running:
            proc.kill()
        for server in (moto, gcs, azurite):
            if server is not None:
                server.terminate()
    print(f"\n{'part':10}{'schedules':>10}{'steps':>10}{'busy s':>9}{'wall s':>9}  violations  known open")
    for part in PARTS:
        t = totals[part]
        if not t:
            continue
        wall = walls[part][1] - walls[part][0]
        print(f"{part:10}{t['schedules']:>10}{t['steps']:>10}{t['seconds']:>9.0f}{wall:>9.0f}  "
              f"{sum(f['part'] == part for f in failures):>10}  {dict(known[part]) or ''}")
    print(f"total wall time {time.monotonic() - started:.0f} s with {args.jobs} jobs")
    for f in failures:
        print(f"VIOLATION {f['part']} seed {f['seed']}: {f['kind']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
