"""Run the example DAGs end to end with ``dag.test()`` on an embedded Airflow (SQLite, local file system).

Used by the demo (``python -m airflow_commit_provider.demo``). Each DAG runs in its own process, with
``AIRFLOW_HOME`` under the demo's output directory, so the demo never touches a user's own Airflow setup; Airflow's
task logs go to ``<out>/logs/<dag>.log`` and only the commit summaries are printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "dags_examples"
DEMO_DAGS = [
    ("example_retry_recover", "events_retried", "every first try of the 4 mapped writes dies midway; retries commit"),
    ("example_partitioned_write", "events", "4 shards partitioned by day, FileOutputCommitter v1, mode dynamic"),
    ("example_downstream_sensor", None, "downstream DAG: deferrable sensor waits for _SUCCESS and checks it"),
]


def _env(out: Path) -> dict[str, str]:
    home = out / "airflow-home"
    return {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLES),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "COMMIT_DEMO_ROOT": str(out / "data"), "COMMIT_DEMO_CALLS": str(out / "calls.log")}


def run_example(out_dir: str) -> None:
    """Migrate the embedded DB if needed, run the demo DAGs, print what each committed."""
    from .protocol import read_success_marker

    if not EXAMPLES.is_dir():
        raise SystemExit(f"example DAGs not found at {EXAMPLES}: run the demo from a checkout of the repository")
    out = Path(out_dir).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = _env(out)
    (out / "calls.log").unlink(missing_ok=True)
    print(f"\n== Airflow demo: example DAGs with dag.test(), AIRFLOW_HOME={env['AIRFLOW_HOME']}")
    if not (out / "airflow-home" / "airflow.db").exists():
        t0 = time.monotonic()
        airflow = Path(sys.executable).with_name("airflow")
        subprocess.run([str(airflow), "db", "migrate"], env=env, check=True, capture_output=True)
        print(f"metadata DB migrated ({time.monotonic() - t0:.1f} s)")
    for module, sub, what in DEMO_DAGS:
        log = out / "logs" / f"{module}.log"
        t0 = time.monotonic()
        with open(log, "w") as fh:
            proc = subprocess.run([sys.executable, "-m", "airflow_commit_provider.example_runner", module],
                                  env=env, stdout=fh, stderr=subprocess.STDOUT)
        took = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{module} failed; see {log}")
        print(f"{module}: success in {took:.1f} s - {what}")
        if sub:
            manifest = read_success_marker(out / "data" / sub, verify_files=True)
            t = manifest["totals"]
            tasks = ", ".join(f"task {x['task']}: attempt {x['attempt']}" for x in manifest["tasks"])
            print(f"  _SUCCESS: {t['files']} files, {t['rows']} rows, {t['bytes']} bytes in {t['partitions']} "
                  f"partitions; committed {tasks}")
    calls = (out / "calls.log").read_text().splitlines() if (out / "calls.log").exists() else []
    print(f"user callables ran {len(calls)} times (4 first tries that died + 4 retries + 4 shards)")
    print(f"outputs under {out / 'data'}; logs under {out / 'logs'}")


def _run_one(module: str) -> int:
    """Child process: import the example DAG from the DAGs folder and run it with dag.test()."""
    sys.path.insert(0, str(EXAMPLES))
    dag = __import__(module).dag
    dr = dag.test()
    print(json.dumps({"dag_id": dag.dag_id, "state": str(dr.state)}))
    return 0 if str(dr.state) == "success" else 1


if __name__ == "__main__":
    sys.exit(_run_one(sys.argv[1]))
