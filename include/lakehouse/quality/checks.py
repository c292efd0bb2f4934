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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.quality.declare import Expectation, checked_tables, snake_case
from lakehouse.quality.results import QualityLog, to_json
from lakehouse.sources import PARSE_ERROR

if TYPE_CHECKING:
    from collections.abc import Sequence

    import polars as pl
    from pyspark.sql import SparkSession

    from lakehouse.config import Settings
    from lakehouse.lake import Lake
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.quality")

DATASOURCE = "lakehouse"
BATCH_DEFINITION = "whole_table"
DOCS_SITE = "local_site"
SAMPLE = 5


def quality_home(settings: Settings) -> Path:
    """The GX project directory (suites, results, Data Docs): under the lake root when it is a
    local directory, else under the platform directory (GX's file stores need a file system)."""
    return Path(settings.root) / "quality" if settings.is_local_root else settings.platform_dir / "quality"


def docs_dir(home: Path) -> Path:
    """Where GX builds the Data Docs site (``index.html``) of a project."""
    return home / "gx" / "uncommitted" / "data_docs" / DOCS_SITE


@dataclass(frozen=True)
class CheckResult:
    table: str
    expectation: str
    expectation_type: str
    action: str
    success: bool
    element_count: int | None
    unexpected_count: int | None
    unexpected_percent: float | None
    observed_value: Any
    examples: list[Any]
    error: str | None = None

    @property
    def violated(self) -> bool:
        return not self.success and self.action != "warn"

    def line(self) -> str:
        mark = "ok  " if self.success else ("WARN" if self.action == "warn" else "FAIL")
        if self.error:
            found = f"error: {self.error}"
        elif self.unexpected_count is not None and self.element_count:
            found = (
                f"{self.unexpected_count:,} of {self.element_count:,} rows unexpected "
                f"({self.unexpected_percent or 0:.2f}%)"
            )
        elif self.unexpected_count is not None:
            found = f"{self.unexpected_count:,} unexpected rows"
        else:
            found = f"observed {self.observed_value!r}"
        example = f"; e.g. {self.examples[:SAMPLE]}" if self.examples and not self.success else ""
        return f"  {mark} {self.expectation} [{self.action}]: {found}{example}"


@dataclass
class TableReport:
    table: str
    results: list[CheckResult] = field(default_factory=list)
    skipped: str | None = None

    @property
    def violations(self) -> list[CheckResult]:
        return [r for r in self.results if r.violated]

    def text(self) -> str:
        if self.skipped:
            return f"{self.table}: skipped ({self.skipped})"
        state = (
            f"VIOLATED ({len(self.violations)} of {len(self.results)} failed)" if self.violations else "OK"
        )
        warned = [r for r in self.results if not r.success and not r.violated]
        extra = f", {len(warned)} warning(s)" if warned else ""
        return "\n".join([f"{self.table}: {state}{extra}", *(r.line() for r in self.results)])


@dataclass
class QualityReport:
    pipeline: str
    run_id: str
    tables: list[TableReport]
    docs: Path | None
    seconds: float

    @property
    def violated(self) -> list[TableReport]:
        return [t for t in self.tables if t.violations]

    def text(self) -> str:
        head = (
            f"{self.pipeline}: quality run {self.run_id}: "
            + (
                f"{len(self.violated)} of {len(self.tables)} table(s) VIOLATED"
                if self.violated
                else "all checks passed"
            )
            + f" ({self.seconds:.0f} s)"
        )
        docs = [f"Data Docs: {self.docs / 'index.html'}"] if self.docs else []
        return "\n".join([head, *(t.text() for t in self.tables), *docs])


def results_from_log(df: pl.DataFrame, table: str) -> TableReport:
    """A table's report rebuilt from ``ops.quality_results`` rows (Airflow's Spark-free verdicts)."""
    import json

    rows = df.filter(df["table_name"] == table).sort("recorded_at")
    if not rows.height:
        return TableReport(table, skipped="no results recorded for this run")
    report = TableReport(table)
    for r in rows.iter_rows(named=True):
        details = json.loads(r["details"]) if r["details"] else {}
        if details.get("skipped"):
            return TableReport(table, skipped=details["skipped"])
        report.results.append(
            CheckResult(
                table, r["expectation"], r["expectation_type"], r["action"], bool(r["success"]),
                r["element_count"], r["unexpected_count"], r["unexpected_percent"],
                json.loads(r["observed_value"]) if r["observed_value"] else None,
                details.get("examples") or [], details.get("error"),
            )
        )  # fmt: skip
    return report


# --------------------------------------------------------------------------- running


def _at_rest(declaration: Expectation, table: Table) -> Expectation:
    """A row expectation as judged at rest: on a bronze table, parsed rows only (as inline)."""
    if table.source is None or "row_condition" in declaration.kwargs:
        return declaration
    kwargs = {**declaration.kwargs, "row_condition": f"{PARSE_ERROR} IS NULL", "condition_parser": "spark"}
    return Expectation(declaration.gx_class, kwargs, declaration.action, declaration.label)


def suite_declarations(table: Table) -> list[Expectation]:
    return [_at_rest(e, table) for e in table.expectations] + list(table.checks)


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
    from delta.tables import DeltaTable

    from lakehouse.quality import gx as qgx

    started = time.monotonic()
    run_id = run_id or f"quality-{uuid.uuid4()}"
    selected = pipeline.select(tables) if tables else checked_tables(pipeline)
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
            if not DeltaTable.isDeltaTable(spark, path):
                report = TableReport(table.name, skipped="table not created yet")
                reports.append(report)
                history.append([_skip_row(run_id, pipeline, table, report.skipped or "")])
                continue
            report = _run_table(context, source, spark, lake, pipeline, table, declarations, run_id)
            reports.append(report)
            history.append([_row(run_id, pipeline, r) for r in report.results])
    return QualityReport(pipeline.name, run_id, reports, docs_dir(home), time.monotonic() - started)


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
    from great_expectations import Checkpoint, ExpectationSuite, ValidationDefinition
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.core.run_identifier import RunIdentifier

    from lakehouse.quality import gx as qgx

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
    expectations = [qgx.instantiate(d, where, lake) for d in declarations]
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
    df = spark.read.format("delta").load(lake.table(table.name))
    outcome = checkpoint.run(
        batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=f"{run_id}:{table.name}")
    )
    by_label = {d.label: d for d in declarations}
    report = TableReport(table.name)
    for validation in outcome.run_results.values():
        for result in validation.results:
            label = (result.expectation_config.meta or {}).get("lakehouse", {}).get("name")
            report.results.append(_result(table.name, by_label[label], result))
    return report


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
