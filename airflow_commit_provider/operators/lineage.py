"""OpenLineage output facets of the commit task: what a committed job published, as lineage tools read it.

Airflow's OpenLineage provider (``apache-airflow-providers-openlineage``, optional) calls these methods after
the task ran, in the task's process; nothing here is imported unless it does, so without the provider the
package imports nothing of OpenLineage. The output dataset follows the OpenLineage naming spec: a local target is
namespace ``file`` and its absolute path; an object store target ``s3://bucket`` (``gs://``, ...) and the key
prefix. Its facets: ``outputStatistics`` (rows, bytes and files this job published), ``schema`` (read from the
footer of one written Parquet file, plus the partition columns, which live in directory names), and
``lifecycleStateChange`` ``OVERWRITE`` for ``overwrite`` and ``dynamic`` mode. A failed commit reports no output:
nothing was published.

A generation that replaced an earlier generation of its own job (a clear after success; a second run of one
``job_key``) removed that generation's rows while it added its own, in every mode. ``outputStatistics`` counts
only what it wrote, so the output also carries ``commitProvider_replacedGeneration`` (:data:`REPLACED_FACET`): the
replaced generation's job uuid and number and what it had published (rows, bytes, files), so that a consumer
summing rows subtracts them. OpenLineage has no standard facet for "part of the dataset was replaced":
``OVERWRITE`` would say the whole target was, which in ``append`` mode is false (other jobs' rows stay).

A table stage's output is the table: a Delta table is named by its location (as a directory would be); an Iceberg
table by its catalog identifier (``ns.events``) in the namespace of the store holding its files, with a
``symlinks`` facet naming its location; both carry the ``version`` facet: the Delta version or the Iceberg snapshot
id the job's transaction made (the one a consumer should read).

An audited stage (``commit_stage(audit=...)``) adds the audit's verdict: ``dataQualityAssertions`` (each check,
passed or not) and ``dataQualityMetrics`` (rows, bytes, files, each column's nulls and numeric bounds) on the
commit's output, and on the audit task's input (the target, which the audit leaves unchanged; its failed
assertions when it failed).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

#: Object stores whose namespace is the bucket (OpenLineage naming spec), the name the key prefix.
_BUCKET_SCHEMES = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "wasbs")


#: The output dataset facet naming the generation a re-run replaced (a custom facet: the provider's prefix).
REPLACED_FACET = "commitProvider_replacedGeneration"
#: The facet's ``_schemaURL``: its JSON schema ships with the package, next to this module, under that file name.
#: A URN, not a machine's path: the same in every event, wherever the worker installed the package.
REPLACED_FACET_SCHEMA = "urn:airflow-commit-provider:schema:ReplacedGenerationDatasetFacet.json"


def dataset_name(url: str) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of an output root URL (a store's :meth:`url`) or local path."""
    if "://" not in url or url.startswith("file://"):
        return "file", "/" + url.removeprefix("file://").lstrip("/")
    parts = urlsplit(url)
    if parts.scheme in _BUCKET_SCHEMES:
        return f"{parts.scheme}://{parts.netloc}", parts.path.strip("/") or "/"
    return f"{parts.scheme}://{parts.netloc}", parts.path or "/"


