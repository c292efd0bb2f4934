"""Table-level checks: each table's suite run as a GX checkpoint on the table at rest.

A table's suite (GX ``ExpectationSuite`` ``<pipeline>.<table>``) holds its ``checks`` (key
uniqueness, completeness, row counts, freshness, consistency with other tables through
``UnexpectedRowsExpectation`` queries naming ``{layer.table}``) and its row ``expectations``
evaluated on every row at rest (on bronze, on parsed rows only). The checkpoint stores its
results in the GX project (``<root>/quality/gx``) and updates the Data Docs; every result is
also appended to ``ops.quality_results``.

A failed expectation whose action is ``warn`` is reported; any other failure is a violation
(``lakehouse quality`` exits 1; the ``<pipeline>_quality`` DAG's task for the table fails).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from great_expectations import Checkpoint, ExpectationSuite, ValidationDefinition
from great_expectations.checkpoint import UpdateDataDocsAction
from great_expectations.core.run_identifier import RunIdentifier

from lakehouse import delta
from lakehouse.monitoring import lineage
from lakehouse.quality import gx as qgx
from lakehouse.quality.report import DOCS_SITE, SAMPLE, CheckResult, QualityReport, TableReport, docs_dir
from lakehouse.quality.results import QualityLog, to_json
from lakehouse.sources import PARSE_ERROR
from lakehouse.spec.expectations import TABLE_REFERENCE, Expectation, snake_case
from lakehouse.state import checkpoints

if TYPE_CHECKING:
    import re
    from collections.abc import Sequence
    from pathlib import Path

    from pyspark.sql import SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.quality")

DATASOURCE = "lakehouse"
BATCH_DEFINITION = "whole_table"


# --------------------------------------------------------------------------- running


def _at_rest(declaration: Expectation, table: Table) -> Expectation:
    """A row expectation as judged at rest: on a bronze table, parsed rows only (as inline)."""
    if not table.keeps_unparsed or "row_condition" in declaration.kwargs:
        return declaration
    kwargs = {**declaration.kwargs, "row_condition": f"{PARSE_ERROR} IS NULL", "condition_parser": "spark"}
    return Expectation(declaration.gx_class, kwargs, declaration.action, declaration.label)


def suite_declarations(table: Table) -> list[Expectation]:
    """A table's suite: its checks, and its row expectations judged at rest (a change feed's
    row expectations judge change events, which its table does not hold)."""
    # a table with change logs holds the history of the changes its expectations judged
    rows = [] if table.logs else [_at_rest(e, table) for e in table.expectations]
    return rows + list(table.checks)


def _result(table: str, declaration: Expectation, validation: Any) -> CheckResult:
    result = dict(validation.result or {})
    info = validation.exception_info or {}
    error = info.get("exception_message") if info.get("raised_exception") else None
    unexpected = result.get("unexpected_count")
    observed = result.get("observed_value")
    examples = result.get("partial_unexpected_list") or []
    if declaration.gx_class == "UnexpectedRowsExpectation":
        unexpected = observed if isinstance(observed, int) else unexpected
        examples = (result.get("details") or {}).get("unexpected_rows") or examples
    return CheckResult(
        table=table,
        expectation=declaration.label,
        expectation_type=snake_case(declaration.gx_class),
        action=declaration.action,
        success=bool(validation.success),
        element_count=result.get("element_count"),
        unexpected_count=unexpected,
        unexpected_percent=result.get("unexpected_percent"),
        observed_value=observed,
        examples=[e if isinstance(e, (str, int, float, bool)) or e is None else str(e) for e in examples][
            :SAMPLE
        ],
        error=error,
    )


def run_checks(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    home: Path,
    tables: Sequence[str] | None = None,
    run_id: str | None = None,
) -> QualityReport:
    """Run the suites of ``tables`` (default: every table with declarations) as GX checkpoints,
    record every result in ``ops.quality_results`` and update the Data Docs (each checkpoint
    renders its suite and its validation, and the index)."""

    started = time.monotonic()
    run_id = run_id or f"quality-{uuid.uuid4()}"
    selected = pipeline.select(tables) if tables else pipeline.checked_tables()
    reports: list[TableReport] = []
    history = QualityLog(lake)
    with qgx.GX_LOCK:
        context = qgx.file_context(str(home))
        source = context.data_sources.add_or_update_spark(DATASOURCE)
        for number, table in enumerate(selected, 1):
            declarations = suite_declarations(table)
            path = lake.table(table.name)
            log.info(
                "quality %d/%d %s: %d expectation(s) ...",
                number,
                len(selected),
                table.name,
                len(declarations),
            )
            if not declarations:
                reports.append(TableReport(table.name, skipped="declares no expectations or checks"))
                continue
            if not delta.exists(spark, path):
                report = TableReport(table.name, skipped="table not created yet")
                reports.append(report)
                history.append([_skip_row(run_id, pipeline, table, report.skipped or "")])
                continue
            lineage_run = lineage.new_run_id()
            try:
                report = _run_table(context, source, spark, lake, pipeline, table, declarations, run_id)
            except Exception as exc:
                report_lineage(lake, pipeline, table, lineage_run, [], error=str(exc))
                raise
            reports.append(report)
            history.append([_row(run_id, pipeline, r) for r in report.results])
            report_lineage(lake, pipeline, table, lineage_run, report.results, version=report.version)
    return QualityReport(pipeline.name, run_id, reports, docs_dir(home), time.monotonic() - started)


def report_lineage(
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    run_id: str,
    results: Sequence[CheckResult],
    version: int | None = None,
    error: str | None = None,
) -> None:
    """The run's OpenLineage event: an assertion per expectation, the rows checked. Built inside
    the report's guard, as the event is: lineage never fails a quality run."""

    def build() -> lineage.RunEvent:
        by_label = {d.label: d for d in suite_declarations(table)}
        assertions = [
            lineage.Assertion(
                assertion=r.expectation_type,
                name=r.expectation,
                success=r.success,
                column=_column(by_label[r.expectation]),
                severity=by_label[r.expectation].severity,
                actual=None if r.unexpected_count is None else f"{r.unexpected_count} unexpected",
            )
            for r in results
        ]
        rows = next((r.element_count for r in results if r.element_count is not None), None)
        return lineage.quality_event(
            lake, pipeline, table, run_id, assertions, rows=rows, version=version, error=error
        )

    lineage.report(lake, f"{table.name}'s quality run", build)


