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
from urllib.parse import quote

#: The example DAGs, shipped in the package (in a checkout, ``airflow_commit_provider/example_dags`` is a link to
#: ``dags_examples``), so an installed wheel runs the demo as a checkout does.
EXAMPLES = Path(__file__).resolve().parent / "example_dags"
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


def run_example(out_dir: str) -> dict[str, str]:
    """Migrate the embedded DB if needed, run the demo DAGs, print what each committed; returns the run id of each
    DAG run (``dag_id -> run_id``)."""
    from .protocol import read_success_marker

    if not EXAMPLES.is_dir():
        raise SystemExit(f"example DAGs not found at {EXAMPLES}: the package is incomplete; reinstall it")
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
    runs: dict[str, str] = {}
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
        for line in reversed(log.read_text(errors="replace").splitlines()):
            if line.startswith("{") and '"run_id"' in line:
                result = json.loads(line)
                runs[result["dag_id"]] = result["run_id"]
                break
        if sub:
            manifest = read_success_marker(out / "data" / sub, verify_files=True)
            t = manifest["totals"]
            tasks = ", ".join(f"task {x['task']}: attempt {x['attempt']}" for x in manifest["tasks"])
            print(f"  _SUCCESS: {t['files']} files, {t['rows']} rows, {t['bytes']} bytes in {t['partitions']} "
                  f"partitions; committed {tasks}")
    calls = (out / "calls.log").read_text().splitlines() if (out / "calls.log").exists() else []
    print(f"user callables ran {len(calls)} times (4 first tries that died + 4 retries + 4 shards)")
    print(f"outputs under {out / 'data'}; logs under {out / 'logs'}")
    return runs


def ui_hint(out_dir: str, runs: dict[str, str]) -> str:
    """How to see these runs in Airflow's UI, with the Commit status tab: an api-server on the demo's database."""
    out = Path(out_dir).resolve()
    env = _env(out)
    airflow = Path(sys.executable).with_name("airflow")
    lines = ["\n== See it in the Airflow UI (the runs above are in the demo's database):",
             f"  AIRFLOW_HOME={env['AIRFLOW_HOME']} AIRFLOW__CORE__DAGS_FOLDER={EXAMPLES} "
             f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN={env['AIRFLOW__DATABASE__SQL_ALCHEMY_CONN']} "
             f"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True {airflow} api-server -H 127.0.0.1 -p 8080",
             "  then open (Commit status tab of each DAG run; the commit task's extra links lead there too):"]
    for dag_id, run_id in runs.items():
        lines.append(f"  http://127.0.0.1:8080/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
                     "/plugin/commit-status")
    return "\n".join(lines)


def _run_one(module: str) -> int:
    """Child process: import the example DAG from the DAGs folder and run it with dag.test()."""
    sys.path.insert(0, str(EXAMPLES))
    dag = __import__(module).dag
    dr = dag.test()
    print(json.dumps({"dag_id": dag.dag_id, "run_id": dr.run_id, "state": str(dr.state)}))
    return 0 if str(dr.state) == "success" else 1


if __name__ == "__main__":
    sys.exit(_run_one(sys.argv[1]))
