"""Where bronze rows come from (landing files, Kafka topics) and static reference data (lookups)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar, Literal

from attrs import field, frozen

from lakehouse.spec.durations import NAME, SpecError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

IngestKind = Literal["files", "kafka"]

# What bronze keeps beside the parsed columns (the bronze contract; ``lakehouse.sources`` fills it).
PARSE_ERROR = "_parse_error"  # why a line could not be read (the row stays in bronze)
RAW_RECORD = "_raw_record"  # the line as received, when it could not be read
RESCUED = "_rescued_data"  # keys outside the schema, as JSON
SOURCE_FILE = "_source_file"  # the landing file a line came from
ARRIVAL_TIME = "_arrival_time"  # when it landed: the file's modification time, the Kafka timestamp
INGESTED_AT = "_ingested_at"  # when bronze wrote it
BRONZE_METADATA = (RAW_RECORD, PARSE_ERROR, RESCUED, SOURCE_FILE, ARRIVAL_TIME, INGESTED_AT)
LANDED = (SOURCE_FILE, ARRIVAL_TIME, INGESTED_AT)  # where and when a row landed, not what it says


def names(value: str | Sequence[str]) -> tuple[str, ...]:
    """Converter of name lists: one name or several, stored as a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


@frozen
class Column:
    name: str
    type: str
    required: bool


def ddl_columns(ddl: str) -> tuple[Column, ...]:
    """Top-level columns of a Spark DDL schema string (``NOT NULL`` marks a required field)."""
    parts, depth, current = [], 0, []
    for char in ddl:
        depth += char in "<("
        depth -= char in ">)"
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    columns = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        tokens = part.split(None, 1)
        if len(tokens) != 2:
            raise SpecError(f"schema column {part!r} needs a name and a type, e.g. 'signal DOUBLE'")
        name, rest = tokens[0].strip("`"), tokens[1].strip()
        required = bool(re.search(r"\bNOT\s+NULL\s*$", rest, re.IGNORECASE))
        type_ = re.sub(r"\s+NOT\s+NULL\s*$", "", rest, flags=re.IGNORECASE)
        columns.append(Column(name, type_, required))
    return tuple(columns)


DEBEZIUM_SOURCE = "lsn BIGINT, ts_ms BIGINT"


def debezium_schema(row: str, source: str = DEBEZIUM_SOURCE) -> str:
    """The schema (Spark DDL) of a Debezium change event whose row has the columns of ``row``
    (DDL), as the JSON converter writes it without schemas: ``op``, ``before`` and ``after`` (the
    row before and after the change), ``source`` (its fields in ``source``, DDL: the position in
    the source's log and the commit time by default) and ``ts_ms``. Bronze tables of change feeds
    declare it as their source schema; ``Scd1``/``Scd2`` tables read them."""
    image = ", ".join(f"`{c.name}`: {c.type}" for c in ddl_columns(row))
    origin = ", ".join(f"`{c.name}`: {c.type}" for c in ddl_columns(source))
    return f"op STRING, before STRUCT<{image}>, after STRUCT<{image}>, source STRUCT<{origin}>, ts_ms BIGINT"


@frozen
class JsonFiles:
    """Bronze source: JSON-lines files dropped in ``<root>/landing/<pipeline>/<path>/``.

    ``schema`` is a Spark DDL string; ``NOT NULL`` fields are required, and a line missing one,
    with a value of the wrong type, or that is not JSON, lands in bronze with a parse error.
    A line longer than ``max_line_bytes`` is not read (a file holding one huge line must not
    exhaust memory); bronze gets a row saying how many bytes of the file were skipped.
    """

    kind: ClassVar[IngestKind] = "files"
    schema: str
    path: str | None = None
    max_files_per_trigger: int = 100
    max_line_bytes: int = 16 * 1024 * 1024

    def __attrs_post_init__(self) -> None:
        if not ddl_columns(self.schema):
            raise SpecError("JsonFiles.schema is empty; give a DDL string like 'id STRING NOT NULL'")
        if not 0 < self.max_line_bytes < 2**31:
            raise SpecError("JsonFiles.max_line_bytes must be between 1 byte and 2 GiB")

    @property
    def columns(self) -> tuple[Column, ...]:
        return ddl_columns(self.schema)


@frozen
class KafkaTopic:
    """Bronze source: JSON documents in the values of Kafka topic(s), read with Spark's
    Structured Streaming Kafka source.

    Bronze keeps each record's Kafka coordinates (``_kafka_key``, ``_kafka_value``,
    ``_kafka_topic``, ``_kafka_partition``, ``_kafka_offset``, ``_kafka_timestamp``) next to the
    parsed ``schema`` columns (parsed like :class:`JsonFiles` lines: a bad value stays in bronze
    with ``_parse_error``). Offsets live in the flow's checkpoint and every micro-batch is
    committed once (``lakehouse.delta.append_once``), so a crash never loses or duplicates a record.

    - ``topics``: one or more topic names.
    - ``starting_offsets``: where a new checkpoint starts: ``earliest``, ``latest``, or Spark's
      JSON per-partition form. A running flow resumes from its checkpoint, whatever this says.
    - ``max_offsets_per_trigger``: at most this many records per micro-batch (all topics).
    - ``bootstrap_servers``: default ``LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS`` (deployment, not
      declaration, see :meth:`Pipeline.configured`); ``options``: more ``kafka.*`` consumer
      options (security, ...).
    """

    kind: ClassVar[IngestKind] = "kafka"
    schema: str
    topics: tuple[str, ...] = field(converter=names)
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = 10000
    bootstrap_servers: str | None = None
    options: Mapping[str, str] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if not ddl_columns(self.schema):
            raise SpecError("KafkaTopic.schema is empty; give a DDL string like 'id STRING NOT NULL'")
        if not self.topics or not all(re.match(r"^[A-Za-z0-9._-]+$", t) for t in self.topics):
            raise SpecError(
                f"KafkaTopic.topics {list(self.topics)!r}: give one or more topic names "
                "(letters, digits, '.', '_', '-')"
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise SpecError("KafkaTopic.max_offsets_per_trigger must be a positive number of records")
        for key in self.options:
            if not key.startswith("kafka."):
                raise SpecError(f"KafkaTopic.options key {key!r}: Kafka client options start with 'kafka.'")

    @property
    def columns(self) -> tuple[Column, ...]:
        return ddl_columns(self.schema)


Source = JsonFiles | KafkaTopic


def sources(value: Source | Sequence[Source] | None) -> tuple[Source, ...]:
    """Converter of ``Table(source=...)``: one source, or alternatives (the first is the default)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, (JsonFiles, KafkaTopic)) else tuple(value)


@frozen
class Lookup:
    """Static reference data joined to streams (stream-static join), read fresh by every run.

    Lives in ``<root>/reference/<pipeline>/<path>`` (default ``<name>.csv``).
    """

    name: str
    schema: str
    format: Literal["csv", "json", "parquet", "delta"] = "csv"
    path: str | None = None
    options: Mapping[str, str] = field(factory=lambda: {"header": "true"})

    def __attrs_post_init__(self) -> None:
        if not NAME.match(self.name):
            raise SpecError(f"lookup name {self.name!r} must be lower_snake_case")
        ddl_columns(self.schema)

    @property
    def file(self) -> str:
        return self.path or f"{self.name}.{self.format}"