def _column(declaration: Expectation) -> str | None:
    column = declaration.kwargs.get("column")
    return column if isinstance(column, str) and column else None


def _run_table(
    context: Any,
    source: Any,
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    declarations: list[Expectation],
    run_id: str,
) -> TableReport:

    where = f"table {table.name!r} check"
    name = f"{pipeline.name}.{table.name}"
    try:
        asset = source.get_asset(table.name)
    except LookupError:
        asset = source.add_dataframe_asset(table.name)
    try:
        batch_definition = asset.get_batch_definition(BATCH_DEFINITION)
    except KeyError:
        batch_definition = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)
    version, versions = as_its_stream_saw_them(spark, lake, pipeline, table, declarations)
    expectations = [qgx.instantiate(d, where, lake, versions=versions) for d in declarations]
    suite = context.suites.add_or_update(ExpectationSuite(name=name, expectations=expectations))
    definition = context.validation_definitions.add_or_update(
        ValidationDefinition(name=name, data=batch_definition, suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(
        Checkpoint(
            name=name,
            validation_definitions=[definition],
            actions=[UpdateDataDocsAction(name="update_data_docs", site_names=[DOCS_SITE])],
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE},
        )
    )
    # One version for every metric: GX computes each (row count, nulls, unexpected rows) with a
    # Spark job of its own, and a table a stream appends to meanwhile gave counts that disagree
    # (GX: "Invalid result values ... missing_count -79", the check failed on a healthy table).
    path = lake.table(table.name)
    version = delta.latest_version(spark, path) if version is None else version
    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    outcome = checkpoint.run(
        batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=f"{run_id}:{table.name}")
    )
    by_label = {d.label: d for d in declarations}
    report = TableReport(table.name, version=version)
    for validation in outcome.run_results.values():
        for result in validation.results:
            label = (result.expectation_config.meta or {}).get("lakehouse", {}).get("name")
            report.results.append(_result(table.name, by_label[label], result))
    return report


def as_its_stream_saw_them(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table, declarations: Sequence[Expectation]
) -> tuple[int | None, dict[str, int]]:
    """Which versions a check comparing ``table`` with its upstreams or its change log reads: the
    table as its stream's last committed batch left it, each upstream as far as that batch had
    read it, and the table's change log as that batch left it.

    While streams run, a downstream table trails its upstreams by a batch or more: read both at
    their latest, a consistency check (each device's status is its latest silver event) fails on
    a healthy pipeline. A change-feed flow logs a batch's changes before it writes the table: read
    at its latest, the log is ahead of the table (a live crm_quality failed on silver.customers).
    ``(None, {})``, the latest of every table, when ``table`` has no stream checkpoint or its
    checks name no other table."""
    named = {f"{m[1]}.{m[2]}" for d in declarations for v in d.kwargs.values() for m in _references(v)}
    upstreams = [
        name for name in table.upstream_names if name in named and delta.exists(spark, lake.table(name))
    ]
    own_log = table.changes if table.changes in table.logs and table.changes in named else None
    checkpoint = checkpoints.Checkpoint(spark, lake.checkpoint(pipeline.name, table.name))
    batch = checkpoint.last_committed() if upstreams or own_log else None
    if batch is None:
        return None, {}
    ids = {name: delta.detail(spark, lake.table(name))["id"] for name in upstreams}
    version = delta.version_through_batch(spark, lake.table(table.name), batch)
    # the offsets of that same batch: the stream may have committed the next one meanwhile, and
    # its upstream versions are ahead of the table's version through ``batch`` (a live check
    # failed on every device of gold.device_status)
    versions = checkpoint.read_through(ids, batch) if ids else {}
    if own_log and (logged := delta.version_through_batch(spark, lake.table(own_log), batch)) is not None:
        versions[own_log] = logged
    log.info(
        "%s checked as its stream's batch %d left it (version %s), against %s",
        table.name, batch, version, ", ".join(f"{n} version {v}" for n, v in sorted(versions.items())) or "-",
    )  # fmt: skip
    return version, versions


def _references(value: Any) -> list[re.Match[str]]:
    return list(TABLE_REFERENCE.finditer(value)) if isinstance(value, str) else []


def _row(run_id: str, pipeline: Pipeline, r: CheckResult) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "origin": "check",
        "pipeline": pipeline.name,
        "table_name": r.table,
        "expectation": r.expectation,
        "expectation_type": r.expectation_type,
        "action": r.action,
        "success": r.success,
        "element_count": r.element_count,
        "unexpected_count": r.unexpected_count,
        "unexpected_percent": r.unexpected_percent,
        "observed_value": to_json(r.observed_value),
        "details": to_json({"examples": r.examples, "error": r.error}),
    }


def _skip_row(run_id: str, pipeline: Pipeline, table: Table, reason: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "origin": "check",
        "pipeline": pipeline.name,
        "table_name": table.name,
        "expectation": "(table)",
        "success": True,
        "details": to_json({"skipped": reason}),
    }
