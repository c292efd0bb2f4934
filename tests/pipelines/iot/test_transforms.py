"""IoT transforms on small DataFrames (no streams, no tables)."""

from __future__ import annotations

from datetime import datetime

from pyspark.testing import assertDataFrameEqual

from pipelines.iot.transforms import clean_events, device_alerts, device_status, device_type_stats

EVENTS = "event_id STRING, device STRING, device_type STRING, signal DOUBLE, event_time TIMESTAMP"
DEVICES = "device STRING, device_type STRING, location STRING, min_signal DOUBLE, max_signal DOUBLE, alert_threshold DOUBLE"


def ts(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, 0, minute, second)


def test_clean_events_normalizes_and_enriches(spark) -> None:
    events = spark.createDataFrame(
        [
            ("e1", " DEV-0001 ", "Thermostat", 21.0, ts(1)),
            ("e2", "dev-9999", None, 5.0, ts(2)),
            ("e3", "dev-0002", None, 990.0, ts(3)),
        ],
        EVENTS,
    )
    devices = spark.createDataFrame(
        [
            ("dev-0001", "thermostat", "site-1", -40.0, 125.0, 30.0),
            ("dev-0002", "pressure", "site-2", 300.0, 1100.0, 1040.0),
        ],
        DEVICES,
    )
    out = {r.event_id: r for r in clean_events(events, devices).collect()}
    assert out["e1"].device == "dev-0001" and out["e1"].device_type == "thermostat"
    assert out["e1"].location == "site-1" and out["e1"].registered and out["e1"].alert_threshold == 30.0
    assert out["e1"].event_date.isoformat() == "2026-01-01"
    assert out["e2"].registered is False and out["e2"].location is None  # kept, flagged
    assert out["e3"].device_type == "pressure"  # missing type taken from the registry


def test_device_type_stats_slides_ten_minute_windows_every_five(spark) -> None:
    events = spark.createDataFrame(
        [
            ("a", "thermostat", 10.0, ts(1)),
            ("b", "thermostat", 20.0, ts(7)),
            ("c", "pressure", 1000.0, ts(7)),
        ],
        "event_id STRING, device_type STRING, signal DOUBLE, event_time TIMESTAMP",
    )
    expected = spark.createDataFrame(
        [
            (datetime(2025, 12, 31, 23, 55), ts(5), "thermostat", 1, 10.0, 10.0, 10.0),
            (ts(0), ts(10), "thermostat", 2, 15.0, 10.0, 20.0),
            (ts(5), ts(15), "thermostat", 1, 20.0, 20.0, 20.0),
            (ts(0), ts(10), "pressure", 1, 1000.0, 1000.0, 1000.0),
            (ts(5), ts(15), "pressure", 1, 1000.0, 1000.0, 1000.0),
        ],
        "window_start TIMESTAMP, window_end TIMESTAMP, device_type STRING, events BIGINT NOT NULL, "
        "avg_signal DOUBLE, min_signal DOUBLE, max_signal DOUBLE",
    )
    assertDataFrameEqual(device_type_stats(events), expected, checkRowOrder=False)


def test_device_status_flags_alerts_above_the_threshold(spark) -> None:
    events = spark.createDataFrame(
        [
            ("d1", "thermostat", "s", 31.0, 30.0, ts(1), "e1"),
            ("d2", "thermostat", "s", 29.0, 30.0, ts(1), "e2"),
            ("d3", "humidity", None, 99.0, None, ts(1), "e3"),
        ],
        "device STRING, device_type STRING, location STRING, signal DOUBLE, alert_threshold DOUBLE, "
        "event_time TIMESTAMP, event_id STRING",
    )
    alerts = {r.device: r.alert for r in device_status(events).collect()}
    assert alerts == {"d1": True, "d2": False, "d3": False}  # unregistered: no threshold, no alert


def test_device_alerts_normalizes_names_and_gives_each_type_its_threshold_keeping_platform_columns(
    spark,
) -> None:
    events = spark.createDataFrame(
        [(" Dev-1 ", "Thermostat ", 31.0, "a"), ("d2", "vibration", 3.0, "b"), ("d3", "robot", 9.0, "c"), (None, None, 1.0, "d")],
        "device STRING, device_type STRING, signal DOUBLE, _kafka_key STRING",
    )  # fmt: skip
    rows = [r.asDict() for r in device_alerts(events).orderBy("_kafka_key").collect()]
    assert rows == [
        {"device": "dev-1", "device_type": "thermostat", "signal": 31.0, "_kafka_key": "a", "alert_threshold": 30.0},
        {"device": "d2", "device_type": "vibration", "signal": 3.0, "_kafka_key": "b", "alert_threshold": 12.0},
        {"device": "d3", "device_type": "robot", "signal": 9.0, "_kafka_key": "c", "alert_threshold": None},
        {"device": None, "device_type": None, "signal": 1.0, "_kafka_key": "d", "alert_threshold": None},
    ]  # fmt: skip
