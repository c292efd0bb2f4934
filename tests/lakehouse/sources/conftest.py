"""Stream = batch for a source kind: the same input run as a stream to completion (availableNow)
and as a backfill over all time, in two lakes, read back row by row."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.run import coordination
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import ALL_TIME

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from pyspark.sql import SparkSession

    from lakehouse.spec import Pipeline

Rows = list[tuple[Any, ...]]


@pytest.fixture
def rows_of(spark: SparkSession) -> Callable[[Lake, str, Sequence[str]], Rows]:
    """``rows_of(lake, table, columns)``: those columns (SQL expressions) of every row of
    ``table``, as tuples in a fixed order (``sorted(..., key=str)``, as tests sort theirs)."""

    def rows(lake: Lake, table: str, columns: Sequence[str]) -> Rows:
        found = spark.read.format("delta").load(lake.table(table)).selectExpr(*columns).collect()
        return sorted((tuple(r) for r in found), key=str)

    return rows


@pytest.fixture
def stream_and_batch(spark: SparkSession, tmp_path: Path) -> Callable[..., tuple[Lake, Lake]]:
    """``run(pipeline, write_input)``: ``write_input(lake)`` into two lakes; the first run as
    streams to completion, the second backfilled over all time. Returns (streamed, backfilled)."""

    def run(pipeline: Pipeline, write_input: Callable[[Lake], None]) -> tuple[Lake, Lake]:
        streamed, backfilled = Lake(str(tmp_path / "streamed")), Lake(str(tmp_path / "backfilled"))
        for lake in (streamed, backfilled):
            write_input(lake)
        with StreamRunner(spark, streamed, pipeline) as runner:
            runner.run_incremental(pipeline.ordered())
        backfill(spark, backfilled, pipeline, ALL_TIME)
        return streamed, backfilled

    return run


@pytest.fixture
def backfill_beside_streams(spark: SparkSession) -> Callable[[Lake, Pipeline], None]:
    """``run(lake, pipeline)``: a backfill of all time the way operators run one beside the
    streams (``lakehouse.run.coordination``): catch the streams up, read each source as its stream
    consumed it (the kind's ``consumed``), recompute."""

    def run(lake: Lake, pipeline: Pipeline) -> None:
        settings = Settings(
            root=lake.root, lease_ttl_seconds=30, spark_master="local[2]", shuffle_partitions=2
        )
        coordination.backfill(spark, settings, pipeline, ALL_TIME)

    return run
