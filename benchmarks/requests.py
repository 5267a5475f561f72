"""Requests and bytes copied per file over a whole job, per store: ``python -m benchmarks.requests``.

Each store runs on its emulator on 127.0.0.1 (S3: moto's server; Google Cloud Storage: fake-gcs-server; Azure Blob
Storage: Azurite), with the tests' HTTP proxy (``tests/s3/faultproxy.py``, no fault armed) in front, so every
request the job sends is counted on the wire, by HTTP method, whatever client library sends it: the job's set-up,
every task attempt, the job commit. Shapes: 100 tasks x 1 file, 100 tasks x 10 files, and 10 task instances of
10 shards x 10 files (``shards_per_task``), their shards committed each alone
(:func:`~airflow_commit_provider.operators.shards.run_shards`) and together (``shard_commit="together"``:
:func:`~airflow_commit_provider.operators.shards.run_shards_together`), through the operators' own shard runners.
Committers: algorithms 1 and 2 everywhere, ``magic`` on S3 and Azure. ``--shapes`` runs some shapes only (their
rows replace those of the same store, committer and shape in the results).

The floor beside each: what the data alone costs, one PUT per file (the files are small: no multipart upload). Bytes
copied are the store's own count of server-side copies (algorithm 1 and 2 publish by copy on object stores; magic
completes its uploads and copies nothing). Counts, not timings: they do not depend on the machine's load.
Results go to ``benchmarks/results.json`` (key ``requests_per_store``) and to stdout as a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_commit_provider.operators.shards import run_shards, run_shards_together  # noqa: E402
from airflow_commit_provider.protocol import make_committer, run_task_attempt  # noqa: E402
from benchmarks.shapes import merge_json, print_table  # noqa: E402
from tests.s3.faultproxy import FaultProxy, proxied_store  # noqa: E402
from tests.support import start_azurite, start_fake_gcs, start_moto  # noqa: E402

#: (task instances, shards per instance, files per shard, how the shards commit)
SHAPES = ((100, 1, 1, "each"), (100, 1, 10, "each"), (10, 10, 10, "each"), (10, 10, 10, "together"))
COMMITTERS = {"s3": (1, 2, "magic"), "gcs": (1, 2), "azure": (1, 2, "magic")}
ROWS_PER_FILE = 100


class CountingProxy(FaultProxy):
    """The fault proxy with no rule armed, counting requests by HTTP method as it forwards them."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream, lifetime=3600)
        self.by_method: Counter[str] = Counter()

    def _decide(self, method: str, path: str, headers: dict[str, str]) -> str | None:
        with self._lock:
            self.by_method[method] += 1
        return super()._decide(method, path, headers)

    def take(self) -> Counter[str]:
        with self._lock:
            out, self.by_method = self.by_method, Counter()
        return out


@contextmanager
def emulator(name: str) -> Iterator[tuple[str, Callable[[CountingProxy, str], Any]]]:
    """The store's emulator, running; yields its URL and a factory of a store at ``bucket/prefix`` whose every
    request goes through a proxy (the bucket is created directly, not counted)."""
    start = {"s3": start_moto, "gcs": start_fake_gcs, "azure": start_azurite}[name]
    proc, url = start(os.environ)
    try:
        if name == "s3":
            import boto3

            def make(proxy: CountingProxy, bucket: str) -> Any:
                boto3.client("s3", endpoint_url=url).create_bucket(Bucket=bucket)
                return proxied_store(proxy, f"s3://{bucket}/out")
        else:
            from airflow_commit_provider.protocol.stores import AzureStore, GCSStore
            from airflow_commit_provider.protocol.stores.azure import azure_filesystem
            from airflow_commit_provider.protocol.stores.gcs import gcs_filesystem
            from tests.support import azurite_connection_string

            def make(proxy: CountingProxy, bucket: str) -> Any:
                if name == "gcs":
                    gcs_filesystem().mkdir(bucket)
                    return GCSStore(gcs_filesystem({"endpoint_url": proxy.url, "token": "anon"}), f"{bucket}/out")
                azure_filesystem().mkdir(bucket)
                return AzureStore(azure_filesystem({"connection_string": azurite_connection_string(proxy.url)}),
                                  f"{bucket}/out")
        yield url, make
    finally:
        proc.kill()
        proc.wait()


def shape_name(instances: int, shards: int, files: int, shard_commit: str) -> str:
    together = ", together" if shard_commit == "together" else ""
    return f"{instances} x {shards} shard(s){together} x {files} file(s)"


