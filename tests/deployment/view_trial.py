"""The Commit status view and ``airflow-commit`` tried from outside, as an operator at 3 a.m. would (issue 32's
done-when): ``python -m tests.deployment.view_trial [--shots docs/ui]`` (about 10 minutes; not in CI).

A real deployment (``conftest.make_deployment``: api-server, scheduler with LocalExecutor, dag-processor,
triggerer, PostgreSQL, on 127.0.0.1) runs the DAGs of :mod:`.trial_dags`, with moto's S3 server behind the
connection ``trial_s3``:

1. 1,000 shards (100 task instances x 10) whose tries fail and retry, watched while they run: the REST API polled
   every second (every task's row), Chromium light and dark reading the page every second, and the commit
   records' times on disk. Checked: nothing shown ``failed``/``unfinished`` or as a denied attempt later committed
   in the same application attempt, the count of committed tasks and the bar never went back, how long a shard
   commit took to show (API and page);
2. every piece of advice, followed literally until the next run commits: a schema mismatch between tasks (a
   directory and a Delta table: fix and clear, or the printed ``airflow-commit abort`` line and a new run), a
   setup refused by a non-empty target in mode ``error``, "clear only failed tasks" in a live run, a ``job_key``
   job's view across two runs;
3. the command line on that deployment's targets: ``gc`` beside a live job (which must not change), ``abort
   --purge`` of a live run's job (refused), and ``inspect``/``gc``/``verify`` on S3 through ``--conn-id``, each
   line it prints followed as printed.

It prints the figures as JSON and exits 1 when a check failed. ``--shots DIR`` copies the screenshots (light and
dark) of the live sharded view, the deterministic failure and the refused setup there.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..support import start_moto
from .conftest import HOME, ROOT, WORK, Deployment, make_deployment

OUT = HOME.parent / "view-trial"
READ = """() => { const q = s => { const e = document.querySelector(s); return e ? e.innerText : null };
  const counts = {}; document.querySelectorAll('[data-testid^=count-]').forEach(e => counts[e.dataset.testid.slice(6)]
    = +e.innerText.replace(/[^0-9]/g, ''));
  return {state: q('[data-testid=stage-state]'), progress: q('[data-testid=progress]'), counts,
          steps: q('[data-testid=next-steps]')}; }"""
FAILED: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


class Trial:
    def __init__(self, dep: Deployment, browser, moto: str) -> None:
        self.dep, self.browser, self.moto = dep, browser, moto
        self.token = dep.session.headers["Authorization"].split()[1]
        self.figures: dict[str, object] = {}

    # ---------------------------------------------------------------- reading
    def view(self, path: str, **params) -> dict:
        resp = self.dep.session.get(f"{self.dep.base}/commit-status/api/{path}", params=params, timeout=120)
        assert resp.status_code == 200, (path, resp.status_code, resp.text)
        return resp.json()

    def stage(self, dag: str, run: str) -> dict:
        return self.view(f"dags/{dag}/runs/{run}")["stages"][0]

    def rows(self, dag: str, run: str) -> dict[int, dict]:
        out = {}
        for offset in range(0, 1000, 500):
            page = self.view(f"dags/{dag}/runs/{run}/stages/stage.setup/tasks", offset=offset, limit=500)
            out.update({r["task"]: r for r in page["items"]})
            if offset + 500 >= page["total"]:
                return out
        return out

    def page(self, theme: str, url: str):
        ctx = self.browser.new_context(viewport={"width": 1440, "height": 1100}, color_scheme=theme)
        ctx.add_cookies([{"name": "_token", "value": self.token, "url": self.dep.base}])
        ctx.add_init_script(f"try{{localStorage.setItem('theme','{theme}')}}catch(e){{}}")
        ctx.set_default_timeout(300_000)
        page = ctx.new_page()
        page.goto(f"{self.dep.base}/{url}")
        page.wait_for_selector("[data-testid=commit-status], [data-testid=no-stage]")
        return page

    def shoot(self, dag: str, run: str, name: str) -> None:
        for theme in ("light", "dark"):
            page = self.page(theme, f"dags/{dag}/runs/{run}/plugin/commit-status")
            page.screenshot(path=str(OUT / f"{name}-{theme}.png"))
            page.context.close()

    def run(self, dag: str, run: str, **conf) -> str:
        self.dep.wait_dag(dag)
        self.dep.api("POST", f"/dags/{dag}/dagRuns", json={"dag_run_id": run, "logical_date": None, "conf": conf})
        return self.dep.wait_run(dag, run, timeout=900)

    def cli(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run([str(Path(sys.executable).with_name("airflow-commit")), *args], capture_output=True,
                              text=True, env=env or self.dep.env, timeout=300)
        print(f"$ airflow-commit {shlex.join(args)} -> {done.returncode}\n{done.stdout}{done.stderr[-600:]}")
        return done

    # ---------------------------------------------------------------- 1. the live sharded view
    def sharded(self) -> None:
        dag, run = "trial_shards", "live"
        target = ROOT / f"{dag}-{run}"
        for t in (7, 53, 104, 211, 299, 300, 301, 455, 456, 612, 777, 808, 901, 950, 999):
            (WORK / f"fail-{dag}-{t}-1").touch()
        for t in (505, 506):   # two tries fail, the third commits
            (WORK / f"fail-{dag}-{t}-1").touch()
            (WORK / f"fail-{dag}-{t}-2").touch()
        stop, polls, disk = threading.Event(), [], {}

        def scan() -> None:
            while not stop.is_set():
                for p in target.glob("_temporary/*/*/_commits/task_*.json"):
                    n = int(re.search(r"task_(\d+)", p.name).group(1))
                    if n not in disk:
                        try:
                            disk[n] = p.stat().st_mtime
                        except FileNotFoundError:
                            pass
                time.sleep(0.2)

        def poll() -> None:
            while not stop.is_set():
                t0 = time.time()
                try:
                    stages = self.view(f"dags/{dag}/runs/{run}")["stages"]
                    if stages:
                        polls.append((t0, time.time(), stages[0], self.rows(dag, run)))
                except AssertionError:
                    pass
                time.sleep(max(0.0, 1 - (time.time() - t0)))

        self.dep.wait_dag(dag)
        self.dep.api("POST", f"/dags/{dag}/dagRuns", json={"dag_run_id": run, "logical_date": None,
                                                          "conf": {"target": str(target), "delay": 0.3}})
        threads = [threading.Thread(target=f, daemon=True) for f in (scan, poll)]
        for th in threads:
            th.start()
        pages = {theme: self.page(theme, f"dags/{dag}/runs/{run}/plugin/commit-status") for theme in ("light", "dark")}
        dom: dict[str, list] = {"light": [], "dark": []}
        shot = set()
        while self.dep.run_state(dag, run) not in ("success", "failed"):
            for theme, page in pages.items():
                seen = {**page.evaluate(READ), "t": time.time()}
                dom[theme].append(seen)
                committed = seen["counts"].get("committed", 0)
                if theme not in shot and committed >= 300 and (seen["counts"].get("retrying") or committed >= 700):
                    page.screenshot(path=str(OUT / f"trial-sharded-live-{theme}.png"))
                    shot.add(theme)
            time.sleep(1)
        for page in pages.values():
            page.wait_for_function("document.querySelector('[data-testid=commit-status]').dataset.live === '0'")
            page.context.close()
        stop.set()
        for th in threads:
            th.join()
        check(self.dep.run_state(dag, run) == "success" and self.stage(dag, run)["state"] == "committed",
              "1,000 shards with retries committed")
        check(shot == {"light", "dark"}, "screenshots of the live view with retrying shards, light and dark")
        self.judge(polls, disk, dom)

    def judge(self, polls: list, disk: dict[int, float], dom: dict[str, list]) -> None:
        final = polls[-1][3]
        alarms = [(n, r["status"], r["why"]) for _, _, s, rows in polls for n, r in rows.items()
                  if (r["status"] in ("failed", "unfinished") and (final[n]["committed_attempt"] or "").startswith(
                      f"{s['app_attempt']}.")) or (final[n]["committed_attempt"] in r["denied_attempts"])]
        check(not alarms, f"no healthy task shown failed, unfinished or denied ({len(polls)} API polls): {alarms[:3]}")
        done = [s["tasks_done"] for _, _, s, _ in polls]
        check(done == sorted(done), "the API's count of committed tasks never went back")
        lags = sorted(next((t1 for _, t1, _, rows in polls if rows.get(n, {}).get("status") == "committed"), t) - t
                      for n, t in disk.items())
        figures = {"shards": len(disk), "api_polls": len(polls), "api_lag_s_median": round(lags[len(lags) // 2], 2),
                   "api_lag_s_max": round(lags[-1], 2),
                   "statuses_seen": sorted({r["status"] for _, _, _, rows in polls for r in rows.values()})}
        times = sorted(disk.values())
        for theme, reads in dom.items():
            bar = [(r["t"], int(m.group(1).replace(",", ""))) for r in reads
                   if (m := re.search(r"([\d,]+) of", r.get("progress") or ""))]
            check([v for _, v in bar] == sorted(v for _, v in bar), f"the {theme} page's bar never went back")
            check(not any(r["counts"].get("failed") for r in reads), f"the {theme} page never counted a task failed")
            lag = sorted(next((t for t, v in bar if v >= k and t >= at), at) - at for k, at in enumerate(times, 1))
            figures.update({f"page_reads_{theme}": len(reads), f"page_bar_values_{theme}": len({v for _, v in bar}),
                            f"page_lag_s_median_{theme}": round(lag[len(lag) // 2], 2),
                            f"page_lag_s_max_{theme}": round(lag[-1], 2)})
        self.figures["sharded"] = figures

    # ---------------------------------------------------------------- 2. advice, followed
    def deterministic(self, dag: str, shots: bool) -> None:
        first, second, third = f"{dag}-1", f"{dag}-2", f"{dag}-3"
        target = str(ROOT / dag)
        (WORK / f"fixed-{dag}").unlink(missing_ok=True)
        check(self.run(dag, first, target=target) == "failed", f"{dag}: the schema mismatch fails the run")
        s = self.stage(dag, first)
        statuses = {r["status"] for r in self.rows(dag, first).values()}
        check(s["action"] == "new_job" and "cannot help" in s["next_steps"][0], f"{dag}: advice is a fix, not a clear")
        check(statuses == {"refused"} and not (s["aborted"] or {}).get("kept_tasks"),
              f"{dag}: the refused tasks are shown refused, not kept: {statuses}")
        if shots:
            self.shoot(dag, first, "trial-deterministic-failure")
        (WORK / f"fixed-{dag}").touch()   # followed: the code fixed, the whole run cleared
        self.dep.clear(dag, first, only_failed=False)
        check(self.dep.wait_run(dag, first) == "success" and self.stage(dag, first)["state"] == "committed",
              f"{dag}: fixed and cleared, the run commits")
        (WORK / f"fixed-{dag}").unlink()
        check(self.run(dag, second, target=target) == "failed", f"{dag}: the bug again fails a new run")
        command = re.search(r"`([^`]+)`", " ".join(self.stage(dag, second)["next_steps"])).group(1)
        check(self.cli(*shlex.split(command)[1:]).returncode == 0, f"{dag}: the printed abort line works")
        s = self.stage(dag, second)
        check(s["state"] == "purged" and s["action"] == "clear_run", f"{dag}: the purged job says so: {s['state']}")
        (WORK / f"fixed-{dag}").touch()
        check(self.run(dag, third, target=target) == "success", f"{dag}: after the abort, a new run commits")

    def refused(self, shots: bool) -> None:
        dag, target = "trial_refused", ROOT / "trial_refused"
        target.mkdir(parents=True, exist_ok=True)
        (target / "someone-else.csv").write_text("x\n")
        check(self.run(dag, "r1", target=str(target)) == "failed", "a non-empty target refuses the setup")
        s = self.stage(dag, "r1")
        check((s["state"], s["action"], s["tasks_total"]) == ("refused", "fix_setup", 0) and "someone-else.csv" in
              (s["error"] or ""), f"the refused setup shows its error and the fix: {s['state']}, {s['error']}")
        if shots:
            self.shoot(dag, "r1", "trial-refused-setup")
        (target / "someone-else.csv").unlink()   # followed: the cause removed, the run cleared
        self.dep.clear(dag, "r1", only_failed=False)
        check(self.dep.wait_run(dag, "r1") == "success", "the refused setup, fixed and cleared, commits")

    def clear_failed_live(self) -> None:
        dag, run = "trial_schema", "clearfailed"
        (WORK / f"failall-{dag}-2").touch()
        (WORK / f"hold-{dag}-{run}-3").touch()
        self.dep.wait_dag(dag)
        self.dep.api("POST", f"/dags/{dag}/dagRuns", json={"dag_run_id": run, "logical_date": None,
                                                          "conf": {"target": str(ROOT / run)}})
        self.dep.wait_ti(dag, run, "stage.write[2]", "failed")
        check(self.stage(dag, run)["action"] == "clear_failed_tasks", "a task failed for good: clear only failed")
        (WORK / f"failall-{dag}-2").unlink()
        self.dep.clear(dag, run, only_failed=True)
        self.dep.wait_ti(dag, run, "stage.write[2]", "success")
        (WORK / f"hold-{dag}-{run}-3").unlink()
        check(self.dep.wait_run(dag, run) == "success", "followed, the run commits")

    def keyed(self) -> None:
        dag, target = "trial_keyed", str(ROOT / "trial_keyed")
        check(self.run(dag, "k1", target=target) == "success", "job_key: the first run commits")
        for n in (1, 2, 3):
            (WORK / f"fail-{dag}-2-{n}").touch()
        check(self.run(dag, "k2", target=target) == "failed", "job_key: the second run fails")
        steps = self.stage(dag, "k1")["next_steps"][0]
        check("Until that one commits, the target holds this run's rows" in steps, f"k1 while k2 failed: {steps}")
        for n in (1, 2, 3):
            (WORK / f"fail-{dag}-2-{n}").unlink()
        self.dep.clear(dag, "k2", only_failed=False)
        check(self.dep.wait_run(dag, "k2") == "success", "job_key: the second run, cleared, commits")
        check("the target holds that run's rows now" in self.stage(dag, "k1")["next_steps"][0], "k1 replaced")

    # ---------------------------------------------------------------- 3. the command line
    def cli_beside_live(self) -> None:
        dag, target = "trial_schema", ROOT / "trial_gc"
        (WORK / f"failall-{dag}-1").touch()
        check(self.run(dag, "g0", target=str(target)) == "failed", "gc: a failed job beside")
        (WORK / f"failall-{dag}-1").unlink()
        (WORK / f"hold-{dag}-g1-3").touch()
        self.dep.wait_dag(dag)
        self.dep.api("POST", f"/dags/{dag}/dagRuns", json={"dag_run_id": "g1", "logical_date": None,
                                                          "conf": {"target": str(target)}})
        self.dep.wait_for(lambda: (WORK / f"holding-{dag}-g1-3").exists(), "g1 holds")
        self.dep.wait_for(lambda: self.stage(dag, "g1")["tasks_done"] == 3, "g1's other tasks committed")
        live = sorted(str(p) for p in (target / "_temporary").glob("*g1*/**/*"))
        applied = self.cli("gc", str(target), "--apply")
        check(applied.returncode == 0 and "g0" in applied.stdout and "g1" not in applied.stdout, "gc collects g0")
        check(sorted(str(p) for p in (target / "_temporary").glob("*g1*/**/*")) == live, "gc never touched g1")
        job = next(p.name for p in (target / "_temporary").iterdir() if "g1" in p.name)
        refused = self.cli("abort", str(target), "--job", job, "--purge")
        check(refused.returncode == 2 and "Airflow says is running" in refused.stderr, "abort of a live job refused")
        (WORK / f"hold-{dag}-g1-3").unlink()
        check(self.dep.wait_run(dag, "g1") == "success", "the live run, left alone, commits")
        check(self.cli("verify", str(target)).returncode == 0, "verify: its _SUCCESS tells the truth")

    def s3(self) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.moto, aws_access_key_id="testing",
                     aws_secret_access_key="testing-secret-do-not-log", region_name="us-east-1").create_bucket(
            Bucket="lake")
        dag, target = "trial_s3", "s3://lake/events"
        env = {k: v for k, v in self.dep.env.items() if not k.startswith("AWS_")}   # the connection alone
        (WORK / f"failall-{dag}-2").touch()
        check(self.run(dag, "a", target=target) == "failed", "S3: a magic job fails")
        (WORK / f"failall-{dag}-2").unlink()
        shown = self.cli("inspect", target, "--conn-id", "trial_s3", env=env)
        line = re.search(r"`(airflow-commit gc [^`]+)`", shown.stdout)
        check(bool(line) and "--conn-id trial_s3" in line.group(1), "S3: inspect prints a gc line with the conn")
        check(self.cli(*shlex.split(line.group(1))[1:], env=env).returncode == 0 if line else False,
              "S3: the printed gc line works")
        check(self.cli("inspect", target, env=env).returncode == 2, "S3: without --conn-id, a refusal, not a trace")
        check(self.run(dag, "b", target=target) == "success", "S3: the next run commits")
        check(self.cli("verify", target, "--conn-id", "trial_s3", env=env).returncode == 0, "S3: verify")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shots", type=Path, help="copy the screenshots (light and dark) here, e.g. docs/ui")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    dags = HOME.parent / "view-trial-dags"
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).with_name("trial_dags.py"), dags / "trial_dags.py")
    env: dict[str, str] = {}
    moto, url = start_moto(env)
    conn = json.dumps({"conn_type": "aws", "login": "testing", "password": "testing-secret-do-not-log",
                       "extra": {"endpoint_url": url, "region_name": "us-east-1"}})
    dep = make_deployment(dags, AIRFLOW_CONN_TRIAL_S3=conn, **env)
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        dep.start()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-quic"])
            trial = Trial(dep, browser, url)
            trial.sharded()
            trial.deterministic("trial_schema", shots=True)
            trial.deterministic("trial_delta", shots=False)
            trial.refused(shots=True)
            trial.clear_failed_live()
            trial.keyed()
            trial.cli_beside_live()
            trial.s3()
            browser.close()
    finally:
        dep.stop()
        moto.terminate()
    if args.shots:
        args.shots.mkdir(parents=True, exist_ok=True)
        for png in OUT.glob("trial-*.png"):
            shutil.copy(png, args.shots / png.name)
    print(json.dumps({**trial.figures, "failed_checks": FAILED}, indent=1))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
