"""Parsing lines of text into a source's schema without ever dropping one.

A line that is not JSON, holds more than one JSON value, has a value of the wrong type, or lacks a
required (``NOT NULL``) field is kept in bronze with ``_raw_record`` (the line as received) and
``_parse_error`` (why); keys outside the schema are kept as JSON in ``_rescued_data``. Such rows
stay in bronze: downstream flows only ever see rows whose ``_parse_error`` is null.
"""

from __future__ import annotations

import functools
import logging
import operator
from typing import TYPE_CHECKING

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

from lakehouse.spec.sources import INGESTED_AT, PARSE_ERROR, RAW_RECORD, RESCUED, SOURCE_FILE

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.spec import Column

log = logging.getLogger(__name__)
UNKNOWN_KEYS = "lakehouse_unknown_json_keys"
UNKNOWN_KEYS_CLASS = "lakehouse.sources.UnknownJsonKeys"  # sources/java, in the platform's jar
NOT_ONE_VALUE = "more than one JSON value on the line (or text after the object): one JSON object per line"
_lax: list[str] = []  # why the strict check is off in this process, once known


def listed(label: str, names: list[SparkColumn]) -> SparkColumn:
    """``label`` and the non-null ``names``, comma-separated; null when there are none."""
    text = F.concat_ws(", ", *names)
    return F.when(text != "", F.concat(F.lit(label), text))


def unknown_keys(spark: SparkSession, names: list[str]) -> SparkColumn:
    """How many of ``value``'s keys are not ``names``; null unless ``value`` is exactly one JSON
    object. Spark's JSON functions read a line's first value and ignore the rest (``{"a":1}
    {"b":2}`` parses as ``{"a":1}``): the platform's ``UnknownJsonKeys`` tokenizes the line once
    for both. Without the platform's jar (``make bootstrap`` builds it), Spark's
    ``json_object_keys`` counts the keys and a second value goes unnoticed, as in Spark."""
    if not _lax:
        try:
            spark.udf.registerJavaFunction(UNKNOWN_KEYS, UNKNOWN_KEYS_CLASS, IntegerType())
        except AnalysisException as exc:
            _lax.append(str(exc))
            log.warning(
                "%s is not on the class path (%s): a JSON line holding a second value after its object "
                "is parsed as its first value alone; `make bootstrap` builds the platform's jar",
                UNKNOWN_KEYS_CLASS,
                exc,
            )
    if _lax:
        keys = F.json_object_keys("value")  # null for a line with NaN, which from_json reads: never null here
        return F.coalesce(F.size(F.array_except(keys, F.array(*[F.lit(n) for n in names]))), F.lit(0))
    # the line's UTF-8 bytes as they are: a String would be decoded for every line first
    return F.call_function(UNKNOWN_KEYS, F.col("value").cast("binary"), F.lit("\0".join(names)))


def parse_json(
    lines: DataFrame, columns: tuple[Column, ...], carry: tuple[str, ...] = (SOURCE_FILE,)
) -> DataFrame:
    """``value`` (one JSON document per row) -> typed columns + bronze metadata columns, with
    the ``carry`` columns (where the row came from) kept as they are.

    One parse into the schema does the work; every type mismatch makes it flag the row
    (``_corrupt``), so only flagged rows are parsed again, into a map, to say what is wrong.
    Unknown keys to rescue are counted by a tokenization that skips values, which also finds a
    second value after the object (:func:`unknown_keys`)."""
    ddl = ", ".join(f"`{c.name}` {c.type}" for c in columns) + ", `_corrupt` STRING"
    parsed = F.from_json("value", ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    as_map = F.from_json("value", "map<string,string>")  # evaluated only where used: flagged rows, rescues
    names = F.array(*[F.lit(c.name) for c in columns])
    # the parse is a column of its own (read many times); the maps are read inline, only where used
    df = lines.withColumn("_p", parsed)

    def typed(name: str) -> SparkColumn:  # the field as the schema parse read it
        return F.col(f"_p.`{name}`")

    def present(name: str) -> SparkColumn:  # sent with a value (JSON null is not a value)
        return as_map.getItem(name).isNotNull()

    def missing(flagged: bool) -> SparkColumn:
        """Required fields without a value (in an unflagged row, every null field was not sent
        or sent as null: only a flagged row needs the map to tell a wrong type apart)."""
        absent = [(c.name, typed(c.name).isNull()) for c in columns if c.required]
        return listed(
            "missing required field(s): ",
            [F.when(null & ~present(name) if flagged else null, F.lit(name)) for name, null in absent],
        )

    mismatched = listed(
        "wrong type for: ", [F.when(present(c.name) & typed(c.name).isNull(), F.lit(c.name)) for c in columns]
    )
    flagged = F.col("_p").isNull() | F.col("_p._corrupt").isNotNull()
    error = F.when(
        flagged,
        F.when(as_map.isNull(), F.lit("not a JSON object")).otherwise(F.coalesce(mismatched, missing(True))),
    ).otherwise(missing(False))
    # Keys outside the schema, counted by the line's one tokenization that also finds a second
    # value after the object (null then): from_json read only the first
    df = df.withColumn("_unknown", unknown_keys(lines.sparkSession, [c.name for c in columns]))
    # said beside the line's other errors (an object is one when from_json or the lax map read it)
    not_one = F.when(F.col("_unknown").isNull() & (~flagged | as_map.isNotNull()), F.lit(NOT_ONE_VALUE))
    errors = F.concat_ws("; ", not_one, error)
    # A line read whole, one object, with every required field has no error: the error text is
    # built only for the others (building it for every line cost more than the parse's checks)
    required = [typed(c.name).isNotNull() for c in columns if c.required]
    clean = functools.reduce(operator.and_, required, ~flagged & F.col("_unknown").isNotNull())
    error = F.when(~clean & (errors != ""), errors)
    unknown = F.col("_unknown") > 0
    kept = F.from_json("value", "map<string,variant>")  # as sent: numbers stay numbers (``rescue``)
    extra = F.map_filter(kept, lambda k, _v: ~F.array_contains(names, k))
    return df.select(
        *[typed(c.name).alias(c.name) for c in columns],
        F.when(error.isNotNull(), F.col("value")).alias(RAW_RECORD),
        error.alias(PARSE_ERROR),
        F.when(unknown, F.to_json(extra)).alias(RESCUED),
        *[F.col(name) for name in carry],
        F.current_timestamp().alias(INGESTED_AT),
    )
