"""Reading ``DeltaTable``: a Delta table outside the pipeline as a stream of its changes (its
change data feed) or of its appended rows, and as a batch up to the version a stream consumed.

A stream of the change data feed reads every change from ``starting_version`` on; the batch
reads the same changes up to the version the stream consumed, so both give the same rows. A
stream of appends reads the table as it is at its start and then each appended file (commits
that change or delete rows are skipped); the batch reads the table as it was at the consumed
version: the same rows as long as the table is only appended to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse.sources.parse import listed
from lakehouse.sources.protocol import EVERYTHING, Bronze, Cut, SourceReader
from lakehouse.spec import SpecError
from lakehouse.spec.sources import (
    ARRIVAL_TIME,
    CHANGE_COLUMNS,
    INGESTED_AT,
    PARSE_ERROR,
    RAW_RECORD,
    RESCUED,
    SOURCE_FILE,
    DeltaTable,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.state.checkpoints import Checkpoint

NOTHING = -1  # the consumed version of a stream that has read nothing yet
CDF_PROPERTY = "delta.enableChangeDataFeed"


class DeltaTableReader(SourceReader):
    source: DeltaTable

    def location(self, bronze: Bronze) -> str:
        return bronze.lake.table(self.source.table) if self.source.table else str(self.source.path)

    def reads_changes(self, spark: SparkSession, path: str) -> bool:
        """Whether to read the table's change data feed: as declared, else if the table has it."""
        if self.source.change_data_feed is not None:
            return self.source.change_data_feed
        return table_properties(spark, path, self.source).get(CDF_PROPERTY, "").lower() == "true"

    def read(self, bronze: Bronze, *, streaming: bool, cut: Cut = EVERYTHING) -> DataFrame:
        spark, path = bronze.spark, self.location(bronze)
        changes = self.reads_changes(spark, path)
        version = cut.consumed
        if streaming:
            reader = spark.readStream.format("delta").option(
                "maxFilesPerTrigger", self.source.max_files_per_trigger
            )
            if changes:
                reader = reader.option("readChangeFeed", "true").option(
                    "startingVersion", self.source.starting_version
                )
            else:
                reader = reader.option("skipChangeCommits", "true")
            frame = reader.load(path)
        elif changes:
            reader = spark.read.format("delta").option("readChangeFeed", "true")
            reader = reader.option("startingVersion", self.source.starting_version)
            if version is not None and version >= self.source.starting_version:
                reader = reader.option("endingVersion", version)
            frame = reader.load(path)
        else:
            reader = spark.read.format("delta")
            if version is not None and version >= 0:
                reader = reader.option("versionAsOf", version)
            frame = reader.load(path)
        if (
            version is not None
            and not streaming
            and version < (self.source.starting_version if changes else 0)
        ):
            frame = frame.where(F.lit(False))  # nothing consumed: an empty read
        return self.bronze_rows(frame, path, changes=changes)

    def bronze_rows(self, frame: DataFrame, path: str, *, changes: bool) -> DataFrame:
        """The declared columns (cast to their types) and the bronze contract's columns."""
        columns = self.source.columns
        typed = [F.col(f"`{c.name}`").cast(c.type).alias(c.name) for c in columns]
        error = listed(
            "missing required field(s): ",
            [F.when(F.col(f"`{c.name}`").isNull(), F.lit(c.name)) for c in columns if c.required],
        )
        row = F.to_json(F.struct(*[F.col(f"`{c.name}`") for c in columns]))
        # a Delta stream of appends has no commit time per row (nor file metadata): when bronze read it
        arrival = F.col("_commit_timestamp") if changes else F.current_timestamp()
        return frame.select(
            *typed,
            F.when(error.isNotNull(), row).alias(RAW_RECORD),
            error.alias(PARSE_ERROR),
            F.lit(None).cast("string").alias(RESCUED),
            F.lit(path).alias(SOURCE_FILE),
            arrival.alias(ARRIVAL_TIME),
            *([F.col(name) for name in CHANGE_COLUMNS] if changes else []),
            F.current_timestamp().alias(INGESTED_AT),
        )

    def consumed(self, checkpoint: Checkpoint) -> Cut:
        """The last version of the table the stream read. A Delta offset names the last file it
        read (``index``; -1: none of ``reservoirVersion`` yet); a backfill reads this after the
        stream caught up (``availableNow``: every file of every version there was), so the
        version it names was read whole."""
        if not checkpoint.exists:
            return Cut(NOTHING)
        for offset in checkpoint.committed_offsets():
            if offset and "reservoirVersion" in offset:
                version, index = int(offset["reservoirVersion"]), int(offset.get("index", -1))
                return Cut(version if index >= 0 else version - 1)
        return Cut(NOTHING)


def table_properties(spark: SparkSession, path: str, source: DeltaTable) -> dict[str, str]:
    """The table's properties (``DESCRIBE DETAIL``); a clear error when there is no table."""
    try:
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()
    except Exception as exc:
        raise SpecError(
            f"DeltaTable source {source.label('', '')!r}: no Delta table at {path} ({type(exc).__name__}); "
            "create it first, or fix table=/path="
        ) from exc
    return dict(detail[0]["properties"] or {}) if detail else {}
