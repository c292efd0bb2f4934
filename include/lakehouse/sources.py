"""Bronze ingestion: read a source (landing files or Kafka topics) as a stream or a batch and
parse it against its schema.

Parsing never drops a line. A line that is not JSON, has a value of the wrong type, or lacks
a required (``NOT NULL``) field is kept in bronze with ``_raw_record`` (the line as received)
and ``_parse_error`` (why); keys outside the schema are kept as JSON in ``_rescued_data``.
Such rows stay in bronze: downstream flows only ever see rows whose ``_parse_error`` is null.

A line longer than the source's ``max_line_bytes`` is never loaded into memory (Hadoop's line
reader skips it); :class:`LandingAccounting` notices the bytes of the file that no row holds and
adds a row saying so, and counts the files that vanished before they could be read. Every row
carries its ``_arrival_time`` (the file's modification time, the Kafka record's timestamp), so a
line whose event time could not be read still belongs to a backfill slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse import storage
from lakehouse.spec import Column, JsonFiles, KafkaTopic, Lookup, Pipeline, SpecError, Table
from lakehouse.spec.sources import (
    ARRIVAL_TIME,
    INGESTED_AT,
    PARSE_ERROR,
    RAW_RECORD,
    RESCUED,
    SOURCE_FILE,
)

if TYPE_CHECKING:
    from lakehouse.lake import Lake

_FILE_SIZE, _LINE_BYTES = "_file_size", "_line_bytes"  # landing accounting, dropped before writing
ACCOUNTING_COLUMNS = (_FILE_SIZE, _LINE_BYTES)
_MAX_LINE = "mapreduce.input.linerecordreader.line.maxlength"

# What bronze keeps of every Kafka record, whatever its value holds.
KAFKA_COLUMNS = (
    "_kafka_key",
    "_kafka_value",
    "_kafka_topic",
    "_kafka_partition",
    "_kafka_offset",
    "_kafka_timestamp",
)


def landing_path(lake: Lake, pipeline: Pipeline, table: Table) -> str:
    assert isinstance(table.source, JsonFiles)
    return lake.landing(pipeline.name, table.source.path or table.short_name)


def _ensure_dir(path: str) -> None:
    if "://" not in path:
        Path(path).mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class Cut:
    """The part of a source a backfill reads: what the table's stream has consumed (see
    ``lakehouse.checkpoints``), so that the stream, resuming, reads exactly the rest. ``None``
    fields: everything there is; empty ones (``()``, ``""``): nothing."""

    files: tuple[str, ...] | None = None
    kafka_offsets: str | None = None


EVERYTHING = Cut()


def read_source(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    *,
    streaming: bool,
    cut: Cut = EVERYTHING,
) -> DataFrame:
    """The parsed bronze rows of ``table``'s source (landing JSON-lines files or Kafka)."""
    if isinstance(table.source, KafkaTopic):
        return read_kafka(spark, table, streaming=streaming, ending_offsets=cut.kafka_offsets)
    source = table.source
    assert isinstance(source, JsonFiles), f"{table.name} has no file source"
    path = landing_path(lake, pipeline, table)
    _ensure_dir(path)
    if streaming:
        reader = spark.readStream.option("maxFilesPerTrigger", source.max_files_per_trigger)
    else:
        reader = spark.read
    reader = (
        reader.format("text")
        .option("ignoreMissingFiles", "true")  # counted by LandingAccounting, not an error
        .option(_MAX_LINE, source.max_line_bytes)  # longer lines are skipped, never loaded
    )
    if cut.files is not None and not cut.files:
        reader = reader.schema("value STRING")  # nothing consumed: an empty read
    frame = reader.load(list(cut.files)) if cut.files else reader.load(path)
    lines = frame.select(
        "value",
        F.col("_metadata.file_path").alias(SOURCE_FILE),
        F.col("_metadata.file_modification_time").alias(ARRIVAL_TIME),
        F.col("_metadata.file_size").alias(_FILE_SIZE),
        (F.octet_length("value") + 1).alias(_LINE_BYTES),
    ).where(F.trim("value") != "")
    return parse_json(lines, source.columns, carry=(SOURCE_FILE, ARRIVAL_TIME, _FILE_SIZE, _LINE_BYTES))


@dataclass(frozen=True)
class LandedFile:
    path: str
    size: int | None  # None: the file is gone


@dataclass
class LandingAccounting:
    """Per batch of landing files (a micro-batch, or a backfill's read): a row for each file with
    bytes no row holds (a line over ``max_line_bytes`` was skipped), and the files that vanished
    before they were read. Needs the whole batch (every line of a file), so streams run it in
    ``foreachBatch`` and backfills on their read: the same rows either way."""

    source: JsonFiles
    vanished: list[str] = field(default_factory=list)

    def apply(self, rows: DataFrame, files: list[LandedFile]) -> DataFrame:
        """``rows`` of these ``files``, with a row for each file that lost a line; without the
        accounting columns."""
        self.vanished = [f.path for f in files if f.size is None]
        read = {
            r[SOURCE_FILE]: int(r["bytes"] or 0)
            for r in rows.groupBy(SOURCE_FILE).agg(F.sum(_LINE_BYTES).alias("bytes")).collect()
        }
        limit = self.source.max_line_bytes
        short = [(f.path, f.size - read.get(f.path, 0)) for f in files if f.size is not None]
        short = [(path, missing) for path, missing in short if missing > limit]
        out = rows.drop(_FILE_SIZE, _LINE_BYTES)
        if not short:
            return out
        spark = rows.sparkSession
        lost = spark.createDataFrame(short, f"{SOURCE_FILE} STRING, missing BIGINT").select(
            F.col(SOURCE_FILE),
            F.concat(
                F.lit(f"a line longer than {limit:,} bytes (max_line_bytes) was skipped; "),
                F.format_number("missing", 0),
                F.lit(" bytes of the file are in no row"),
            ).alias(PARSE_ERROR),
        )
        times = rows.select(SOURCE_FILE, ARRIVAL_TIME).dropDuplicates([SOURCE_FILE])
        lost = lost.join(times, SOURCE_FILE, "left").withColumn(INGESTED_AT, F.current_timestamp())
        return out.unionByName(lost, allowMissingColumns=True)

    def list_files(self, spark: SparkSession, paths: list[str]) -> list[LandedFile]:
        """Sizes of ``paths`` now (``None`` for those that are gone)."""
        return [LandedFile(path, storage.file_size(spark, path)) for path in paths]


