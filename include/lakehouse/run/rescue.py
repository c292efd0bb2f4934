"""Fill source columns added after rows arrived, from what bronze kept of them.

Bronze keeps the fields of a line that the source's schema does not declare in ``_rescued_data``
(JSON). Once such a field is added to the schema, new rows carry it as a column; ``rescue`` fills
that column for the rows that arrived before, from ``_rescued_data``, with no landing file (they
may be long gone): one Delta UPDATE per run, which also takes the filled fields out of
``_rescued_data``. A value that does not convert to the declared type stays there, and is
counted. Running it again changes nothing; it waits for a backfill of the pipeline (the
backfill lock), and a running stream's appends do not conflict with it.
"""

from __future__ import annotations

import functools
import logging
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse import delta
from lakehouse.core.errors import OperationFailed
from lakehouse.monitoring import events
from lakehouse.spec.sources import RESCUED
from lakehouse.state import storage
from lakehouse.state.control import FlowControl

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings
    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table
    from lakehouse.spec.sources import Column


log = logging.getLogger("lakehouse.rescue")
# A rescue beside its running stream: an UPDATE whose read an append of the stream invalidated
# (Delta refuses it: ConcurrentAppendException) runs again, this many times at most.
UPDATE_ATTEMPTS = 5


@dataclass(frozen=True)
class Rescue:
    """What a rescue did to one bronze table."""

    table: str
    filled: dict[str, int]  # column -> rows whose value it filled from _rescued_data
    unconverted: dict[str, int]  # column -> rows whose kept value is not of the column's type
    version: int | None  # the table version the UPDATE committed (None: nothing to fill)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def rescue(spark: SparkSession, settings: Settings, lake: Lake, pipeline: Pipeline, table: Table) -> Rescue:
    """Fill ``table``'s declared source columns from ``_rescued_data`` where they are null."""
    from pyspark.sql import functions as F

    if not table.keeps_unparsed:
        raise OperationFailed(
            f"{pipeline.name}.{table.name} reads no source: only a bronze table keeps unread fields "
            f"in {RESCUED}; rebuild tables below it with `lakehouse backfill {pipeline.name} --flow "
            f"{table.name} --downstream`"
        )
    path = lake.table(table.name)
    if not storage.exists(spark, f"{path}/_delta_log"):
        raise OperationFailed(f"{pipeline.name}.{table.name} has no table at {path} yet: nothing to rescue")
    with FlowControl.of(settings, pipeline.name).backfill_lock():
        existing = spark.read.format("delta").load(path)
        if RESCUED not in existing.columns:
            return Rescue(table.name, {}, {}, None)
        kept = existing.where(F.col(RESCUED).isNotNull())
        keys = {r[0] for r in kept.select(F.explode(F.json_object_keys(RESCUED))).distinct().collect()}
        declared = [c for c in table.source.columns if c.name in keys]
        if not declared:
            return Rescue(table.name, {}, {}, None)
        _add_missing_columns(spark, path, declared)
        value = {c.name: _kept_value(c) for c in declared}
        # kept beside a value of the column: the exact value the column holds with less precision
        # (a Parquet timestamp[ns]), not one to fill
        present = {
            c.name: F.get_json_object(F.col(RESCUED), _json_path(c.name)).isNotNull()
            & (F.col(_quoted(c.name)).isNull() if c.name in existing.columns else F.lit(True))
            for c in declared
        }
        counts = kept.select(
            *[
                F.count_if(present[n] & value[n].isNotNull()).alias(f"filled_{i}")
                for i, n in enumerate(value)
            ],
            *[F.count_if(present[n] & value[n].isNull()).alias(f"bad_{i}") for i, n in enumerate(value)],
        ).first()
        filled = {n: counts[f"filled_{i}"] for i, n in enumerate(value)}
        unconverted = {n: counts[f"bad_{i}"] for i, n in enumerate(value) if counts[f"bad_{i}"]}
        if not any(filled.values()):
            return Rescue(table.name, filled, unconverted, None)
        from delta.tables import DeltaTable

        target = DeltaTable.forPath(spark, path)
        # a column already set (the row arrived after the field was declared) keeps its value
        updates = {_quoted(n): F.coalesce(F.col(_quoted(n)), v) for n, v in value.items()}
        fillable = [present[n] & v.isNotNull() for n, v in value.items()]
        from delta.exceptions import ConcurrentAppendException

        for attempt in range(1, UPDATE_ATTEMPTS + 1):
            try:  # idempotent: a row filled already keeps its value, its kept field is gone
                target.update(
                    condition=functools.reduce(operator.or_, fillable),
                    set={
                        **updates,
                        RESCUED: _remaining({n: F.when(present[n], v) for n, v in value.items()}),
                    },
                )
                break
            except ConcurrentAppendException:  # the running stream appended rows the update reads
                if attempt == UPDATE_ATTEMPTS:
                    raise
                log.info(
                    "%s: the stream appended during the rescue; updating again (%d)", table.name, attempt
                )
        version = target.history(1).select("version").first()[0]
    events.record(
        lake, pipeline.name, "rescue", "succeeded", [table.name],
        ", ".join(f"{column}: {rows:,} rows filled" for column, rows in filled.items()),
        version=int(version), unconverted=unconverted,
    )  # fmt: skip
    return Rescue(table.name, filled, unconverted, int(version))


