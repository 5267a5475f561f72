"""Operators for one write stage: setup, write (one task attempt per Airflow try), commit, abort.

How Airflow maps onto Hadoop's model (see the README for the full table):

- job: one write stage (``job_name``) of one DAG run into one target; its id is derived from dag id, job key
  (default: the run id) and job name, so it is the same for every try and every clear of that run, and, with
  ``job_key="{{ data_interval_start }}"``, for every run of one data interval;
- application attempt: one run of the setup task. The first run is attempt 0; a setup retry or a clear of the DAG
  run (which re-runs setup) is the next one. "Clear only failed tasks" re-runs neither setup nor teardown, so the
  retried writes and commit continue in the same application attempt: the protocol reads the current attempt
  from storage, never from XCom (XComs are wiped at every try);
- task: one mapped write task instance (task number = ``map_index``; 0 when unmapped); with
  ``shards_per_task=N``, N tasks per task instance: shard ``s`` of map index ``i`` is task ``i * N + s``
  (``shards.py``), unless ``shard_commit="together"`` makes the task instance one task whose shards commit in one
  record;
- task attempt: one Airflow try (attempt number = ``ti.try_number``, unique per try, so a zombie try and its
  successor never share a work directory); every shard of a try has that attempt number.

The job-level tasks live here (setup, commit, abort); the write task in ``write.py``, their base in ``base.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol import FileOutputCommitter, InvalidOutputSpec, OverlappingRun
from .base import CommitBaseOperator
from .failures import AirflowFailException, fail_fast_on_deterministic_errors
from .hints import leftover_hint, purge_command
from .lineage import CommitLineageMixin
from .overlap import run_finished
from .setup_context import REFUSED_KEY, SetupContext
from .summary import CommitSummary


class CommitSetupOperator(CommitBaseOperator):
    """Job setup: allocates the next application attempt, writes the job record, makes sure the target exists.

    Idempotent and never touches committed work. Returns the stage's :class:`~.setup_context.SetupContext` (job id,
    uuid, generation, application attempt, state; target, algorithm, mode ...) as its XCom value.

    With *audit* (the stage's :class:`~..protocol.audit.Audit`) whose approval may wait longer than the store keeps
    the staged data (S3 magic: a bucket lifecycle rule aborting incomplete uploads), the setup refuses before
    anything is written (or warns: ``Approval(on_expiry_risk="warn")``).
    """

    ui_color = "#d6eaf8"

    def __init__(self, *, audit: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.audit = self._stage_audit(audit)

    def _check_approval_expiry(self, committer: FileOutputCommitter) -> None:
        from ..protocol.audit.expiry import approval_risk

        risk = approval_risk(committer.job, self.audit.approval.timeout)
        if risk is None:
            return
        if risk.certain and self.audit.approval.on_expiry_risk == "refuse":
            raise InvalidOutputSpec(risk.message)
        self.log.warning("%s", risk.message)

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        try:
            with fail_fast_on_deterministic_errors():
                return self._setup(context)
        except AirflowFailException as exc:   # refused for good: the Commit status view shows why
            cause = exc.__cause__ or exc
            context["ti"].xcom_push(key=REFUSED_KEY, value={"error": type(cause).__name__, "message": str(cause)})
            raise

    def _setup(self, context: Mapping[str, Any]) -> dict[str, Any]:
        committer = self.committer(context)
        # before setup_job, which would open a new application attempt (fencing the older one's tries) first
        self._check_shards(committer, before_setup=True)
        if self.audit is not None and self.audit.approval is not None:
            self._check_approval_expiry(committer)
        try:
            job = committer.setup_job(run_finished=run_finished(context))
        except OverlappingRun as exc:
            # that run has not ended in Airflow's eyes, so the command needs --force (cli/live.py); marking the run
            # failed in Airflow instead lets its teardown abort the job
            raise OverlappingRun(f"{exc} The command (that run is live in Airflow's eyes: only once its workers are "
                                 f"gone for good): {purge_command(committer, self.conn_id, force=True)}",
                                 exc.owner, exc.app_attempt) from exc
        setup = SetupContext.from_job(job, job_name=self._job_name(), target=committer.store.url(),
                                      conn_id=self.conn_id, algorithm=committer.algorithm_name,
                                      algorithm_value=self.algorithm, mode=committer.mode,
                                      partition_by=self.partition_by, shards_per_task=self.tasks_per_instance,
                                      clear_number=getattr(context.get("dag_run"), "clear_number", None),
                                      setup_try=context["ti"].try_number)
        self.log.info("job %s: generation %s, application attempt %s (%s) at %s", job.job_id, job.generation,
                      job.app_attempt, job.state, setup.target)
        return setup.to_xcom()


class CommitJobOperator(CommitLineageMixin, CommitBaseOperator):
    """Job commit: idempotent and resumable; returns the commit summary, a
    :class:`~.summary.CommitSummary` as its XCom dict (rows, files, bytes, partitions, recovered tasks, timings).

    The expected tasks are *expected_tasks* when given, otherwise the number of task instances of *write_task_id*
    in this DAG run (a mapped write expanded to zero tasks commits an empty output), times ``shards_per_task``
    (unless the shards commit together: ``shard_commit="together"``).

    The records the commit renamed into ``_temporary/_trash`` are deleted by the stage's teardown, which runs next;
    with *teardown_task_id* (``commit_stage`` sets it) a commit whose teardown already ran in this run ("clear only
    failed" re-runs neither setup nor teardown) deletes them itself.

    With *audit* (the stage's :class:`~..protocol.audit.Audit`) the commit publishes only after a passing audit of
    that specification for exactly the task commits it publishes (and its approval, if it asks for one): otherwise
    it fails with :class:`~..protocol.errors.AuditFailed` before anything is visible. The verdict goes into
    ``_SUCCESS`` (``audit``).
    """

    template_fields = (*CommitBaseOperator.template_fields, "expected_tasks")
    ui_color = "#fcf3cf"

    def __init__(self, *, write_task_id: str | None = None, expected_tasks: int | None = None,
                 teardown_task_id: str | None = None, audit: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.teardown_task_id = teardown_task_id
        #: the stage's :class:`~..protocol.audit.Audit`: the commit then requires its passing verdict
        self.audit = self._stage_audit(audit)
        if write_task_id is None and expected_tasks is None:
            raise InvalidOutputSpec("CommitJobOperator needs write_task_id or expected_tasks to know which tasks "
                                    "must have committed")
        self.write_task_id = write_task_id
        self.expected_tasks = expected_tasks

    def _expected(self, context: Mapping[str, Any]) -> int:
        return expected_task_count(self, context, self.write_task_id, self.expected_tasks)

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with fail_fast_on_deterministic_errors():
            return self._commit(context)

    def _commit(self, context: Mapping[str, Any]) -> dict[str, Any]:
        committer = self.committer(context)
        self._check_shards(committer)   # the expected count is in tasks of this N: the DAG may have changed since
        expected = self._expected(context)
        # the records' deletion is left to the teardown, which runs next anyway: downstream tasks do not wait for it
        manifest = committer.commit_job(expected, defer_cleanup=True, gate=self._audit_gate())
        if self._teardown_finished(context):
            removed = committer.remove_trash()
            self.log.info("the stage's teardown ran before this commit (a clear of failed tasks only): removed the "
                          "%d committed job record director%s it would have", removed, "y" if removed == 1 else "ies")
        summary = CommitSummary.from_manifest(manifest)
        self._committed = (manifest, summary, committer.store)   # what the OpenLineage facets report (lineage.py)
        self._commit_log = committer.commit_log
        self.log.info("job %s committed: %s files, %s rows, %s bytes in %s tasks (application attempt %s); "
                      "stages: %s", manifest["job_id"], *(manifest["totals"][k] for k in ("files", "rows", "bytes",
                                                                                         "tasks")),
                      manifest["app_attempt"], manifest["durations"])
        for warning in summary.warnings:
            self.log.warning(warning)
        for outlet in self.outlets or []:   # the asset events are emitted on success only: once data is committed
            context["outlet_events"][outlet].extra = summary.asset_extra()
        return summary.to_xcom()

    def _audit_gate(self) -> Any:
        """What the commit requires of the stage's audit (:class:`~..protocol.audit.run.AuditGate`): a passing
        verdict of this specification for exactly the tasks it publishes, approved if it asks for approval."""
        if self.audit is None:
            return None
        from ..protocol.audit.run import AuditGate

        return AuditGate(self.audit.digest(), approval=self.audit.approval is not None)

    def _teardown_finished(self, context: Mapping[str, Any]) -> bool:
        # unreadable: the teardown deletes them if it is to run, so leaving them is only a delay
        return self.task_state(context, self.teardown_task_id, "its cleanup is left to it") in FINISHED_STATES


#: task instance states after which a teardown will not run again in this run without a clear
FINISHED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


def expected_task_count(operator: CommitBaseOperator, context: Mapping[str, Any], write_task_id: str | None,
                        expected_tasks: int | None) -> int:
    """The protocol tasks the stage expects (its commit and its audit count them alike): *expected_tasks* when
    given, else the run's write task instances, times the protocol tasks of each (``shards_per_task``, or one when
    its shards commit together)."""
    if expected_tasks is not None:
        return int(expected_tasks) * operator.tasks_per_instance
    states = context["ti"].get_task_states(dag_id=context["dag"].dag_id, task_ids=[write_task_id],
                                           run_ids=[context["run_id"]])
    return count_write_tasks(states.get(context["run_id"], {}), str(write_task_id)) * operator.tasks_per_instance


def count_write_tasks(states: Mapping[str, Any], task_id: str) -> int:
    """How many write task instances a run has, from ``get_task_states``: mapped ones are keyed
    ``<task_id>_<map_index>``; an unmapped or zero-length-mapped one is keyed ``<task_id>``."""
    mapped = [k for k in states if k.startswith(f"{task_id}_") and k[len(task_id) + 1:].isdigit()]
    if mapped:
        return len(mapped)
    state = states.get(task_id)
    return 0 if state in (None, "skipped", "removed") else 1


class CommitAbortOperator(CommitBaseOperator):
    """The stage's teardown: cleans up after a failed run, never after a committed one.

    A teardown runs whatever happened (its trigger rule cannot be changed), so it looks at the storage: if the job
    committed, or its commit has started (it can only be finished, not undone), it only deletes the records the
    commit renamed into ``_temporary/_trash`` (local disks; the commit task leaves that to it). Otherwise it
    removes every uncommitted attempt's files and **keeps committed tasks** (hidden under ``_temporary``), so that
    clearing the failed run recovers them instead of recomputing them. ``purge=True`` removes everything
    (Hadoop's abortJob): the target is left exactly as before the job. With algorithm v2, committed tasks' files
    were already visible and are always removed.

    With *commit_task_id* (``commit_stage`` sets it), a teardown whose run's commit task succeeded returns at once,
    from the task state alone: a successful commit task means the job committed, so there is nothing to undo; on
    object stores (no trash: their records are deleted by the commit, in batches) it then skips the storage
    client's start-up and its reads (on Celery about a second of the teardown's ~3 s).
    """

    ui_color = "#fadbd8"

    def __init__(self, *, purge: bool = False, commit_task_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.purge = purge
        self.commit_task_id = commit_task_id

    def _commit_task_succeeded(self, context: Mapping[str, Any]) -> bool:
        # unreadable: the storage is the authority, look there instead
        return self.task_state(context, self.commit_task_id, "checking the storage") == "success"

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with fail_fast_on_deterministic_errors():
            return self._abort(context)

    def _abort(self, context: Mapping[str, Any]) -> dict[str, Any]:
        if self._commit_task_succeeded(context):
            result = {"job_id": self.job_id(context), "state": "committed", "aborted": False,
                      "reason": f"{self.commit_task_id} succeeded in this run"}
            committer = self.committer(context)
            if committer.store.renames_directories:   # the commit left its records in _temporary/_trash
                result["trash_removed"] = committer.remove_trash()
            self.log.info("abort of job %s: nothing to do, %s", result["job_id"], result["reason"])
            return result
        committer = self.committer(context)
        result = committer.abort_job(keep_committed=not self.purge)
        self.log.info("abort of job %s: %s", result["job_id"], result)
        if result.get("aborted") and not self.purge:
            result["hint"] = leftover_hint(committer, self.conn_id, self.target, result["kept_committed_tasks"])
            self.log.warning("%s", result["hint"])
        return result
