"""How long a store keeps a job's staged data: what bounds an approval's wait.

The magic committer stages every file as a pending S3 multipart upload. Buckets commonly carry a lifecycle rule
``AbortIncompleteMultipartUpload`` (1 to 7 days after an upload started): S3 then aborts the uploads itself, and a
job commit after that finds them gone (``NoSuchUpload``: the job cannot commit, its data is lost). A stage that
waits for a person's approval must not wait that long. :func:`staged_data_expiry` reads the bucket's lifecycle
configuration (``GetBucketLifecycleConfiguration``) and returns the shortest such rule that applies to the
target's prefix; algorithm 1 and 2 stage plain objects or files, which nothing expires. On Azure the magic
committer stages blocks, which Azure itself discards a week after the blob's last Put Block, whatever the
account's settings (:attr:`~..stores.base.Store.staged_lifetime`).

S3 counts the days from the upload's start and rounds to the next midnight UTC; every upload of a generation
starts after its setup, so ``job created + days`` (:func:`expires_at`) is a moment before which none is aborted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..job import Job
from ..records.job import JobRecord


@dataclass(frozen=True)
class StagedExpiry:
    """The store drops staged data *after* this long (``None``: it could not be read, *reason* says why)."""

    after: timedelta | None
    reason: str


def _applies(rule: dict[str, Any], prefix: str) -> bool:
    """Whether a lifecycle rule covers keys under *prefix* (rules filtered by tags never cover a multipart upload:
    S3 refuses ``AbortIncompleteMultipartUpload`` with a tag filter)."""
    if rule.get("Status") != "Enabled" or "AbortIncompleteMultipartUpload" not in rule:
        return False
    filt = rule.get("Filter")
    if filt is None:
        rule_prefix = rule.get("Prefix", "")
    elif "Prefix" in filt:
        rule_prefix = filt["Prefix"]
    elif "And" in filt:
        if filt["And"].get("Tags"):
            return False
        rule_prefix = filt["And"].get("Prefix", "")
    elif "Tag" in filt or "ObjectSizeGreaterThan" in filt or "ObjectSizeLessThan" in filt:
        return False
    else:
        rule_prefix = ""
    return prefix.startswith(rule_prefix) or rule_prefix.startswith(prefix)


def staged_data_expiry(scope: Job) -> StagedExpiry | None:
    """The shortest time after which the store drops the job's staged data, or ``None`` when it never does (no
    committer that stages pending uploads, or no lifecycle rule that aborts them under the target)."""
    if not scope.publisher.has_uploads:
        return None
    store: Any = scope.store
    if store.staged_lifetime is not None:
        return StagedExpiry(store.staged_lifetime, f"{store.url()} discards staged parts {store.staged_lifetime} "
                                                   "after they were written (Azure: uncommitted blocks, a week)")
    bucket = store.bucket
    prefix = f"{store.prefix.rstrip('/')}/" if store.prefix else ""
    try:
        config = store.fs.call_s3("get_bucket_lifecycle_configuration", Bucket=bucket)
    except Exception as exc:   # s3fs turns botocore's error into an OSError (FileNotFoundError here), its cause
        code = getattr(exc.__cause__, "response", {}).get("Error", {}).get("Code")
        if code == "NoSuchLifecycleConfiguration" or (code is None and isinstance(exc, FileNotFoundError)):
            return None
        return StagedExpiry(None, f"the lifecycle configuration of bucket {bucket} could not be read "
                                  f"({type(exc).__name__}: {exc})")
    rules = [r for r in config.get("Rules", []) if _applies(r, prefix)]
    if not rules:
        return None
    rule = min(rules, key=lambda r: r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"])
    days = int(rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"])
    return StagedExpiry(timedelta(days=days), f"bucket {bucket} has lifecycle rule {rule.get('ID', '(no id)')!r}: "
                                              f"AbortIncompleteMultipartUpload after {days} day(s)")


def expires_at(job: JobRecord, expiry: StagedExpiry) -> datetime | None:
    """The moment before which the store drops none of the generation's staged data (``None``: unknown)."""
    if expiry.after is None:
        return None
    return datetime.fromisoformat(job.created) + expiry.after


