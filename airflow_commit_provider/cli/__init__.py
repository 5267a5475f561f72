"""``airflow-commit``: a target's jobs, markers and leftovers for the person on call, without Python.

Hadoop ships a manifest printer and S3A a ``committer`` command; this is the same for a stage's output root::

    airflow-commit inspect s3://bucket/events --conn-id aws_default    # jobs, generations, tasks, markers, uploads
    airflow-commit verify /data/events                                  # every _SUCCESS against the listing
    airflow-commit abort /data/events --job <job id> [--purge]          # the teardown's abort, or a full purge
                                                                        # (refused while Airflow says its run is live)
    airflow-commit gc /data/events [--apply]                            # failed and finished jobs' leftovers

The store comes from the same hook as the operators' (:class:`~..hooks.storage.CommitStorageHook`), so
``--conn-id`` names the same Airflow connection a stage uses and no credential is ever typed or printed. What it
reads and does is the protocol's (:mod:`..protocol.target`): nothing here deletes a path by name.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..operators.hints import cli_command
from ..protocol import CommitProtocolError, Store
from ..protocol import target as targets
from .live import live_run_refusal

#: exit codes: 0 done (``verify``: every marker valid), 1 ``verify`` found no marker or a false one, 2 refused
OK, FOUND_PROBLEM, REFUSED = 0, 1, 2


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="airflow-commit", description="A commit target's jobs, markers and leftovers: "
                                  "inspect, verify, abort one job, collect what failed and finished jobs left.")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("target", help="the stage's output root: a local path or a URL (s3://bucket/prefix)")
        p.add_argument("--conn-id", help="the Airflow connection of a remote target (as the stage's conn_id)")
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        return p

    command("inspect", "the target's markers and every job: state, generation, tasks a clear would recover, "
                       "pending uploads, what gc would collect")
    command("verify", "check every _SUCCESS against the files it describes; exit 1 when one is false or none exists")
    abort = command("abort", "abort one job as its teardown does (committed tasks kept for a clear of the run), or "
                             "purge it with --purge (the target as it was before the job)")
    abort.add_argument("--job", required=True, help="the job id (`inspect` lists them)")
    abort.add_argument("--purge", action="store_true", help="remove the committed tasks too: a clear of the run "
                                                           "then recomputes them")
    abort.add_argument("--force", action="store_true", help="abort a running job although Airflow says its run is "
                       "live, or cannot be asked (refused otherwise: it would fail the run's live tasks)")
    gc = command("gc", "list (dry run, the default) or remove with --apply what failed and finished jobs left "
                       "under _temporary; running jobs are never touched")
    gc.add_argument("--apply", action="store_true", help="remove it (each job through the protocol's purge)")
    return top


def store_of(target: str, conn_id: str | None) -> Store:
    """The target's store through the operators' hook; a local path without a connection needs no Airflow."""
    if conn_id is None and ("://" not in target or target.startswith("file://")):
        from ..protocol import store_for

        return store_for(target.removeprefix("file://"))
    from ..hooks.storage import CommitStorageHook

    return CommitStorageHook(conn_id).get_store(target)


class Refused(Exception):
    """A command refused before it changed anything, with the way on."""


def command_line(args: argparse.Namespace, command: str, *options: str) -> str:
    """The ``airflow-commit`` line for *command* on this target, with this connection (as given: a printed line
    is followed as printed)."""
    return cli_command(command, args.target, args.conn_id, *options)


def run(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    """(exit code, the JSON document, the text lines) of one command."""
    store = store_of(args.target, args.conn_id)
    if args.command == "inspect":
        found = targets.inspect(store)
        return OK, found, targets.summary_lines(found, command_line(args, "gc", "--apply"))
    if args.command == "verify":
        result = targets.verify(store)
        lines = [f"{m['path']}: {'valid' if m['valid'] else 'INVALID: ' + str(m['problem'])}"
                 for m in result["markers"]]
        if not result["markers"]:
            lines.append(f"no _SUCCESS under {result['output']}: {result['no_marker']}")
        return (OK if result["ok"] else FOUND_PROBLEM), result, lines
    if args.command == "abort":
        if args.job not in targets.job_ids(store):
            raise Refused(f"{store.url()} has no job {args.job!r}; {command_line(args, 'inspect')} lists its jobs")
        if not args.force:
            found = targets.describe_job(store, args.job)
            refusal = live_run_refusal(found, command_line(args, "abort", "--job", args.job,
                                                           *(["--purge"] if args.purge else []), "--force"))
            if refusal:
                raise Refused(refusal)
        result = targets.abort(store, args.job, purge=args.purge)
        kept = result.get("kept_committed_tasks") or []
        how = "purged" if result.get("purged") else (
            f"aborted ({len(kept)} committed task(s) kept for a clear of the run: {', '.join(map(str, kept[:20]))}"
            f"{' ...' if len(kept) > 20 else ''})" if kept else
            "aborted (no committed task kept: a clear of the run runs every task again)")
        verdict = how if result.get("aborted") else f"left alone: the job is {result.get('state')}"
        return OK, result, [f"job {args.job}: {verdict}"]
    plan = targets.collect(store, apply=args.apply)
    lines = [f"{'removed' if args.apply else 'would remove'}: job {p['job_id']} ({p['state']}): {p['action']}"
             for p in plan] or ["nothing to collect"]
    if plan and not args.apply:
        lines.append("dry run: add --apply to remove it")
    return OK, plan, lines


def remote_hint(args: argparse.Namespace) -> str:
    """For a remote target read without a connection: where its endpoint and credentials come from."""
    if args.conn_id or "://" not in args.target or args.target.startswith("file://"):
        return ""
    return (f". Without --conn-id the store's client uses this machine's environment alone; give the stage's "
            f"connection: {command_line(args, args.command)} --conn-id <conn_id>")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Standard output carries the answer alone (``--json | jq`` works): Airflow's and boto's log lines, which
    # Airflow's logging prints to standard output, go to standard error with the rest of the diagnostics.
    sys.stdout.flush()
    # the Azure SDK logs each request and response at INFO (hundreds of lines for one inspect): the one line
    # that says what happened would drown in them
    logging.getLogger("azure").setLevel(logging.WARNING)
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        code, doc, lines = run(args)
    except (Refused, CommitProtocolError, ValueError, OSError) as exc:
        print(f"airflow-commit {args.command}: {exc}", file=sys.stderr)
        return REFUSED
    except Exception as exc:   # a store that cannot be reached (botocore's errors are no OSError): said, not traced
        print(f"airflow-commit {args.command}: cannot read {args.target}: {type(exc).__name__}: {exc}"
              f"{remote_hint(args)}", file=sys.stderr)
        return REFUSED
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    print(json.dumps(doc, indent=2, default=str) if args.json else "\n".join(lines))
    return code


__all__ = ["main", "parser"]
