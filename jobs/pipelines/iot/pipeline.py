"""IoT device events, from landing JSON to per-device-type windows and per-device status.

```
landing/*.json -> bronze.device_events -> silver.device_events -+-> gold.device_type_stats
                                          (+ devices registry)  +-> gold.device_status
                                                                +-> gold.device_anomaly_scores
                                                                    (model iot_anomaly, trained by iot_train)
Kafka iot.device_events -> (real-time lane, milliseconds) -> Kafka iot.device_alerts
                        -> (its Delta twin, micro-batches) -> silver.device_alerts
```

- bronze: every line as received; malformed ones kept with the reason.
- silver: typed, deduplicated by ``event_id`` within the watermark, enriched with the
  registry (location, physical range, alert threshold).
- gold ``device_type_stats``: 10-minute windows sliding every 5 minutes per device type
  (count, avg, min, max of signal), updated in place when late events arrive in time.
- gold ``device_status``: the latest event of each device with an alert flag.
- gold ``device_anomaly_scores``: every event scored by the ``iot_anomaly`` model in force
  (robust per-type baselines, ``models.py``), with the model's name and version on each row; the
  anomalies are its rows ``WHERE anomaly``. Until a version is trained and promoted
  (``lakehouse train iot --promote``, or the ``iot_train`` DAG), events wait in its quarantine,
  unscored (a backfill scores them once a version is in force).
- ``silver.device_alerts``, a real-time flow: each event over its device type's alert threshold
  goes to the ``iot.device_alerts`` topic in milliseconds (Spark's Real-time Mode); alerts without
  a device, and events of a type it has no threshold for (it cannot judge them), go to
  ``iot.device_alerts.quarantine`` with the reason, as do lines that cannot be parsed; the
  same records land in this Delta table (its twin). It runs where Kafka is (the stack platform,
  ``LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS``); the embedded default has none and sets it aside.

Quality (Great Expectations, see ``lakehouse.quality``): rows from a broken clock (decades
ahead) are quarantined before they reach bronze, where they would push silver's watermark
forward and make every later event "too late"; silver quarantines events without a device,
from unregistered devices, or with a signal outside the sensor's physical range (per device,
from the registry). Table checks: ``event_id`` unique in silver, fresh events, gold windows
unique, complete and consistent with silver, one status per device matching silver.

Bronze reads landing files, or the ``iot.device_events`` Kafka topic: the declaration names
both, the deployment picks one (``LAKEHOUSE_INGEST=kafka`` and
``LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS``): same schema, same tables downstream; the generator
follows the same switch.

Declarations only: no pyspark (nor GX) here: Airflow imports this module when parsing DAGs.
"""

from lakehouse.quality import gxe
from lakehouse.spec import (
    Aggregate,
    Append,
    Freshness,
    Ingest,
    JsonFiles,
    KafkaSink,
    KafkaTopic,
    Lookup,
    Model,
    Pipeline,
    RealtimeFlow,
    StreamingTable,
    Upsert,
)
from pipelines.iot.checks import GOLD_WINDOWS_COMPLETE, GOLD_WINDOWS_MATCH_SILVER, STATUS_MATCHES_SILVER
from pipelines.iot.constants import ALERTS_TOPIC, DEVICE_TYPES, EVENT_SCHEMA, TOPIC, WATERMARK, WINDOW

