"""IoT transforms: pure ``DataFrame -> DataFrame`` functions, the same for streams and backfills.

They never read or write, never set watermarks or triggers: the runners do (see
``lakehouse.plan.flow``). Each is unit-tested on small DataFrames in tests/pipelines/iot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.iot.constants import DEVICE_TYPES, WINDOW

if TYPE_CHECKING:
    from lakehouse.models.scoring import ModelInForce


def clean_events(events: DataFrame, devices: DataFrame) -> DataFrame:
    """Typed bronze events -> silver: normalized names, event date, registry enrichment."""
    registry = devices.select(
        F.lower(F.trim("device")).alias("device"),
        F.col("device_type").alias("registered_type"),
        "location",
        "min_signal",
        "max_signal",
        "alert_threshold",
    )
    return (
        events.select(
            "event_id",
            F.lower(F.trim("device")).alias("device"),
            F.lower(F.trim("device_type")).alias("device_type"),
            "signal",
            "event_time",
        )
        .join(F.broadcast(registry), "device", "left")
        .select(
            "event_id",
            "device",
            F.coalesce("device_type", "registered_type").alias("device_type"),
            "signal",
            "event_time",
            F.to_date("event_time").alias("event_date"),
            "location",
            "min_signal",
            "max_signal",
            "alert_threshold",
            F.col("registered_type").isNotNull().alias("registered"),
        )
    )


def device_type_stats(events: DataFrame) -> DataFrame:
    """Silver events -> signal statistics per device type per sliding window."""
    window = F.window("event_time", WINDOW.size, WINDOW.slide)
    return (
        events.groupBy(window.alias("window"), "device_type")
        .agg(
            F.count("*").alias("events"),
            F.avg("signal").alias("avg_signal"),
            F.min("signal").alias("min_signal"),
            F.max("signal").alias("max_signal"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "device_type",
            "events",
            "avg_signal",
            "min_signal",
            "max_signal",
        )
    )


def device_status(events: DataFrame) -> DataFrame:
    """Silver events -> one candidate status row per event; the upsert keeps each device's latest."""
    return events.select(
        "device",
        "device_type",
        "location",
        "signal",
        F.coalesce(F.col("signal") > F.col("alert_threshold"), F.lit(False)).alias("alert"),
        "event_time",
        "event_id",
    )


def anomaly_scores(events: DataFrame, model: ModelInForce) -> DataFrame:
    """Silver events -> each scored by the anomaly model in force (its name and version on the row)."""
    columns = ["event_id", "device", "device_type", "signal", "event_time", "alert_threshold"]
    return model.score(events.select(*columns)).select(
        *columns, "anomaly", "anomaly_score", "anomaly_reason", "_model", "_model_version"
    )


def device_alerts(events: DataFrame) -> DataFrame:
    """Typed events from the topic -> the real-time lane's alert records: names normalized as in
    silver and each event's alert threshold (its device type's, a literal map: the lane has no
    lookups; an unknown type has none); the flow's ``where=`` keeps the events above it and the
    ones it cannot judge. Projections only, so Real-time Mode runs it record by record."""
    thresholds = F.create_map(
        *[
            value
            for kind, (_, _, threshold) in DEVICE_TYPES.items()
            for value in (F.lit(kind), F.lit(threshold))
        ]
    )
    device_type = F.lower(F.trim("device_type"))
    return events.withColumns(
        {
            "device": F.lower(F.trim("device")),
            "device_type": device_type,
            "alert_threshold": thresholds[device_type],
        }
    )
