"""The pipeline declaration API: tables, their sources and upstreams, and how they are written.

A pipeline is declared once, in plain Python with no Spark import, so that Airflow can read it
at DAG-parse time. Transforms are named by reference (``"transforms:clean_events"``, relative
to the pipeline's package) and resolved only by the runners, which import pyspark.

Everything is validated when the objects are built: a mistake is reported on load with what is
wrong, where, and how to fix it, never halfway through a stream.

=================  =====================================================================
``sources``        ``JsonFiles``, ``CsvFiles``, ``ParquetFiles``, ``AvroFiles``, ``KafkaTopic``,
                   ``DeltaTable`` (bronze; ``Source``: a kind of your own), ``Lookup`` (reference data)
``modes``          ``Append``, ``Upsert``, ``Aggregate`` (+ ``Window``), ``Scd1``, ``Scd2``,
                   ``Recompute``: how a table is written
``kinds``          ``Ingest``, ``StreamingTable``, ``ApplyChanges``, ``MaterializedView``,
                   ``RealtimeFlow``: a table, declared by its kind (each returns a ``Table``,
                   the model runners read)
``sinks``          ``KafkaSink``: where a real-time flow sends its records
``table``          ``Table``, ``Upstream``, ``State``
``models``         ``Model``: a model trained from a table, scoring another
``pipeline``       ``Pipeline``: the graph of tables, checked as a whole
``expectations``   ``gxe``: Great Expectations declared by name (also ``lakehouse.quality.gxe``)
``freshness``      ``Freshness``: an objective on how fresh a table's data is
``durations``      ``SpecError`` and the ``"10 minutes"`` duration syntax
=================  =====================================================================
"""

from lakehouse.spec.durations import SpecError, parse_duration
from lakehouse.spec.expectations import Expectation, gxe
from lakehouse.spec.freshness import Freshness
from lakehouse.spec.kinds import ApplyChanges, Ingest, MaterializedView, RealtimeFlow, StreamingTable
from lakehouse.spec.models import Model
from lakehouse.spec.modes import (
    Aggregate,
    Append,
    ChangeMode,
    Recompute,
    Scd1,
    Scd2,
    Upsert,
    Window,
    WriteMode,
)
from lakehouse.spec.pipeline import Pipeline
from lakehouse.spec.sinks import KafkaSink
from lakehouse.spec.sources import (
    AvroFiles,
    Column,
    CsvFiles,
    DeltaTable,
    JsonFiles,
    KafkaTopic,
    Lookup,
    ParquetFiles,
    Source,
    ddl_columns,
    debezium_schema,
)
from lakehouse.spec.table import LAYERS, State, Table, TransformRef, Upstream, changes_name, quarantine_name

__all__ = [
    "LAYERS",
    "Aggregate",
    "Append",
    "ApplyChanges",
    "AvroFiles",
    "ChangeMode",
    "Column",
    "CsvFiles",
    "DeltaTable",
    "Expectation",
    "Freshness",
    "Ingest",
    "JsonFiles",
    "KafkaSink",
    "KafkaTopic",
    "Lookup",
    "MaterializedView",
    "Model",
    "ParquetFiles",
    "Pipeline",
    "RealtimeFlow",
    "Recompute",
    "Scd1",
    "Scd2",
    "Source",
    "SpecError",
    "State",
    "StreamingTable",
    "Table",
    "TransformRef",
    "Upsert",
    "Upstream",
    "Window",
    "WriteMode",
    "changes_name",
    "ddl_columns",
    "debezium_schema",
    "gxe",
    "parse_duration",
    "quarantine_name",
]
