"""Write, audit, publish: checks (and an approval) between the last task commit and the job commit.

::

    from airflow_commit_provider.protocol.audit import Approval, Audit, AuditFailed, checks

    audit = Audit(checks=[checks.Rows(min=1), checks.NotNull("id"), checks.Between("amount", 0, 10_000)],
                  data=lambda dataset: dataset.count_rows() > 0,       # algorithm 1 and tables only
                  approval=Approval(timeout=timedelta(hours=4)))      # Airflow's human-in-the-loop operators

The specification (:mod:`.spec`) and the checks (:mod:`.checks`) are imported here; running an audit
(:mod:`.run`: ``run_audit``, the job commit's ``AuditGate``) and reading the staged data (:mod:`.dataset`) are
imported from their modules, so that the writer, which records the statistics (:mod:`.stats`), imports no job
commit code.
"""

from ..errors import AuditFailed
from . import checks
from .spec import Approval, Audit, as_audit

__all__ = ["Approval", "Audit", "AuditFailed", "as_audit", "checks"]