def _json_path(name: str) -> str:
    """The JSONPath of a top-level field, for ``get_json_object``."""
    if "'" in name or "]" in name:
        raise OperationFailed(f"cannot rescue a field named {name!r}: rename the column")
    return f"$.{name}" if name.isidentifier() else f"$['{name}']"


def _kept_value(column: Column) -> SparkColumn:
    """The field's kept value in the column's type (null when it does not convert). The text of
    the value, as ``get_json_object`` gives it, is cast: older rows kept values as JSON strings."""
    from pyspark.sql import functions as F

    text = F.get_json_object(F.col(RESCUED), _json_path(column.name))
    if column.type.strip().lower().startswith(("struct", "array", "map")):
        return F.from_json(text, column.type)
    return text.try_cast(column.type)


def _remaining(value: dict[str, SparkColumn]) -> SparkColumn:
    """``_rescued_data`` without the fields filled from it (null once nothing is left)."""
    from pyspark.sql import functions as F

    fields = F.from_json(F.col(RESCUED), "map<string,variant>")  # keeps the values' JSON types
    taken = {n: v.isNotNull() for n, v in value.items()}

    def kept(key: SparkColumn, _: SparkColumn) -> SparkColumn:
        out = F.lit(True)
        for name, converted in taken.items():
            out = out & ~((key == F.lit(name)) & converted)
        return out

    left = F.map_filter(fields, kept)
    return F.when(F.size(left) > 0, F.to_json(left))


def _add_missing_columns(spark: SparkSession, path: str, declared: list[Column], attempts: int = 5) -> None:
    """Add to the table the declared columns no write has added yet. The running stream adds them
    on its first batch with the new schema, possibly while the rescue runs: the schema is read
    again before each attempt, and a column that appeared meanwhile is left as the stream made it."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException

    for attempt in range(1, attempts + 1):
        current = spark.read.format("delta").load(path).columns
        missing = [c for c in declared if c.name not in current]
        if not missing:
            return
        columns = ", ".join(f"{_quoted(c.name)} {c.type}" for c in missing)
        try:
            spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
            return
        except (AnalysisException, Py4JJavaError) as exc:
            # the column is there now, or Delta refused the commit over a concurrent change
            if attempt == attempts or not (delta.is_conflict(exc) or "FIELD_ALREADY_EXISTS" in str(exc)):
                raise
            log.info("%s: its schema changed as the rescue added %s; reading it again", path, columns)
