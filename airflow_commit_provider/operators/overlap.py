"""The DAG run as the owner of its application attempts (:mod:`~airflow_commit_provider.protocol.owners`).

Every committer a stage's task builds works for its DAG run: the setup records the run in the application
attempt it claims, and the run's writes, commit and teardown work only in an attempt their run owns. A setup that
finds the job's current attempt owned by another run asks the Task SDK whether that run has ended
(``RuntimeTaskInstance.get_dagrun_state``, Airflow 3.1+): a run that succeeded or failed is taken over, one that is
queued or running refuses this setup.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..protocol.config import RunOwner
from ..protocol.owners import RunFinished

log = logging.getLogger(__name__)

#: DAG run states after which a run does nothing more without a clear (a clear makes it queued again)
ENDED_RUN_STATES = frozenset({"success", "failed"})


def run_owner(context: Mapping[str, Any]) -> RunOwner:
    """The DAG run a task of *context* works for, with the clear of it that runs now."""
    clear = getattr(context.get("dag_run"), "clear_number", None)
    return RunOwner(context["dag"].dag_id, context["run_id"], clear if isinstance(clear, int) else 0)


def run_finished(context: Mapping[str, Any]) -> RunFinished:
    """Whether another DAG run has ended, asked of the Task SDK through the task instance of *context*; ``None``
    when it cannot say (no such call before Airflow 3.1, the run deleted, the API unreachable): then only the
    job's own records (that run's teardown) can show the run ended."""
    ti = context["ti"]

    def finished(other: RunOwner) -> bool | None:
        try:
            state = ti.get_dagrun_state(other.dag_id, other.run_id)
        except Exception as exc:
            log.info("state of %s not readable (%s): the job's records decide", other.describe(), exc)
            return None
        state = str(getattr(state, "value", state))
        log.info("%s, which owns the job's current application attempt, is %s", other.describe(), state)
        return state in ENDED_RUN_STATES

    return finished


__all__ = ["ENDED_RUN_STATES", "run_finished", "run_owner"]