def one_job(store: Any, proxy: CountingProxy, algorithm: int | str, instances: int, shards: int,
            files: int, shard_commit: str = "each") -> dict[str, Any]:
    """One whole job on *store*: set-up, every task attempt (shard, or task instance when its shards commit
    together), job commit; the requests of each part."""
    table = pa.table({"id": pa.array(range(ROWS_PER_FILE * files), pa.int64()),
                      "payload": pa.array([f"row-{i:06d}" for i in range(ROWS_PER_FILE * files)])})
    kw = {"part_size": 5 * 2**20} if algorithm == "magic" else {}

    def committer() -> Any:
        return make_committer(store, "bench", algorithm=algorithm, mode="append", **kw)

    proxy.take()
    committer().setup_job()
    setup = proxy.take()
    for i in range(instances):
        if shards == 1:
            outcome = run_task_attempt(committer(), i, 1, lambda w: w.write(table), max_rows_per_file=ROWS_PER_FILE)
            assert outcome.status == "committed", outcome
        elif shard_commit == "together":
            run_shards_together(committer(), i, shards, 1, lambda shard, task, w: w.write(table), threads=1,
                                max_rows_per_file=ROWS_PER_FILE)
        else:
            run_shards(committer, i, shards, 1, lambda shard, task, w: w.write(table), threads=1,
                       max_rows_per_file=ROWS_PER_FILE)
    tasks = proxy.take()
    copied_before = store.bytes_copied
    manifest = committer().commit_job(instances if shard_commit == "together" else instances * shards)
    commit = proxy.take()
    n = instances * shards * files
    assert len(manifest["files"]) == n, (len(manifest["files"]), n)
    total = setup + tasks + commit
    return {"requests": sum(total.values()), "requests_per_file": sum(total.values()) / n,
            "setup": sum(setup.values()), "task_side_per_file": sum(tasks.values()) / n,
            "job_commit_per_file": sum(commit.values()) / n, "floor_per_file": 1.0,
            "bytes_copied": store.bytes_copied, "bytes_copied_at_job_commit": store.bytes_copied - copied_before,
            "by_method": dict(sorted(total.items()))}


def bench(stores: list[str], shapes: tuple[tuple[int, int, int, str], ...] = SHAPES) -> list[dict[str, Any]]:
    rows = []
    for name in stores:
        with emulator(name) as (url, make):
            for algorithm in COMMITTERS[name]:
                for instances, shards, files, shard_commit in shapes:
                    with CountingProxy(url) as proxy:
                        bucket = f"req-{algorithm}-{instances}-{shards}-{files}-{shard_commit}".lower()
                        row = one_job(make(proxy, bucket), proxy, algorithm, instances, shards, files, shard_commit)
                    rows.append({"store": name, "committer": f"v{algorithm}" if algorithm != "magic" else "magic",
                                 "shape": shape_name(instances, shards, files, shard_commit), **row})
                    print(f"{name} {rows[-1]['committer']} {rows[-1]['shape']}: "
                          f"{row['requests_per_file']:.2f} requests per file", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=lambda v: v.split(","), default=list(COMMITTERS),
                        help=f"comma-separated, of {', '.join(COMMITTERS)}")
    names = {shape_name(*shape): shape for shape in SHAPES}
    parser.add_argument("--shapes", type=lambda v: v.split(";"), default=list(names),
                        help=f"semicolon-separated, of: {'; '.join(names)}")
    parser.add_argument("--no-save", action="store_true", help="do not write benchmarks/results.json")
    args = parser.parse_args()
    unknown = [s for s in args.shapes if s not in names]
    if unknown:
        parser.error(f"unknown shape(s) {unknown}: use {'; '.join(names)}")
    rows = bench(args.stores, tuple(names[s] for s in args.shapes))
    print_table("requests per file over a whole job (set-up, tasks, job commit), by store", rows,
                ["store", "committer", "shape", "requests", "requests_per_file", "floor_per_file", "setup",
                 "task_side_per_file", "job_commit_per_file", "bytes_copied"])
    print_table("requests by HTTP method", [{"store": r["store"], "committer": r["committer"], "shape": r["shape"],
                                              **r["by_method"]} for r in rows],
                ["store", "committer", "shape", *sorted({m for r in rows for m in r["by_method"]})])
    if not args.no_save:
        path = REPO / "benchmarks" / "results.json"
        key = lambda r: (r["store"], r["committer"], r["shape"])  # noqa: E731
        ran = {key(r) for r in rows}
        kept = [r for r in json.loads(path.read_text()).get("requests_per_store", []) if key(r) not in ran] \
            if path.exists() else []
        merge_json(str(path), "requests_per_store", kept + rows)


if __name__ == "__main__":
    main()