pipeline = Pipeline(
    name="iot",
    description="IoT device events: windows per device type and the latest status per device.",
    generator="generator:generate",
    generator_options={"anomaly_fraction": 0.005},  # what the anomaly model should find, with ground truth
    lookups=[
        Lookup(
            "devices",
            schema="device STRING, device_type STRING, location STRING, "
            "min_signal DOUBLE, max_signal DOUBLE, alert_threshold DOUBLE",
        ),
        Lookup("anomaly_labels", schema="event_id STRING, kind STRING"),  # the generator's ground truth
    ],
    models=[
        Model(
            "iot_anomaly",
            trained_on="silver.device_events",
            train="models:fit_baselines",
            score="models:score_anomalies",
            evaluate="models:evaluate_anomalies",
            labels="anomaly_labels",
            promote_when={"precision": ">= 0.9", "recall": ">= 0.5"},
            unavailable="quarantine",
            train_window="1 day",
            eval_window="30 minutes",
        )
    ],
    tables=[
        Ingest(
            "bronze.device_events",
            description="Device events as received; malformed lines kept with _parse_error.",
            source=[JsonFiles(schema=EVENT_SCHEMA), KafkaTopic(schema=EVENT_SCHEMA, topics=[TOPIC])],
            event_time="event_time",
            freshness="10 minutes",
            expectations=[
                gxe.ExpectColumnValuesToBeBetween(
                    column="event_time",
                    max_value={"$PARAMETER": "now() + timedelta(days=1)"},
                    action="drop",
                    name="event_time_not_in_far_future",
                ),
                gxe.ExpectColumnValuesToNotBeNull(
                    column="device_type", action="warn", name="device_type_sent"
                ),
            ],
            checks=[
                gxe.ExpectTableRowCountToBeBetween(min_value=1, name="has_rows"),
                gxe.ExpectColumnValuesToBeNull(
                    column="_parse_error", mostly=0.95, name="at_most_5_percent_malformed"
                ),
            ],
        ),
        StreamingTable(
            "silver.device_events",
            description="Typed, deduplicated device events enriched with the device registry.",
            upstreams=["bronze.device_events"],
            lookups=["devices"],
            transform="transforms:clean_events",
            event_time="event_time",
            watermark=WATERMARK,
            write=Append(keys=["event_id"]),
            partition_by=["event_date"],
            # data, not only a driver's heartbeat: rows committed within the last 30 minutes (two
            # periods of iot_incremental, which fills it every 15 minutes when no stream runs)
            freshness=Freshness(max_lag="30 minutes", of="arrival", heartbeat="10 minutes"),
            expectations=[
                gxe.ExpectColumnValuesToNotBeNull(column="device", action="drop", name="device_not_null"),
                gxe.ExpectColumnValuesToBeInSet(
                    column="registered", value_set=[True], action="drop", name="device_registered"
                ),
                gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="signal",
                    column_B="min_signal",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                    action="drop",
                    name="signal_not_below_sensor_range",
                ),
                gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="max_signal",
                    column_B="signal",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                    action="drop",
                    name="signal_not_above_sensor_range",
                ),
                gxe.ExpectColumnPairValuesAToBeGreaterThanB(  # spikes: kept, counted per batch
                    column_A="alert_threshold",
                    column_B="signal",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                    action="warn",
                    name="signal_within_alert_threshold",
                ),
            ],
            checks=[
                gxe.ExpectColumnValuesToBeUnique(column="event_id", name="event_id_unique"),
                gxe.ExpectTableRowCountToBeBetween(min_value=1, name="has_rows"),
                gxe.ExpectColumnMaxToBeBetween(
                    column="event_time",
                    min_value={"$PARAMETER": "now() - timedelta(hours=1)"},
                    name="latest_event_under_an_hour_old",
                ),
            ],
        ),
        StreamingTable(
            "gold.device_type_stats",
            description="Signal statistics per device type in 10-minute windows sliding by 5.",
            upstreams=["silver.device_events"],
            transform="transforms:device_type_stats",
            event_time="window_start",
            watermark=WATERMARK,
            write=Aggregate(WINDOW, group_by=["device_type"]),
            freshness="15 minutes",
            checks=[
                gxe.ExpectCompoundColumnsToBeUnique(
                    column_list=["window_start", "device_type"], name="one_row_per_window_and_type"
                ),
                gxe.UnexpectedRowsExpectation(
                    unexpected_rows_query=GOLD_WINDOWS_COMPLETE,
                    description="Every 5-minute window between the first and the last has a row",
                    name="windows_complete",
                ),
                gxe.UnexpectedRowsExpectation(
                    unexpected_rows_query=GOLD_WINDOWS_MATCH_SILVER,
                    description="Closed windows count exactly the silver events they cover",
                    name="window_counts_match_silver",
                ),
            ],
        ),
        StreamingTable(
            "gold.device_status",
            description="Latest event per device, with an alert when the signal exceeds the "
            "device's threshold.",
            upstreams=["silver.device_events"],
            transform="transforms:device_status",
            event_time="event_time",
            write=Upsert(keys=["device"], sequence_by=["event_time", "event_id"]),
            freshness="15 minutes",
            checks=[
                gxe.ExpectColumnValuesToBeUnique(column="device", name="one_status_per_device"),
                gxe.UnexpectedRowsExpectation(
                    unexpected_rows_query=STATUS_MATCHES_SILVER,
                    description="Each device's status is its latest event in silver",
                    name="status_is_latest_silver_event",
                ),
            ],
        ),
        StreamingTable(
            "gold.device_anomaly_scores",
            description="Every event scored by the anomaly model in force; anomalies: WHERE anomaly.",
            upstreams=["silver.device_events"],
            transform="transforms:anomaly_scores",
            model="iot_anomaly",
            event_time="event_time",
            write=Append(keys=["event_id"]),
            freshness="15 minutes",
            checks=[
                gxe.ExpectColumnValuesToBeUnique(column="event_id", name="one_score_per_event"),
                gxe.UnexpectedRowsExpectation(
                    unexpected_rows_query="SELECT s.event_id, s._model, s._model_version FROM {batch} s "
                    "LEFT ANTI JOIN {models.versions} v ON v.name = s._model AND v.version = s._model_version",
                    description="Every score names a registered model version",
                    name="scored_by_a_registered_version",
                ),
            ],
        ),
        RealtimeFlow(
            "silver.device_alerts",
            description="Events over their device type's alert threshold, sent to the "
            f"{ALERTS_TOPIC} topic in milliseconds (Real-time Mode); this table is the lane's Delta twin.",
            source=KafkaTopic(schema=EVENT_SCHEMA, topics=[TOPIC]),
            sink=KafkaSink(topic=ALERTS_TOPIC),
            transform="transforms:device_alerts",
            where="alert_threshold IS NULL OR signal > alert_threshold",  # an unknown type: quarantined
            expectations=[
                gxe.ExpectColumnValuesToNotBeNull(column="device", action="drop", name="device_not_null"),
                gxe.ExpectColumnValuesToBeInSet(
                    column="device_type",
                    value_set=list(DEVICE_TYPES),
                    action="drop",
                    name="device_type_known",
                ),
            ],
        ),
    ],
)
