"""Bronze ingestion: read a source (landing files or Kafka topics) as a stream or a batch and
parse it against its schema.

Parsing never drops a line. A line that is not JSON, has a value of the wrong type, or lacks
a required (``NOT NULL``) field is kept in bronze with ``_raw_record`` (the line as received)
and ``_parse_error`` (why); keys outside the schema are kept as JSON in ``_rescued_data``.
Such rows stay in bronze: downstream flows only ever see rows whose ``_parse_error`` is null.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.spec import Column, JsonFiles, KafkaTopic, Lookup, Pipeline, SpecError, Table

if TYPE_CHECKING:
    from lakehouse.lake import Lake

PARSE_ERROR = "_parse_error"
RAW_RECORD = "_raw_record"
RESCUED = "_rescued_data"
SOURCE_FILE = "_source_file"
INGESTED_AT = "_ingested_at"
BRONZE_METADATA = (RAW_RECORD, PARSE_ERROR, RESCUED, SOURCE_FILE, INGESTED_AT)
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


def read_source(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table, *, streaming: bool
) -> DataFrame:
    """The parsed bronze rows of ``table``'s source (landing JSON-lines files or Kafka)."""
    if isinstance(table.source, KafkaTopic):
        return read_kafka(spark, table, streaming=streaming)
    source = table.source
    assert isinstance(source, JsonFiles), f"{table.name} has no file source"
    path = landing_path(lake, pipeline, table)
    _ensure_dir(path)
    if streaming:
        reader = spark.readStream.option("maxFilesPerTrigger", source.max_files_per_trigger)
    else:
        reader = spark.read
    lines = (
        reader.format("text")
        .option("ignoreMissingFiles", "true")  # a file deleted after listing is not an error
        .load(path)
        .select("value", F.col("_metadata.file_path").alias(SOURCE_FILE))
        .where(F.trim("value") != "")
    )
    return parse_json(lines, source.columns)


def kafka_servers(source: KafkaTopic, table: Table) -> str:
    """The brokers of a Kafka source (its own, or the deployment's: ``Pipeline.configured``)."""
    if not source.bootstrap_servers:
        raise SpecError(
            f"table {table.name!r} reads Kafka topic(s) {', '.join(source.topics)} but no broker is "
            "configured: set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=host:9092 (or bootstrap_servers=)"
        )
    return source.bootstrap_servers


def read_kafka(spark: SparkSession, table: Table, *, streaming: bool) -> DataFrame:
    """Kafka records -> parsed bronze rows, each with its key, value, topic, partition, offset
    and timestamp. Streams resume from the offsets in their checkpoint; a batch (backfill) reads
    every retained record, from the earliest offsets to the latest."""
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
        reader = reader.option("startingOffsets", "earliest").option("endingOffsets", "latest")
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
    )
    return parse_json(records, source.columns, carry=KAFKA_COLUMNS)


def parse_json(
    lines: DataFrame, columns: tuple[Column, ...], carry: tuple[str, ...] = (SOURCE_FILE,)
) -> DataFrame:
    """``value`` (one JSON document per row) -> typed columns + bronze metadata columns, with
    the ``carry`` columns (where the row came from) kept as they are."""
    ddl = ", ".join(f"`{c.name}` {c.type}" for c in columns) + ", `_corrupt` STRING"
    parsed = F.from_json("value", ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    as_map = F.from_json("value", "map<string,string>")
    names = F.array(*[F.lit(c.name) for c in columns])
    df = lines.withColumn("_p", parsed).withColumn("_m", as_map)

    def present(name: str) -> SparkColumn:  # sent with a value (from the one parse into a map)
        return F.col("_m").getItem(name).isNotNull()

    mismatched = F.concat_ws(
        ", ", *[F.when(present(c.name) & F.col(f"_p.`{c.name}`").isNull(), F.lit(c.name)) for c in columns]
    )
    missing = F.concat_ws(
        ", ",
        *[
            F.when(F.col(f"_p.`{c.name}`").isNull() & ~present(c.name), F.lit(c.name))
            for c in columns
            if c.required
        ],
    )
    error = (
        F.when(F.col("_m").isNull(), F.lit("not a JSON object"))
        .when(mismatched != "", F.concat(F.lit("wrong type for: "), mismatched))
        .when(missing != "", F.concat(F.lit("missing required field(s): "), missing))
    )
    extra = F.map_filter("_m", lambda k, _v: ~F.array_contains(names, k))
    return df.select(
        *[F.col(f"_p.`{c.name}`").alias(c.name) for c in columns],
        F.when(error.isNotNull(), F.col("value")).alias(RAW_RECORD),
        error.alias(PARSE_ERROR),
        F.when(F.size(extra) > 0, F.to_json(extra)).alias(RESCUED),
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