class CommitLineageMixin:
    """``get_openlineage_facets_on_complete`` / ``_on_failure`` for :class:`~.commit.CommitJobOperator`, from
    what its ``execute`` committed (``self._committed``: the manifest, its summary and the target's store)."""

    _committed: tuple[dict[str, Any], Any, Any] | None = None
    #: reads the job's commit log (``FileOutputCommitter.commit_log``) of what ``execute`` committed
    _commit_log: Any = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow.providers.common.compat.openlineage.facet import (
            LifecycleStateChange,
            LifecycleStateChangeDatasetFacet,
            OutputDataset,
            OutputStatisticsOutputDatasetFacet,
        )
        from airflow.providers.openlineage.extractors import OperatorLineage

        if self._committed is None:
            return OperatorLineage()
        manifest, summary, store = self._committed
        namespace, name = dataset_name(summary.target)
        facets: dict[str, Any] = {}
        if summary.table is not None:
            namespace, name, facets = _table_dataset(summary.table, store.url())
        schema = self._schema_facet(manifest, store)
        if schema is not None:
            facets["schema"] = schema
        replaced = self._replaced_generation(summary)
        if replaced is not None:
            facets[REPLACED_FACET] = replaced
        if summary.mode in ("overwrite", "dynamic"):
            facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(
                lifecycleStateChange=LifecycleStateChange.OVERWRITE)
        facets.update(audit_facets(manifest.get("audit")))
        stats = OutputStatisticsOutputDatasetFacet(rowCount=summary.rows, size=summary.bytes,
                                                   fileCount=summary.files)
        return OperatorLineage(outputs=[OutputDataset(namespace=namespace, name=name, facets=facets,
                                                      outputFacets={"outputStatistics": stats})])

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """Nothing was published (a job commit either completes or is resumed by the retry): no output."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        return OperatorLineage()

    def _replaced_generation(self, summary: Any) -> Any:
        """The facet naming the generation this commit replaced, with what that generation had published (from the
        job's commit log, which keeps the summaries of earlier generations); ``None`` for a first generation."""
        if summary.replaced_generation is None:
            return None
        log = self._commit_log() if self._commit_log is not None else None
        earlier = next((g for g in (log.history if log is not None else ())
                        if g.get("job_uuid") == summary.replaced_generation), None)
        totals: Mapping[str, Any] = (earlier or {}).get("totals") or {}
        return replaced_generation_facet_class()(
            jobUuid=summary.replaced_generation, generation=(earlier or {}).get("generation"),
            rowCount=totals.get("rows"), size=totals.get("bytes"), fileCount=totals.get("files"))

    def _schema_facet(self, manifest: dict[str, Any], store: Any) -> Any:
        """The columns of the written Parquet files (one footer read) and the partition columns; ``None`` when
        the job wrote no Parquet file or the footer cannot be read (lineage never fails the task)."""
        from airflow.providers.common.compat.openlineage.facet import SchemaDatasetFacet, SchemaDatasetFacetFields

        parquet = [f["path"] for f in manifest["files"] if f["path"].endswith(".parquet")]
        if not parquet:
            return None
        try:
            schema = _read_parquet_schema(store, parquet[0])
        except Exception as exc:
            self.log.warning("OpenLineage: no schema facet, the footer of %s is unreadable: %s",  # type: ignore
                             parquet[0], exc)
            return None
        fields = [SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in schema]
        fields += [SchemaDatasetFacetFields(name=key, type="string", description="partition column (directory)")
                   for key in manifest.get("partition_by", []) if key not in schema.names]
        return SchemaDatasetFacet(fields=fields)


class MaintenanceLineageMixin:
    """``get_openlineage_facets_on_complete`` for the maintenance operators (compaction, deduplication): a job
    that rewrote files of its target reads and writes that one dataset, so the target is its input and its output.
    The output carries ``outputStatistics`` of the files it wrote (a compaction's merged files; none for a
    deduplication, which only deletes) and no ``lifecycleStateChange``: no committed row was added or removed.
    A run that changed nothing (a dry run, nothing to compact) reports the target as input only."""

    #: set by ``execute``: the target's URL, and the files and bytes written (``None``: nothing was changed)
    _maintained: tuple[str, dict[str, int] | None] | None = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow.providers.common.compat.openlineage.facet import (
            InputDataset,
            OutputDataset,
            OutputStatisticsOutputDatasetFacet,
        )
        from airflow.providers.openlineage.extractors import OperatorLineage

        if self._maintained is None:
            return OperatorLineage()
        url, written = self._maintained
        namespace, name = dataset_name(url)
        inputs = [InputDataset(namespace=namespace, name=name)]
        if written is None:
            return OperatorLineage(inputs=inputs)
        stats = OutputStatisticsOutputDatasetFacet(rowCount=written.get("rows"), size=written.get("bytes"),
                                                   fileCount=written.get("files", 0))
        return OperatorLineage(inputs=inputs, outputs=[OutputDataset(namespace=namespace, name=name,
                                                                     outputFacets={"outputStatistics": stats})])

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed maintenance run changed nothing visible (it is a job of the protocol): no output."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        return OperatorLineage()


def audit_facets(verdict: Mapping[str, Any] | None) -> dict[str, Any]:
    """The audit's verdict (``_SUCCESS``'s ``audit``, or an audit record) as OpenLineage data-quality facets of the
    output: ``dataQualityAssertions`` (each check, passed or not, with its column) and ``dataQualityMetrics`` (rows,
    bytes, files; nulls, and min/max of numeric columns). Empty for a stage without an audit."""
    if not verdict:
        return {}
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion,
        DataQualityAssertionsDatasetFacet,
    )
    from openlineage.client.generated.data_quality_metrics_dataset import ColumnMetrics, DataQualityMetricsDatasetFacet

    assertions = [Assertion(assertion=str(c.get("check")), success=bool(c.get("passed")), column=c.get("column"),
                            expected=None if c.get("expected") in (None, "") else str(c.get("expected")),
                            actual=None if c.get("observed") is None else str(c.get("observed")))
                  for c in verdict.get("checks") or []]
    summary = verdict.get("summary") or {}

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    columns = {name: ColumnMetrics(nullCount=c.get("nulls"), min=number(c.get("min")), max=number(c.get("max")))
               for name, c in (summary.get("columns") or {}).items()}
    return {"dataQualityAssertions": DataQualityAssertionsDatasetFacet(assertions=assertions),
            "dataQualityMetrics": DataQualityMetricsDatasetFacet(columnMetrics=columns, rowCount=summary.get("rows"),
                                                                 bytes=summary.get("bytes"),
                                                                 fileCount=summary.get("files"))}


