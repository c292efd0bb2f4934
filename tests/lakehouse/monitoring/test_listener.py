"""The drivers' listener records a query's start, each micro-batch's figures and its end (with the
error of a failed query) in ``ops.stream_progress``, from Spark's events as the JVM sends them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.monitoring.listener import ProgressRecorder
from lakehouse.monitoring.ops_tables import flush_all
from lakehouse.monitoring.progress import ProgressLog, query_name


def test_a_query_start_batches_and_failure_are_recorded(spark, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    landing = tmp_path / "in"
    landing.mkdir()
    (landing / "a.json").write_text('{"n": 1}\n{"n": 2}\n{"n": 3}\n')
    (landing / "b.json").write_text('{"n": 0}\n')
    recorder = ProgressRecorder(ProgressLog(lake), "p")
    spark.streams.addListener(recorder)
    try:
        seen: list[int] = []

        def sink(batch, batch_id: int) -> None:
            rows = batch.collect()  # one read: Spark counts a batch's input once per read
            if any(r.n == 0 for r in rows):
                raise ValueError("no zeros here")
            seen.append(len(rows))

        df = spark.readStream.schema("n int").option("maxFilesPerTrigger", 1).json(str(landing))
        query = (
            df.select(F.col("n")).writeStream.queryName(query_name("p", "silver.t"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .foreachBatch(sink).trigger(availableNow=True).start()
        )  # fmt: skip
        with pytest.raises(StreamingQueryException):
            query.awaitTermination()
        assert recorder.wait_terminated(str(query.id), timeout=30), "no terminated event"
        flush_all()
    finally:
        spark.streams.removeListener(recorder)

    rows = ProgressLog(lake).read().sort("recorded_at").to_dicts()
    assert {r["flow"] for r in rows} == {"silver.t"} and {r["pipeline"] for r in rows} == {"p"}
    events = [r["event"] for r in rows]
    assert events[0] == "started" and events[-1] == "terminated", events
    batches = [r for r in rows if r["event"] == "progress"]
    assert seen == [3] and [(r["batch_id"], r["num_input_rows"]) for r in batches] == [(0, 3)]
    assert "no zeros here" in rows[-1]["exception"]
    assert all(r["query_id"] == str(query.id) for r in rows)