__all__ = ["StagedExpiry", "expires_at", "staged_data_expiry"]


@dataclass(frozen=True)
class ExpiryRisk:
    """An approval whose wait the store's expiry of staged data could outlive: *message* says why and what to do;
    *certain*: a lifecycle rule says so (the setup refuses, unless told to warn), not only an unreadable
    configuration (a warning)."""

    message: str
    certain: bool


def approval_risk(scope: Job, timeout: timedelta | None) -> ExpiryRisk | None:
    """What the setup of a stage whose approval may wait *timeout* (``None``: without limit) must know before
    anything is written: ``None`` when the staged data outlives any such wait."""
    expiry = staged_data_expiry(scope)
    if expiry is None:
        return None
    if expiry.after is None:
        return ExpiryRisk(f"approval of job {scope.job_id}: {expiry.reason}; an approval that waits longer than the "
                          "bucket keeps pending uploads loses the job's data", certain=False)
    if timeout is not None and timeout < expiry.after:
        return None
    waits = "without a timeout" if timeout is None else f"up to {timeout}"
    return ExpiryRisk(
        f"the approval may wait {waits}, but {expiry.reason}: the store would drop the staged data before the job "
        f"commit publishes it, and the job's data would be lost. Give Approval(timeout=...) shorter than "
        f"{expiry.after} (the wait alone; the writes come before it), raise the rule's DaysAfterInitiation (S3), or use "
        "algorithm=1 (staged objects do not expire); or Approval(on_expiry_risk='warn') to accept that the approval "
        "then times out (a failed audit) before the uploads would expire", certain=True)


def approval_wait(scope: Job, timeout: timedelta | None, now: datetime) -> tuple[timedelta | None, datetime | None]:
    """How long an approval asked at *now* may wait (its *timeout*, cut short to the moment the store may drop
    the generation's staged data) and that moment (``None``: never). :class:`~..errors.AuditFailed` when it may
    have passed already: there is nothing left to approve."""
    from ..errors import AuditFailed

    expiry = staged_data_expiry(scope)
    expires = None if expiry is None else expires_at(scope.require_job(), expiry)
    if expires is None:
        return timeout, None
    left = expires - now
    if left <= timedelta(0):
        raise AuditFailed(f"job {scope.job_id}: the store may have dropped the staged data already "
                          f"({expiry.reason if expiry else ''}): nothing to approve")
    return (left if timeout is None or left < timeout else timeout), expires


def staging_expired(scope: Job, job: JobRecord, now: datetime | None = None) -> bool:
    """Whether the store may have dropped generation *job*'s staged data by now (a lifetime the store fixes:
    Azure's week). Counted from the generation's creation, before any part was staged, so it errs early, never
    late: the generation can then commit nothing it staged, and its committed tasks are not worth keeping."""
    lifetime = scope.store.staged_lifetime
    if not scope.publisher.has_uploads or lifetime is None:
        return False
    expires = expires_at(job, StagedExpiry(lifetime, ""))
    return expires is not None and (now or datetime.now(expires.tzinfo)) >= expires


def refuse_expired_staging(scope: Job, job: JobRecord, now: datetime | None = None) -> None:
    """:class:`~..errors.StagedDataExpired` when :func:`staging_expired`, for the job commit before its plan: a
    commit that found some parts gone would have published the others."""
    from ..errors import StagedDataExpired

    if staging_expired(scope, job, now):
        raise StagedDataExpired(
            f"job {scope.job_id}: generation {job.job_uuid} was set up at {job.created}, and {scope.store.url()} "
            f"discards staged parts {scope.store.staged_lifetime} after they were written: some of the job's may "
            "be gone, so nothing was published. Abort the job (its teardown purges a generation this old: the "
            "committed tasks are not kept) and run it again; a clear of the Airflow run after its teardown does "
            "both. A job that may stay open that long needs algorithm=1 there (staged files do not expire)")


__all__ += ["ExpiryRisk", "approval_risk", "approval_wait", "refuse_expired_staging", "staging_expired"]