def audit_lineage(record: Any, target: str | None) -> Any:
    """The audit task's lineage: the target it judged (unchanged by it) as an input, with the verdict's
    data-quality facets, passed or failed (:class:`~.audit.CommitAuditOperator`)."""
    from airflow.providers.common.compat.openlineage.facet import InputDataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    if record is None or target is None:
        return OperatorLineage()
    namespace, name = dataset_name(target)
    return OperatorLineage(inputs=[InputDataset(namespace=namespace, name=name,
                                                facets=audit_facets(record.to_doc()))])


@functools.cache
def replaced_generation_facet_class() -> type:
    """``ReplacedGenerationDatasetFacet``: an OpenLineage dataset facet (built on first use, so that nothing of
    OpenLineage is imported without it). Its JSON schema ships next to this module."""
    import attr
    from openlineage.client.generated.base import DatasetFacet

    @attr.define
    class ReplacedGenerationDatasetFacet(DatasetFacet):
        """The generation of this job that the commit replaced, and what it had published."""

        jobUuid: str  # noqa: N815
        generation: int | None = attr.field(default=None)
        rowCount: int | None = attr.field(default=None)  # noqa: N815
        size: int | None = attr.field(default=None)
        fileCount: int | None = attr.field(default=None)  # noqa: N815
        _additional_skip_redact = ["jobUuid", "generation", "rowCount", "size", "fileCount"]

        @staticmethod
        def _get_schema() -> str:
            return REPLACED_FACET_SCHEMA

    return ReplacedGenerationDatasetFacet


def _table_dataset(table: dict[str, Any], data_root: str) -> tuple[str, str, dict[str, Any]]:
    """The table as the output dataset (namespace, name) and its facets: ``version`` (the Delta version or
    Iceberg snapshot id), and for Iceberg ``symlinks`` to its location (the data root's parent)."""
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

    version = table.get("version", table.get("snapshot_id"))
    facets: dict[str, Any] = {"version": DatasetVersionDatasetFacet(datasetVersion=str(version))}
    if table["format"] == "delta":
        return (*dataset_name(table["table"]), facets)
    from airflow.providers.common.compat.openlineage.facet import Identifier, SymlinksDatasetFacet

    namespace, location = dataset_name(data_root.rstrip("/").removesuffix("/data"))
    facets["symlinks"] = SymlinksDatasetFacet(identifiers=[Identifier(namespace=namespace, name=location,
                                                                      type="LOCATION")])
    return namespace, table["table"], facets


def _read_parquet_schema(store: Any, rel: str) -> Any:
    """The Arrow schema in the footer of the Parquet file *rel* of *store* (reads the footer only)."""
    import pyarrow.parquet as pq

    url = store.url(rel)
    fs = getattr(store, "fs", None)
    if fs is None:   # the local store: a plain path
        return pq.read_schema(url.removeprefix("file://"))
    with fs.open(url, "rb") as fh:
        return pq.read_schema(fh)
