"""Where bronze rows come from (one module per source kind) and static reference data (lookups).

=================  =====================================================================
``base``           the bronze contract (``PARSE_ERROR``, ...), DDL schemas, ``Source``
``json_files``     ``JsonFiles``: JSON-lines landing files
``csv_files``      ``CsvFiles``: CSV landing files
``parquet_files``  ``ParquetFiles``: Parquet landing files
``avro_files``     ``AvroFiles``: Avro landing files
``kafka``          ``KafkaTopic``: JSON values of Kafka topics
``delta_table``    ``DeltaTable``: a Delta table outside the pipeline, as a stream
``lookup``         ``Lookup``: reference data
=================  =====================================================================

A new kind is a :class:`Source` subclass naming its reader (``lakehouse.sources.SourceReader``).
"""

from lakehouse.spec.sources.avro_files import AvroFiles
from lakehouse.spec.sources.base import (
    ARRIVAL_TIME,
    BRONZE_METADATA,
    DEBEZIUM_SOURCE,
    INGESTED_AT,
    LANDED,
    PARSE_ERROR,
    RAW_RECORD,
    RESCUED,
    SOURCE_FILE,
    Column,
    LandingFiles,
    Source,
    ddl_columns,
    debezium_schema,
    deployed,
    names,
    sources,
)
from lakehouse.spec.sources.csv_files import CsvFiles
from lakehouse.spec.sources.delta_table import CHANGE_COLUMNS, DeltaTable
from lakehouse.spec.sources.json_files import JsonFiles
from lakehouse.spec.sources.kafka import KafkaTopic
from lakehouse.spec.sources.lookup import Lookup
from lakehouse.spec.sources.parquet_files import ParquetFiles

__all__ = [
    "ARRIVAL_TIME",
    "BRONZE_METADATA",
    "CHANGE_COLUMNS",
    "DEBEZIUM_SOURCE",
    "INGESTED_AT",
    "LANDED",
    "PARSE_ERROR",
    "RAW_RECORD",
    "RESCUED",
    "SOURCE_FILE",
    "AvroFiles",
    "Column",
    "CsvFiles",
    "DeltaTable",
    "JsonFiles",
    "KafkaTopic",
    "LandingFiles",
    "Lookup",
    "ParquetFiles",
    "Source",
    "ddl_columns",
    "debezium_schema",
    "deployed",
    "names",
    "sources",
]
