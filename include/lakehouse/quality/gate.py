"""The quality gate: one judgement of row expectations, for stream micro-batches and backfill
slices alike, so a stream and a backfill over the same input keep and reject the same rows.

For each batch of rows, :meth:`QualityGate.judge`:

1. evaluates every expectation's *unexpected* condition (GX's own, see ``lakehouse.quality.gx``)
   and counts the unexpected rows of each in one Spark job (which also materializes the
   micro-batch), and records the results in ``ops.quality_results``;
2. ``fail``: raises :class:`ExpectationFailed` naming the expectation, the count and a few rows,
   before anything is written, so a restart re-runs the same batch from the checkpoint;
3. ``drop``: rejects the failing rows, each with the names of the expectations it failed
   (``_failed_expectations``); ``warn`` failures pass, and are recorded;
4. returns a :class:`Verdict`: the rows to keep and the rows to quarantine. The table's writer
   (``lakehouse.writes``) commits both.

Rows of a bronze table that failed parsing (``_parse_error``) are kept as they are: expectations
judge parsed rows only.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.core.errors import UsageError
from lakehouse.quality import gx
from lakehouse.quality.results import QualityLog, to_json
from lakehouse.sources import PARSE_ERROR
from lakehouse.spec.expectations import snake_case
from lakehouse.writes import FAILED, Origin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table
    from lakehouse.spec.expectations import Expectation

log = logging.getLogger("lakehouse.quality")

SAMPLE_ROWS = 5
# Suite parameters such as now() are evaluated when conditions are built; a long-running stream
# rebuilds the conditions of such expectations this often.
DYNAMIC_REFRESH = timedelta(minutes=5)


@dataclass(frozen=True)
class _Built:
    conditions: dict[str, Column]
    at: float


# Conditions are plain Column expressions: built once per (table, expectations, schema) in a
# process, whichever flow run or backfill asks first.
_BUILT: dict[tuple[str, tuple[tuple[str, str], ...], str], _Built] = {}
_BUILT_LOCK = threading.Lock()


class ExpectationFailed(UsageError):
    """A ``fail`` expectation found unexpected rows; nothing of the batch was written."""


@dataclass(frozen=True)
class Outcome:
    """What one evaluation found (for logs, tests and the figures)."""

    rows: int
    evaluated: int
    quarantined: int
    unexpected: dict[str, int]


@dataclass(frozen=True)
class Verdict:
    """The gate's decision on a batch: rows to write, and rows to quarantine (``None``: nothing to
    quarantine; a backfill always gets a frame, possibly empty, to replace its slice with)."""

    kept: DataFrame | None  # (``None``: no row for the table, e.g. every row waits for a model)
    rejected: DataFrame | None
    outcome: Outcome | None = None


class QualityGate:
    """Evaluates a table's row expectations on the rows its flow writes (see module doc)."""

    def __init__(self, lake: Lake, pipeline: Pipeline, table: Table) -> None:
        self.lake = lake
        self.pipeline = pipeline
        self.table = table
        self.expectations: tuple[Expectation, ...] = tuple(table.expectations)
        self.results = QualityLog(lake)
        self.last: Outcome | None = None

    @classmethod
    def for_table(cls, lake: Lake, pipeline: Pipeline, table: Table) -> QualityGate | None:
        """The table's gate, or ``None`` when it declares no row expectations."""
        return cls(lake, pipeline, table) if table.expectations else None

    # ------------------------------------------------------------------ evaluation
    def conditions(self, df: DataFrame) -> dict[str, Column]:
        """Each expectation's unexpected-row condition, built by GX once per schema in a
        process (and every ``DYNAMIC_REFRESH`` for expectations with suite parameters such as
        ``now()``)."""
        key = (self.table.name, tuple((repr(e), e.label) for e in self.expectations), df.schema.json())
        with _BUILT_LOCK:
            built = _BUILT.get(key)
        if built is None:
            started = time.monotonic()
            built = _Built(self._resolve(df, self.expectations), time.monotonic())
            log.info(
                "%s: %d expectation(s) ready in %.1f s", self.table.name, len(built.conditions),
                time.monotonic() - started,
            )  # fmt: skip
        elif time.monotonic() - built.at > DYNAMIC_REFRESH.total_seconds():
            dynamic = [e for e in self.expectations if gx.is_dynamic(e)]
            if dynamic:
                built = _Built({**built.conditions, **self._resolve(df, dynamic)}, time.monotonic())
        with _BUILT_LOCK:
            _BUILT[key] = built
        return built.conditions

    def _resolve(self, df: DataFrame, expectations: Sequence[Expectation]) -> dict[str, Column]:
        where = f"table {self.table.name!r} expectation"
        return gx.row_conditions(df.sparkSession, df.schema, expectations, where, self.lake)

    def judge(self, df: DataFrame, origin: Origin) -> Verdict:
        """Keep, reject or fail the rows of ``df`` (see the module doc); records the results."""
        conditions = self.conditions(df)
        checked = F.col(PARSE_ERROR).isNull() if self.table.keeps_unparsed else F.lit(True)
        hits = {e.label: checked & conditions[e.label] for e in self.expectations}
        drops = [e.label for e in self.expectations if e.action == "drop"]
        dropped = reduce(lambda a, b: a | b, [hits[label] for label in drops]) if drops else F.lit(False)
        stats = df.agg(
            F.count(F.lit(1)).alias("rows"),
            F.count_if(checked).alias("evaluated"),
            F.count_if(dropped).alias("dropped"),
            *[F.count_if(hits[e.label]).alias(f"e{i}") for i, e in enumerate(self.expectations)],
        ).collect()[0]
        unexpected = {e.label: int(stats[f"e{i}"]) for i, e in enumerate(self.expectations)}
        outcome = Outcome(int(stats["rows"]), int(stats["evaluated"]), int(stats["dropped"]), unexpected)
        self.last = outcome
        failures = [e for e in self.expectations if e.action == "fail" and not self._passes(e, outcome)]
        samples = {e.label: self._sample(df.where(hits[e.label])) for e in failures}
        self._record(outcome, origin, samples)
        if failures:
            raise ExpectationFailed(self._failure_message(failures, outcome, origin, samples))
        rejected = None
        if drops and (outcome.quarantined or origin.kind == "backfill"):  # a backfill also clears its slice
            failed = F.array_compact(F.array(*[F.when(hit, F.lit(label)) for label, hit in hits.items()]))
            rejected = df.where(dropped).withColumn(FAILED, failed)
        if any(unexpected.values()):
            log.log(
                logging.WARNING if outcome.quarantined else logging.INFO,
                "%s %s: %s of %s rows quarantined; unexpected rows per expectation: %s",
                self.table.name, origin.label, f"{outcome.quarantined:,}", f"{outcome.rows:,}",
                ", ".join(f"{k} ({next(e.action for e in self.expectations if e.label == k)}): {v}"
                          for k, v in unexpected.items() if v),
            )  # fmt: skip
        return Verdict(df.where(~dropped), rejected, outcome)

    @staticmethod
    def _passes(expectation: Expectation, outcome: Outcome) -> bool:
        """GX's ``mostly``: the share of rows that must meet the expectation (default all)."""
        count = outcome.unexpected[expectation.label]
        mostly = float(expectation.kwargs.get("mostly", 1.0))
        return count == 0 or count <= (1.0 - mostly) * outcome.evaluated

    @staticmethod
    def _sample(unexpected: DataFrame) -> list[str]:
        rows = unexpected.limit(SAMPLE_ROWS).collect()
        return [json.dumps(row.asDict(recursive=True), default=str) for row in rows]

    def _failure_message(
        self, failures: list[Expectation], outcome: Outcome, origin: Origin, samples: dict[str, list[str]]
    ) -> str:
        lines = [f"{self.table.name}: {origin.label} stopped by expectation(s) with action='fail':"]
        for e in failures:
            count = outcome.unexpected[e.label]
            lines.append(f"- {e.label!r} ({e!r}): {count:,} of {outcome.evaluated:,} rows unexpected, e.g.")
            lines.extend(f"    {row}" for row in samples[e.label])
        lines.append(
            "Nothing of this batch was written. Remove the bad input (or change the expectation, "
            "e.g. action='drop'), then restart: the flow resumes from its checkpoint with this batch."
        )
        return "\n".join(lines)

    # ------------------------------------------------------------------ outputs
    def _record(self, outcome: Outcome, origin: Origin, samples: dict[str, list[str]]) -> None:
        if not outcome.rows:
            return  # a batch without rows (e.g. one that only moves the watermark) validates nothing
        rows = []
        for e in self.expectations:
            count = outcome.unexpected[e.label]
            rows.append(
                {
                    "run_id": origin.run_id,
                    "origin": origin.kind,
                    "pipeline": self.pipeline.name,
                    "table_name": self.table.name,
                    "expectation": e.label,
                    "expectation_type": snake_case(e.gx_class),
                    "action": e.action,
                    "batch_id": origin.batch_id,
                    "slice": origin.slice.label if origin.slice else None,
                    "success": self._passes(e, outcome),
                    "element_count": outcome.evaluated,
                    "unexpected_count": count,
                    "unexpected_percent": 100.0 * count / outcome.evaluated if outcome.evaluated else 0.0,
                    "details": to_json({"kwargs": dict(e.kwargs), "unexpected_rows": samples.get(e.label)}),
                }
            )
        try:
            self.results.append(rows, later=origin.kind == "stream")  # never wait in a micro-batch
        except Exception:  # the history must never take a stream down
            log.exception("could not record quality results of %s", self.table.name)
