"""The protocol on Google Cloud Storage and Azure through a network that fails: the fault proxy of tests/s3 between
the client (gcsfs, adlfs) and the emulator, as ``tests/s3/test_net_faults.py`` does for S3.

An answer lost after its request took effect (the client resends: an exclusive create meets its own object, a
delete finds nothing), a connection reset before the request reached the server, the store's own throttle answer
(GCS ``429 rateLimitExceeded``, Azure ``503 ServerBusy``, which each client retries), an outage of writes longer
than the client's retries: a whole job (an overwrite of old data, 4 tasks), each step tried again as Airflow would,
commits every row exactly once, old data replaced, nothing left under ``_temporary``; a failed run's teardown
leaves the target as it was, and the re-run commits. A step may fail only with a clear error (the client's or the
protocol's), from which its next try recovers; none hangs.

The CI subset is one cell per store and one of the magic committer on Azure; ``COMMIT_NET_FAULTS=all`` runs all
20 per store and committer pair (GCS: v1, v2; Azure: v1, v2, magic)::

    COMMIT_NET_FAULTS=all .venv/bin/python -m pytest tests/clouds/test_clouds_net_faults.py -q -p no:cacheprovider
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import pytest
from azure.core.exceptions import AzureError
from gcsfs.retry import HttpError

from airflow_commit_provider.protocol import CommitProtocolError, make_committer, read_success_marker

from ..netfaults import Steps
from ..protocol import scenario as sc
from ..s3.faultproxy import FaultProxy
from .test_clouds import STORES

#: fault schedules, as the proxy's rules; ``create`` and ``write`` stand for the store's own create-if-absent rule
#: and its upload method
SCHEDULES: dict[str, list[dict[str, Any]]] = {
    "creates-lost": [{"action": "lose", "create": True, "every": 2}],
    "every-3rd-lost": [{"action": "lose", "every": 3}],
    "resets": [{"action": "reset", "every": 3}],
    "throttled": [{"action": "slowdown", "every": 4}],
    "outage": [{"action": "reset", "write": True, "after": 10, "limit": 12}],
}
FLOWS = ("commit", "abort")
#: the committers of each store (the magic one stages blocks on Azure, and is refused on GCS)
ALGORITHMS = {"gcs": (1, 2), "azure": (1, 2, "magic")}
#: one cell per store and committer kind in CI (a cell costs 20-180 s: each client backs off between its retries);
#: the magic one loses every third answer, Put Block's and Put Block List's among them
CI_CELLS = {("gcs", 1, "creates-lost", "commit"), ("azure", 2, "creates-lost", "commit"),
            ("azure", "magic", "every-3rd-lost", "commit")}
FULL = os.environ.get("COMMIT_NET_FAULTS", "") == "all"
CELLS = [pytest.param(c, a, s, f, id=f"{c}-{a}-{s}-{f}") for c, algorithms in ALGORITHMS.items()
         for a in algorithms for s in SCHEDULES for f in FLOWS if FULL or (c, a, s, f) in CI_CELLS]
#: what a step may fail with when the network outlasts the client's retries (gcsfs lets aiohttp's own errors through:
#: a server that dropped the connection on every retry is ServerDisconnectedError, no OSError)
CLEAR_ERRORS = (CommitProtocolError, OSError, HttpError, AzureError, aiohttp.ClientError)


def quick_backoff(fs: Any) -> Any:
    """*fs* with the Azure SDK's waits between its retries shortened (1, 3, 5 s instead of 15, 18, 24 s, before
    jitter), their number kept (3): a quarter of the requests throttled made a cell take 19 minutes of waiting,
    and what a cell proves (each step's next try recovers whatever the client's retries left) does not depend on
    how long the client waited. Every client adlfs makes shares its service client's retry policy."""
    policy = getattr(getattr(fs, "service_client", None), "_config", None)
    if policy is not None:
        policy.retry_policy.initial_backoff, policy.retry_policy.increment_base = 1, 2
        policy.retry_policy.random_jitter_range = 1
    return fs


def _rule(cloud: Any, rule: dict[str, Any]) -> dict[str, Any]:
    rule = dict(rule)
    if rule.pop("create", False):
        rule.update(cloud.create_rule)
    if rule.pop("write", False):
        rule["method"] = cloud.create_rule["method"]
    return rule


@pytest.mark.timeout(1200)
@pytest.mark.parametrize(("cloud", "algorithm", "schedule", "flow"), CELLS, indirect=["cloud"])
def test_a_job_through_network_faults_commits_every_row_once(cloud, bucket, algorithm, schedule, flow):
    url, direct = cloud.root(bucket, "table"), cloud.filesystem()
    sc.write_old_data(url)
    with FaultProxy(cloud.url, lifetime=1200, throttle=cloud.throttle) as proxy:
        store = STORES[cloud.name](quick_backoff(cloud.filesystem(cloud.through(proxy.url))), f"{bucket}/table")
        rules = [proxy.add(**_rule(cloud, r)) for r in SCHEDULES[schedule]]
        steps = Steps(lambda: make_committer(store, sc.JOB, algorithm=algorithm, mode="overwrite",
                                             partition_by=["day"], commit_threads=2), CLEAR_ERRORS)
        steps.setup()
        if flow == "abort":
            steps.failed_run_aborted(url)
            assert not direct.find(f"{bucket}/table/_temporary/{sc.JOB}"), "abort left the job's records"
            steps.setup()   # the re-run
        for t in range(sc.TASKS):
            steps.task(t)
        manifest = steps.commit()
        counts = proxy.counts()
    print(f"{cloud.name} {algorithm} {schedule} {flow}: {counts}; step failures: {steps.failures}")
    assert all(r.fired for r in rules), counts
    sc.assert_exactly_once(sc.read_rows(url), old=set())
    assert read_success_marker(url, verify_files=True)["job_uuid"] == manifest["job_uuid"]
    assert not direct.find(f"{bucket}/table/_temporary"), "the commit left _temporary"
