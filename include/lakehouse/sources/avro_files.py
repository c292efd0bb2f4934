"""Reading ``AvroFiles``: landing Avro object container files, each decoded with the writer
schema it carries, then held to the bronze contract exactly as Parquet files are
(:class:`lakehouse.sources.parquet_files.Decoder`: columns by name, exact conversions,
``_rescued_data``, parse errors, an unreadable file as one row).

Why not Spark's ``spark-avro`` reader: like its Parquet reader it applies one schema to every
file of a stream, so a field the declaration does not name is dropped silently and a field of
another type fails the query; Avro files say their own schema (a Kafka Connect sink, Debezium's
or Spark's own exports), so each is read with it (``fastavro``, every codec Spark and Kafka
Connect write: null, deflate, snappy, zstandard, bzip2, xz).

Avro types become Arrow types by the writer schema: ``int``/``long`` -> 32/64-bit integers,
``float``/``double``, ``string``/``enum``/``uuid`` -> text, ``bytes``/``fixed`` -> binary,
``boolean``, ``date``, ``timestamp-millis``/``-micros``/``-nanos`` (UTC) and their ``local-``
forms (no zone, read as UTC), ``decimal``, ``time-*``, records -> structs, arrays, maps; a union
of ``null`` and one type is that type, nullable; any other union (and a value a type cannot hold)
is the value as JSON text, which converts to a declared type where it is exactly one.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import fastavro
import pyarrow as pa
from fastavro.schema import expand_schema

from lakehouse.sources.parquet_files import (
    ROWS_PER_BATCH,
    UNREADABLE,
    Decoder,
    ParquetFilesReader,
    json_text,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from lakehouse.spec.sources import AvroFiles

# what fastavro raises on a file that is not Avro, is cut short, or holds a block it cannot
# decode (a codec's own error included: zlib, cramjam, lzma, bz2 raise these or ValueError)
NOT_AVRO = (*UNREADABLE, EOFError, StopIteration, IndexError, KeyError, TypeError, zlib.error, UnicodeError)
_PRIMITIVE: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL: dict[str, pa.DataType] = {
    "date": pa.date32(),
    "timestamp-millis": pa.timestamp("us", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "timestamp-nanos": pa.timestamp("ns", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("us"),
    "local-timestamp-micros": pa.timestamp("us"),
    "local-timestamp-nanos": pa.timestamp("ns"),
    "time-millis": pa.time64("us"),
    "time-micros": pa.time64("us"),
    "uuid": pa.string(),
}
AS_JSON = pa.string()  # the type of a value no Arrow type of its writer schema holds (see _column)


class AvroDecoder(Decoder):
    format = "Avro"
    unreadable = NOT_AVRO

    def parts(self, content: pa.Buffer) -> Iterator[pa.RecordBatch]:
        records = fastavro.reader(pa.BufferReader(content))  # reads the header: raises if not Avro
        schema = expand_schema(records.writer_schema)
        fields = (
            schema.get("fields", []) if isinstance(schema, dict) and schema.get("type") == "record" else None
        )
        return _batches(records, fields, schema)


class AvroFilesReader(ParquetFilesReader):
    """Avro landing files: Parquet's reading (whole files, ``binaryFile``), Avro's decoding."""

    source: AvroFiles  # type: ignore[assignment]
    decoder_class = AvroDecoder


def _batches(records: Any, fields: list[dict[str, Any]] | None, schema: Any) -> Iterator[pa.RecordBatch]:
    """The file's records as record batches (a file of non-record values: one column, ``value``).
    The records read before a damaged block are yielded before its error is raised."""
    records = iter(records)
    while True:
        chunk: list[Any] = []
        failure: Exception | None = None
        try:
            for record in records:
                chunk.append(record)
                if len(chunk) == ROWS_PER_BATCH:
                    break
        except NOT_AVRO as exc:
            failure = exc
        if chunk:
            yield _batch(chunk, fields, schema)
        if failure is not None:
            raise failure
        if len(chunk) < ROWS_PER_BATCH:
            return


def _batch(chunk: list[Any], fields: list[dict[str, Any]] | None, schema: Any) -> pa.RecordBatch:
    if fields is None:
        return pa.RecordBatch.from_arrays([_column(chunk, schema)], names=["value"])
    columns = [_column([r.get(f["name"]) for r in chunk], f["type"]) for f in fields]
    return pa.RecordBatch.from_arrays(columns, names=[f["name"] for f in fields])


def arrow_type(schema: Any) -> pa.DataType:
    """The Arrow type of an (expanded) Avro schema; :data:`AS_JSON` for a union of several types."""
    if isinstance(schema, list):
        types = [s for s in schema if s != "null"]
        return arrow_type(types[0]) if len(types) == 1 else AS_JSON
    if isinstance(schema, str):
        return _PRIMITIVE.get(schema, AS_JSON)
    logical = schema.get("logicalType")
    if logical == "decimal" and schema.get("precision", 0) <= 38:
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    kind = schema.get("type")
    if kind == "record":
        return pa.struct([(f["name"], arrow_type(f["type"])) for f in schema["fields"]])
    if kind == "array":
        return pa.list_(arrow_type(schema["items"]))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"]))
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    return arrow_type(kind) if isinstance(kind, (str, list)) else AS_JSON


def _column(values: list[Any], schema: Any) -> pa.Array:
    """One field's values in its Arrow type; as JSON text where that type cannot hold them (a
    union of several types, a logical type fastavro leaves as a number)."""
    kind = arrow_type(schema)
    if pa.types.is_timestamp(kind) and kind.unit == "ns":  # fastavro leaves nanoseconds as ints
        try:
            return pa.array(values, pa.int64()).cast(kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    try:  # (a union's values of one type in this chunk too: text, or not text, then JSON below)
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    return pa.array([None if v is None else _json_text(v) for v in values], AS_JSON)


def _json_text(value: Any) -> str:
    """A value as JSON text, a string as itself (so that text numbers convert like Parquet's)."""
    return value if isinstance(value, str) else json_text(value)
