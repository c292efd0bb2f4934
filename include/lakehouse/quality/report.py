"""Reports of table checks, Spark- and GX-free: what ``lakehouse quality`` prints and what the
``<pipeline>_quality`` DAG's verdict tasks rebuild from ``ops.quality_results``; and where the
GX project and its Data Docs live."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from lakehouse.core.config import Settings

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
    version: int | None = None  # the Delta version every check of the table read

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
        at = f" at version {self.version}" if self.version is not None else ""
        return "\n".join([f"{self.table}{at}: {state}{extra}", *(r.line() for r in self.results)])


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
