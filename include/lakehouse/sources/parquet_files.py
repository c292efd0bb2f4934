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
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
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
UNREADABLE = (pa.ArrowException, OSError, ValueError)  # what Arrow raises for a damaged file


class Decoder:
    """What runs on the executors: landing files (bytes and metadata) -> bronze rows (Arrow).

    A kind of self-describing file (Avro) is a subclass naming its ``format`` and reading a file
    into record batches (:meth:`parts`): the contract (columns by name, exact conversions,
    ``_rescued_data``, parse errors, an unreadable file as one row) is this class's."""

    format = "Parquet"
    unreadable: tuple[type[Exception], ...] = UNREADABLE  # what reading a damaged file raises

    def __init__(self, columns: tuple[Column, ...], out: pa.Schema) -> None:
        self.columns = columns
        self.out = out

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            contents = batch.column(CONTENT)
            metadata = batch.select([SOURCE_FILE, ARRIVAL_TIME, FILE_SIZE])
            for i, content in enumerate(contents):
                yield from self.file(content.as_buffer(), metadata.slice(i, 1))

    def file(self, content: pa.Buffer | None, landed: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """One file's rows, then (if its bytes could not all be read) a row saying why."""
        read = 0  # only reading is tried: a fault in decoding is the platform's, not the file's
        try:
            parts = self.parts(content if content is not None else pa.py_buffer(b""))
        except self.unreadable as exc:
            yield self.error_row(unreadable(exc, read, self.format), landed)
            return
        while True:
            try:
                part = next(parts, None)
            except self.unreadable as exc:
                yield self.error_row(unreadable(exc, read, self.format), landed)
                return
            if part is None:
                return
            yield self.rows(part, landed)
            read += part.num_rows

    def parts(self, content: pa.Buffer) -> Iterator[pa.RecordBatch]:
        """A file's rows, :data:`ROWS_PER_BATCH` at a time, with the file's own schema."""
        return pq.ParquetFile(pa.BufferReader(content)).iter_batches(batch_size=ROWS_PER_BATCH)

    def rows(self, part: pa.RecordBatch, landed: pa.RecordBatch) -> pa.RecordBatch:
        """A decoded part of a file as bronze rows. Only the rows with something to say (an
        error) are handled one by one; ``_rescued_data`` is built as JSON text by Arrow."""
        n = part.num_rows
        by_name = {name.lower(): i for i, name in enumerate(part.schema.names)}
        used: set[int] = set()
        values: list[pa.Array] = []
        kept: list[tuple[str, pa.Array]] = []  # (key, JSON value or null) for _rescued_data
        wrong: dict[int, list[str]] = {}
        for column, field in zip(self.columns, self.out, strict=False):
            index = by_name.get(column.name.lower())
            if index is None:
                values.append(pa.nulls(n, field.type))
                continue
            used.add(index)
            original = part.column(index)
            converted = convert(original, field.type)
            values.append(converted.values)
            if converted.wrong is not None:
                for r in _true(converted.wrong):
                    wrong.setdefault(r, []).append(f"{column.name} (file has {original.type})")
            if converted.inexact is not None:  # the exact value, where digits were cut
                exact = pc.if_else(converted.inexact, json_values(original), pa.scalar(None, pa.string()))
                kept.append((column.name, exact))
        kept[:0] = [
            (part.schema.names[i], json_values(part.column(i)))
            for i in range(part.num_columns)
            if i not in used
        ]
        missing: dict[int, list[str]] = {}
        for column, array in zip(self.columns, values, strict=False):
            if column.required and array.null_count:
                for r in _true(array.is_null()):
                    if r not in wrong:
                        missing.setdefault(r, []).append(column.name)
        errors: list[str | None] = [None] * n
        raw: list[str | None] = [None] * n
        for r, names in wrong.items():  # as for JSON lines: a wrong type first, else what is missing
            errors[r] = f"wrong type for: {', '.join(names)}"
        for r, names in missing.items():
            errors[r] = f"missing required field(s): {', '.join(names)}"
        for r in (*wrong, *missing):
            raw[r] = json_text(part.slice(r, 1).to_pylist()[0])  # the row as the file has it
        rescued = json_object(kept)
        failed = bool(wrong or missing)
        return self.batch(values, raw if failed else None, errors if failed else None, rescued, landed, n)

    def error_row(self, reason: str, landed: pa.RecordBatch) -> pa.RecordBatch:
        values = [pa.nulls(1, field.type) for field in list(self.out)[: len(self.columns)]]
        return self.batch(values, None, [reason], None, landed, 1)

    def batch(
        self,
        values: list[pa.Array],
        raw: list[str | None] | None,
        errors: list[str | None] | None,
        rescued: pa.Array | None,
        landed: pa.RecordBatch,
        n: int,
    ) -> pa.RecordBatch:
        """The bronze rows: ``values`` (the declared columns), what the contract adds (``None``:
        null in every row) and the file's metadata (``landed``, one row) on each."""
        text = pa.string()
        meta = landed.take(pa.array(np.zeros(n, dtype=np.int64)))
        tail = [
            pa.nulls(n, text) if raw is None else pa.array(raw, text),
            pa.nulls(n, text) if errors is None else pa.array(errors, text),
            pa.nulls(n, text) if rescued is None else rescued,
            *[
                column.cast(field.type)
                for column, field in zip(meta.columns, list(self.out)[-3:], strict=True)
            ],
        ]
        return pa.RecordBatch.from_arrays([*values, *tail], schema=self.out)


class ParquetFilesReader(LandingFilesReader):
    source: ParquetFiles
    decoder_class: ClassVar[type[Decoder]] = Decoder  # what decodes its files on the executors

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
        decoder = self.decoder_class(columns, to_arrow_schema(out, timezone="UTC"))
        files = frame.select(CONTENT, *file_metadata(frame))
        return files.mapInArrow(decoder, out).withColumn(INGESTED_AT, F.current_timestamp())

    def deliver(self, lake: Lake, pipeline: Pipeline, table: Table, name: str, lines: Iterable[str]) -> Path:
        raise ValueError(
            f"{table.name} reads {self.decoder_class.format} files; generators write lines (JSON, CSV, Kafka)"
        )


def json_values(values: pa.Array) -> pa.Array:
    """Each value as JSON text (null stays null), by Arrow: numbers and booleans as they are,
    text quoted and escaped, times as quoted text; any other type (nested, binary), or text with
    control characters Arrow does not escape here, one by one."""
    kind = values.type
    if pa.types.is_integer(kind) or pa.types.is_decimal(kind) or pa.types.is_boolean(kind):
        return pc.cast(values, pa.string())
    if pa.types.is_floating(kind):
        text = pc.cast(values, pa.string())
        finite = pc.fill_null(pc.is_finite(values), True)
        return pc.if_else(finite, text, _quoted(text))  # NaN is no JSON number: quoted
    if pa.types.is_temporal(kind):
        return _quoted(pc.cast(values, pa.string()))
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and not pc.any(
        pc.match_substring_regex(values, "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]")
    ).as_py():
        text = pc.cast(values, pa.string())
        for plain, escaped in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
            text = pc.replace_substring(text, plain, escaped)
        return _quoted(text)
    return pa.array([None if v is None else json_text(v) for v in values.to_pylist()], pa.string())


def json_object(kept: list[tuple[str, pa.Array]]) -> pa.Array | None:
    """``{"key": value, ...}`` of the non-null ``kept`` values of each row (null: none)."""
    if not kept:
        return None
    # ',"key":value' where there is a value, else '' (Arrow's join skipping nulls drops a row
    # whose pieces are all null), then all of a row's pieces, less the first comma
    pieces = [
        pc.fill_null(pc.binary_join_element_wise(pa.scalar("," + json_text(key) + ":"), value, ""), "")
        for key, value in kept
    ]
    joined = pc.binary_join_element_wise(*pieces, "") if len(pieces) > 1 else pieces[0]
    whole = pc.binary_join_element_wise(
        pa.scalar("{"), pc.utf8_slice_codeunits(joined, 1), pa.scalar("}"), ""
    )
    return pc.if_else(pc.equal(joined, ""), pa.scalar(None, pa.string()), whole)


def _quoted(text: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(pa.scalar('"'), text, pa.scalar('"'), "")


def unreadable(exc: Exception, read: int, format: str = "Parquet") -> str:
    """Why a file (or the rest of it, after ``read`` rows) could not be read as ``format``."""
    reason = f"{type(exc).__name__}: {str(exc).strip()}"
    if read:
        return f"not readable as {format} after its first {read:,} rows ({reason})"
    return f"not a readable {format} file ({reason}); the file is in no other row"


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


def json_text(value: Any) -> str:
    """A value as compact JSON (times as ISO text, bytes as base64)."""
    return json.dumps(value, default=_plain, ensure_ascii=False, separators=(",", ":"))