def kafka_servers(source: KafkaTopic, table: Table) -> str:
    """The brokers of a Kafka source (its own, or the deployment's: ``Pipeline.configured``)."""
    if not source.bootstrap_servers:
        raise SpecError(
            f"table {table.name!r} reads Kafka topic(s) {', '.join(source.topics)} but no broker is "
            "configured: set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=host:9092 (or bootstrap_servers=)"
        )
    return source.bootstrap_servers


def read_kafka(
    spark: SparkSession, table: Table, *, streaming: bool, ending_offsets: str | None = None
) -> DataFrame:
    """Kafka records -> parsed bronze rows, each with its key, value, topic, partition, offset
    and timestamp. Streams resume from the offsets in their checkpoint; a batch (backfill) reads
    every retained record from the earliest offsets, to the latest or to ``ending_offsets``
    (``""``: none)."""
    source = table.source
    assert isinstance(source, KafkaTopic)
    reader = spark.readStream if streaming else spark.read
    reader = (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", kafka_servers(source, table))
        .option("subscribe", ",".join(source.topics))
        # a record deleted by retention before it was read is loss: fail loudly, never skip
        .option("failOnDataLoss", "true")
    )
    if streaming:
        reader = reader.option("startingOffsets", source.starting_offsets)
        if source.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", source.max_offsets_per_trigger)
    else:
        reader = reader.option("startingOffsets", "earliest").option(
            "endingOffsets", ending_offsets or "latest"
        )
    for key, value in source.options.items():
        reader = reader.option(key, value)
    records = reader.load().select(
        F.col("value").cast("string").alias("value"),
        F.col("key").cast("string").alias("_kafka_key"),
        F.col("value").cast("string").alias("_kafka_value"),
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("timestamp").alias(ARRIVAL_TIME),
    )
    if ending_offsets == "":  # nothing consumed yet (an empty Cut): an empty read
        records = records.where(F.lit(False))
    return parse_json(records, source.columns, carry=(*KAFKA_COLUMNS, ARRIVAL_TIME))


def parse_json(
    lines: DataFrame, columns: tuple[Column, ...], carry: tuple[str, ...] = (SOURCE_FILE,)
) -> DataFrame:
    """``value`` (one JSON document per row) -> typed columns + bronze metadata columns, with
    the ``carry`` columns (where the row came from) kept as they are.

    One parse into the schema does the work; every type mismatch makes it flag the row
    (``_corrupt``), so only flagged rows are parsed again, into a map, to say what is wrong.
    Unknown keys to rescue are found from the document's keys (a parse that skips values)."""
    ddl = ", ".join(f"`{c.name}` {c.type}" for c in columns) + ", `_corrupt` STRING"
    parsed = F.from_json("value", ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    as_map = F.from_json("value", "map<string,string>")  # evaluated only where used: flagged rows, rescues
    names = F.array(*[F.lit(c.name) for c in columns])
    df = lines.withColumn("_p", parsed).withColumn("_k", F.json_object_keys("value"))

    def typed(name: str) -> SparkColumn:  # the field as the schema parse read it
        return F.col(f"_p.`{name}`")

    def present(name: str) -> SparkColumn:  # sent with a value (JSON null is not a value)
        return as_map.getItem(name).isNotNull()

    def listed(label: str, names_: list[SparkColumn]) -> SparkColumn:
        text = F.concat_ws(", ", *names_)
        return F.when(text != "", F.concat(F.lit(label), text))

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
    unknown = F.size(F.array_except("_k", names)) > 0  # no lambda: a compiled expression
    extra = F.map_filter(as_map, lambda k, _v: ~F.array_contains(names, k))
    return df.select(
        *[typed(c.name).alias(c.name) for c in columns],
        F.when(error.isNotNull(), F.col("value")).alias(RAW_RECORD),
        error.alias(PARSE_ERROR),
        F.when(unknown, F.to_json(extra)).alias(RESCUED),
        *[F.col(name) for name in carry],
        F.current_timestamp().alias(INGESTED_AT),
    )


def read_lookup(spark: SparkSession, lake: Lake, pipeline: Pipeline, lookup: Lookup) -> DataFrame:
    """Static reference data, read as a batch (joined to streams as a stream-static join)."""
    path = lake.reference(pipeline.name, lookup.file)
    reader = spark.read.format(lookup.format)
    if lookup.format != "delta":
        reader = reader.schema(lookup.schema).options(**dict(lookup.options))
    return reader.load(path)
