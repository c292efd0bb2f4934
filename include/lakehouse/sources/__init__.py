"""Bronze ingestion: each source kind is a plugin implementing :class:`SourceReader`.

=================  =====================================================================
``protocol``       ``SourceReader``, ``Cut``, ``reader_for``: what the runners call
``parse``          ``parse_json``: lines into a schema, never dropping one
``landing``        landing directories, file listings, ``LandingAccounting``
``json_files``     ``JsonFiles``          ``csv_files``      ``CsvFiles``
``parquet_files``  ``ParquetFiles``       ``kafka``          ``KafkaTopic``
``avro_files``     ``AvroFiles``         ``delta_table``    ``DeltaTable``
=================  =====================================================================

A declaration (``lakehouse.spec``) names its reader (``reader = "module:Class"``), so a kind of
your own is a ``lakehouse.spec.Source`` subclass and a ``SourceReader`` subclass, nothing else.
Static reference data (lookups) is read here too (:func:`read_lookup`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.sources.kafka import KAFKA_COLUMNS, kafka_servers
from lakehouse.sources.landing import LandedFile, LandingAccounting
from lakehouse.sources.parse import parse_json
from lakehouse.sources.protocol import EVERYTHING, Bronze, Cut, Prepared, SourceReader, reader_for
from lakehouse.spec.sources import ARRIVAL_TIME, INGESTED_AT, PARSE_ERROR, RAW_RECORD, RESCUED, SOURCE_FILE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Lookup, Pipeline

__all__ = [
    "ARRIVAL_TIME",
    "EVERYTHING",
    "INGESTED_AT",
    "KAFKA_COLUMNS",
    "PARSE_ERROR",
    "RAW_RECORD",
    "RESCUED",
    "SOURCE_FILE",
    "Bronze",
    "Cut",
    "LandedFile",
    "LandingAccounting",
    "Prepared",
    "SourceReader",
    "kafka_servers",
    "parse_json",
    "read_lookup",
    "reader_for",
]


def read_lookup(spark: SparkSession, lake: Lake, pipeline: Pipeline, lookup: Lookup) -> DataFrame:
    """Static reference data, read as a batch (joined to streams as a stream-static join)."""
    path = lake.reference(pipeline.name, lookup.file)
    reader = spark.read.format(lookup.format)
    if lookup.format != "delta":
        reader = reader.schema(lookup.schema).options(**dict(lookup.options))
    return reader.load(path)
