"""Reading ``ParquetFiles``: landing Parquet files as whole files, each decoded with Arrow against
the schema, so that no file's shape can stop the flow or lose a value.

Spark's own Parquet reader takes one schema for every file of a stream: a column it does not
name is not read, and a column of another physical type than the schema's (a pandas < 3 or
pyarrow ``timestamp[ns]``, an ``int32`` for a ``BIGINT``) fails the query at every restart. So the
stream reads files (``binaryFile``: path, time, size, bytes) and each file is decoded here with
its own schema (``mapInArrow``), by column name (case-insensitive, as Spark's reader):

- a column the schema does not declare is kept, per row, as JSON in ``_rescued_data``;
- a column of the declared type is taken as it is; of another type it is converted where every
  value converts exactly (``int32`` -> ``BIGINT``, ``float`` -> ``DOUBLE``, ``date`` -> ``TIMESTAMP``,
  text holding numbers); a value that does not convert exactly makes its row a parse error
  (``wrong type for: col (file has <type>)``, the row as JSON in ``_raw_record``);
- timestamps finer than Spark's microseconds (``timestamp[ns]``) are truncated to microseconds;
  a row whose value lost digits keeps the exact value in ``_rescued_data`` under the column's
  name (``lakehouse plan`` reports it). A timestamp without a time zone is read as UTC;
- a missing column is null (a required one makes the row a parse error);
- a file that is not readable Parquet (or a part of it) is one bronze row naming the file and
  the reason in ``_parse_error``: the rows read before the damage stay, the flow goes on.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lakehouse.sources.landing import FILE_SIZE, LandingFilesReader, file_metadata
from lakehouse.spec.sources import (
    ARRIVAL_TIME,
    INGESTED_AT,
    PARSE_ERROR,
    RAW_RECORD,
    RESCUED,
    SOURCE_FILE,
    ParquetFiles,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamReader

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table
    from lakehouse.spec.sources import Column

FILES = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"  # binaryFile's schema
CONTENT = "content"
ROWS_PER_BATCH = 65_536  # rows decoded at a time: a large file never sits in memory decoded whole


class ParquetFilesReader(LandingFilesReader):
    source: ParquetFiles

    def load(self, reader: DataStreamReader, paths: str | list[str]) -> DataFrame:
        frame = reader.format("binaryFile").schema(FILES).load(paths)
        columns = self.source.columns
        declared = StructType.fromDDL(", ".join(f"`{c.name}` {c.type}" for c in columns))
        out = StructType(
            [
                *declared.fields,
                *StructType.fromDDL(
                    f"{RAW_RECORD} STRING, {PARSE_ERROR} STRING, {RESCUED} STRING, "
                    f"{SOURCE_FILE} STRING, {ARRIVAL_TIME} TIMESTAMP, {FILE_SIZE} BIGINT"
                ).fields,
            ]
        )
        decoder = Decoder(columns, to_arrow_schema(out, timezone="UTC"))
        files = frame.select(CONTENT, *file_metadata(frame))
        return files.mapInArrow(decoder, out).withColumn(INGESTED_AT, F.current_timestamp())

    def deliver(self, lake: Lake, pipeline: Pipeline, table: Table, name: str, lines: Iterable[str]) -> Path:
        raise ValueError(f"{table.name} reads Parquet files; generators write lines (JSON, CSV, Kafka)")


class Decoder:
    """What runs on the executors: landing files (bytes and metadata) -> bronze rows (Arrow)."""

    def __init__(self, columns: tuple[Column, ...], out: pa.Schema) -> None:
        self.columns = columns
        self.out = out

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            contents = batch.column(CONTENT)
            landed = zip(
                *(batch.column(name).to_pylist() for name in (SOURCE_FILE, ARRIVAL_TIME, FILE_SIZE)),
                strict=True,
            )
            for content, file in zip(contents, landed, strict=True):
                yield from self.file(content.as_buffer(), file)

    def file(self, content: pa.Buffer | None, landed: tuple[Any, ...]) -> Iterator[pa.RecordBatch]:
        """One file's rows, then (if its bytes could not all be read) a row saying why."""
        read = 0
        try:
            parquet = pq.ParquetFile(pa.BufferReader(content if content is not None else b""))
            for part in parquet.iter_batches(batch_size=ROWS_PER_BATCH):
                yield self.rows(part, landed)
                read += part.num_rows
        except (pa.ArrowException, OSError, ValueError) as exc:
            reason = f"{type(exc).__name__}: {str(exc).strip()}"
            if read:
                text = f"not readable as Parquet after its first {read:,} rows ({reason})"
            else:
                text = f"not a readable Parquet file ({reason}); the file is in no other row"
            yield self.error_row(text, landed)

    def rows(self, part: pa.RecordBatch, landed: tuple[Any, ...]) -> pa.RecordBatch:
        """A decoded part of a file as bronze rows."""
        n = part.num_rows
        by_name = {name.lower(): i for i, name in enumerate(part.schema.names)}
        used: set[int] = set()
        values, wrong, exact = [], [], []
        for column, field in zip(self.columns, self.out, strict=False):
            index = by_name.get(column.name.lower())
            if index is None:
                values.append(pa.nulls(n, field.type))
                continue
            used.add(index)
            converted = convert(part.column(index), field.type)
            values.append(converted.values)
            if converted.wrong is not None:
                wrong.append((column.name, part.schema.field(index).type, converted.wrong))
            if converted.inexact is not None:
                exact.append((column.name, part.column(index), converted.inexact))
        extra = [i for i in range(part.num_columns) if i not in used]
        wrong_in: list[list[str]] = [[] for _ in range(n)]
        for name, kind, mask in wrong:
            for r in _true(mask):
                wrong_in[r].append(f"{name} (file has {kind})")
        missing_in: list[list[str]] = [[] for _ in range(n)]
        for column, array in zip(self.columns, values, strict=False):
            if column.required:
                for r in _true(array.is_null()):
                    missing_in[r].append(column.name)
        errors = [  # as for JSON lines: a wrong type first, else what is missing
            f"wrong type for: {', '.join(w)}"
            if w
            else f"missing required field(s): {', '.join(m)}"
            if m
            else None
            for w, m in zip(wrong_in, missing_in, strict=True)
        ]
        rescued: list[dict[str, Any] | None] = [None] * n
        for name, original, mask in exact:
            for r in _true(mask):
                rescued[r] = {**(rescued[r] or {}), name: str(original[r])}
        if extra:
            kept = {part.schema.names[i]: part.column(i).to_pylist() for i in extra}
            for r in range(n):
                found = {k: v[r] for k, v in kept.items() if v[r] is not None}
                if found:
                    rescued[r] = {**found, **(rescued[r] or {})}
        failed = [r for r in range(n) if errors[r] is not None]
        raw: list[str | None] = [None] * n
        if failed:
            whole = part.to_pylist()
            for r in failed:
                raw[r] = _json(whole[r])
        for r, found in enumerate(rescued):
            rescued[r] = _json(found) if found else None  # type: ignore[call-overload]
        return self.batch(values, raw, errors, rescued, landed, n)

    def error_row(self, reason: str, landed: tuple[Any, ...]) -> pa.RecordBatch:
        values = [pa.nulls(1, field.type) for field in list(self.out)[: len(self.columns)]]
        return self.batch(values, [None], [reason], [None], landed, 1)

    def batch(
        self,
        values: list[pa.Array],
        raw: list[str | None],
        errors: list[str | None],
        rescued: list[Any],
        landed: tuple[Any, ...],
        n: int,
    ) -> pa.RecordBatch:
        path, arrival, size = landed
        tail = [
            pa.array(raw, pa.string()),
            pa.array(errors, pa.string()),
            pa.array(rescued, pa.string()),
            pa.array([path] * n, pa.string()),
            pa.array([arrival] * n, self.out.field(ARRIVAL_TIME).type),
            pa.array([size] * n, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays([*values, *tail], schema=self.out)


class Converted:
    """A file's column in the declared type: ``wrong`` marks values that do not convert (null
    now), ``inexact`` values kept with less precision (timestamps finer than microseconds)."""

    def __init__(self, values: pa.Array, wrong: pa.Array | None = None, inexact: pa.Array | None = None):
        self.values, self.wrong, self.inexact = values, wrong, inexact


def convert(values: pa.Array, target: pa.DataType) -> Converted:
    """``values`` in ``target``: as they are, converted exactly, or marked (see :class:`Converted`)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    source = values.type
    if source == target:
        return Converted(values)
    try:
        return Converted(pc.cast(values, target))  # every value exactly (Arrow's safe cast)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    if pa.types.is_string(source) or pa.types.is_large_string(source):
        return _per_value(values, target)
    try:
        cast = pc.cast(values, target, safe=False)
        back = pc.cast(cast, source, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # no conversion at all: every value is wrong
        return Converted(pa.nulls(len(values), target), wrong=values.is_valid())
    differs = pc.fill_null(pc.not_equal(back, values), False)
    if pa.types.is_floating(source):
        differs = pc.and_(differs, pc.invert(pc.fill_null(pc.is_nan(values), False)))
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        return Converted(cast, inexact=differs)  # sub-microsecond digits: kept in _rescued_data
    return Converted(pc.if_else(differs, pa.scalar(None, target), cast), wrong=differs)


def _per_value(values: pa.Array, target: pa.DataType) -> Converted:
    """Text values one by one: those that convert exactly, and the others marked wrong."""
    out: list[Any] = []
    wrong: list[bool] = []
    for value in values:
        try:
            out.append(pc.cast(pa.array([value.as_py()], values.type), target)[0].as_py())
            wrong.append(False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
            wrong.append(True)
    return Converted(pa.array(out, target), wrong=pa.array(wrong))


def _true(mask: pa.Array) -> list[int]:
    return pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()


def _plain(value: Any) -> Any:
    """A value JSON can hold, keeping numbers numbers and times as ISO text."""
    if isinstance(
        value, (datetime.datetime, datetime.date, datetime.time, decimal.Decimal, datetime.timedelta)
    ):
        return str(value) if not isinstance(value, (datetime.datetime, datetime.date)) else value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(type(value).__name__)


def _json(value: Any) -> str:
    return json.dumps(value, default=_plain, ensure_ascii=False, separators=(",", ":"))
