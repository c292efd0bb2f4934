"""Change feeds: each Debezium change event becomes one flat *change row*, the input of an
``Scd1``/``Scd2`` table (``lakehouse.writes.history`` applies them).

A change row holds the row image (``after``; ``before`` for a delete, whose ``after`` is null)
without the table's ignored columns, and:

==============  ===============================================================================
``_op``         the operation: ``r`` (snapshot read), ``c``, ``u``, ``d``; anything else is
                quarantined by the table's implied expectations (``change_operation_known``)
``_seq``        the sequence (a struct of the ``sequence_by`` values; null when one is missing)
``_ts``         when the change happened (``changed_at``, epoch milliseconds, as a timestamp)
``_event_id``   a hash of the change itself (keys, sequence, operation, row): a change delivered
                twice (a connector restart, a file landed again) has one id
``_version``    the total order of a key's changes: the sequence, then the operation (at one
                sequence a delete wins, as in Spark's AUTO CDC), then the id
==============  ===============================================================================

Pure and row-wise, so a stream and a backfill normalise the same events the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pyspark.sql import functions as F

from lakehouse.spec import SpecError
from lakehouse.spec.modes import CHANGE_OPERATIONS
from lakehouse.spec.modes.scd import CHANGE_ID, CHANGE_OP, CHANGE_SEQUENCE, CHANGE_TIME, CHANGE_VERSION

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lakehouse.spec import ChangeMode, Table

CHANGE_COLUMNS = (CHANGE_OP, CHANGE_SEQUENCE, CHANGE_TIME, CHANGE_ID, CHANGE_VERSION)
ENVELOPE = ("op", "before", "after")


def sequence_field(expression: str) -> str:
    """The name of a sequence expression's field in ``_seq``: ``source.lsn`` -> ``lsn``."""
    return expression.strip("`").rsplit(".", 1)[-1].strip("`")


def row_columns(df: DataFrame, mode: ChangeMode) -> list[str]:
    """The columns of the row image that the table keeps."""
    return [c for c in df.schema["after"].dataType.fieldNames() if c not in mode.ignore]


def normalize(df: DataFrame, table: Table) -> DataFrame:
    """Debezium change events (bronze rows) -> change rows (see the module doc)."""
    assert table.applies_changes, f"{table.name} does not apply a change feed"
    mode = cast("ChangeMode", table.write)
    missing = [c for c in ENVELOPE if c not in df.columns]
    if missing:
        raise SpecError(
            f"table {table.name!r} applies a change feed, but its upstream has no column(s) "
            f"{', '.join(missing)}: declare the bronze source with "
            "schema=debezium_schema('<the row's columns>') (Debezium's envelope: op, before, after, source)"
        )
    columns = row_columns(df, mode)
    if unknown := [k for k in mode.keys if k not in columns]:
        raise SpecError(
            f"table {table.name!r}: key column(s) {unknown} are not columns of the change feed's row "
            f"({', '.join(columns)})"
        )
    image = F.when(F.col("op") == "d", F.col("before")).otherwise(F.col("after"))
    parts = [F.expr(expression) for expression in mode.sequence_by]
    complete = F.lit(True)
    for part in parts:
        complete = complete & part.isNotNull()
    sequence = F.when(
        complete,
        F.struct(*[p.alias(sequence_field(e)) for p, e in zip(parts, mode.sequence_by, strict=True)]),
    )
    rows = df.select(
        *[image[c].alias(c) for c in columns],
        F.col("op").alias(CHANGE_OP),
        sequence.alias(CHANGE_SEQUENCE),
        F.timestamp_millis(F.expr(mode.changed_at).cast("bigint")).alias(CHANGE_TIME),
    )
    # What the change is, not how it was delivered: a second delivery has the same id.
    fields = (
        *mode.keys,
        CHANGE_SEQUENCE,
        CHANGE_OP,
        CHANGE_TIME,
        *(c for c in columns if c not in mode.keys),
    )
    rows = rows.withColumn(CHANGE_ID, F.sha2(F.to_json(F.struct(*[F.col(f"`{c}`") for c in fields])), 256))
    return rows.withColumn(
        CHANGE_VERSION, F.struct(CHANGE_SEQUENCE, operation_rank().alias("_rank"), CHANGE_ID)
    )


def operation_rank() -> Column:
    """Snapshot read < create < update < delete (at one sequence, a delete wins); -1: unknown."""
    known = F.array(*[F.lit(op) for op in CHANGE_OPERATIONS])
    return (F.array_position(known, F.col(CHANGE_OP)) - 1).cast("int")
