"""IoT device events, from landing JSON to per-device-type windows and per-device status.

```
landing/*.json -> bronze.device_events -> silver.device_events -+-> gold.device_type_stats
                                          (+ devices registry)  +-> gold.device_status
```

- bronze: every line as received; malformed ones kept with the reason.
- silver: typed, deduplicated by ``event_id`` within the watermark, enriched with the
  registry (location, physical range, alert threshold).
- gold ``device_type_stats``: 10-minute windows sliding every 5 minutes per device type
  (count, avg, min, max of signal), updated in place when late events arrive in time.
- gold ``device_status``: the latest event of each device with an alert flag.

Declarations only: no pyspark here (Airflow imports this module when parsing DAGs).
"""

from lakehouse.spec import JsonFiles, Lookup, Pipeline, Table, Window

WATERMARK = "10 minutes"
WINDOW = Window(size="10 minutes", slide="5 minutes")

pipeline = Pipeline(
    name="iot",
    description="IoT device events: windows per device type and the latest status per device.",
    generator="generator:generate",
    lookups=[
        Lookup(
            "devices",
            schema="device STRING, device_type STRING, location STRING, "
            "min_signal DOUBLE, max_signal DOUBLE, alert_threshold DOUBLE",
        )
    ],
    tables=[
        Table(
            "bronze.device_events",
            description="Device events as received; malformed lines kept with _parse_error.",
            source=JsonFiles(
                schema="event_id STRING NOT NULL, device STRING NOT NULL, device_type STRING, "
                "signal DOUBLE NOT NULL, event_time TIMESTAMP NOT NULL",
            ),
            event_time="event_time",
            freshness="10 minutes",
        ),
        Table(
            "silver.device_events",
            description="Typed, deduplicated device events enriched with the device registry.",
            upstreams=["bronze.device_events"],
            lookups=["devices"],
            transform="transforms:clean_events",
            event_time="event_time",
            watermark=WATERMARK,
            keys=["event_id"],
            partition_by=["event_date"],
            freshness="10 minutes",
        ),
        Table(
            "gold.device_type_stats",
            description="Signal statistics per device type in 10-minute windows sliding by 5.",
            upstreams=["silver.device_events"],
            transform="transforms:device_type_stats",
            event_time="window_start",
            watermark=WATERMARK,
            keys=["window_start", "device_type"],
            write="aggregate",
            window=WINDOW,
            freshness="15 minutes",
        ),
        Table(
            "gold.device_status",
            description="Latest event per device, with an alert when the signal exceeds the "
            "device's threshold.",
            upstreams=["silver.device_events"],
            transform="transforms:device_status",
            event_time="event_time",
            keys=["device"],
            sequence_by=["event_time", "event_id"],
            write="upsert",
            freshness="15 minutes",
        ),
    ],
)
