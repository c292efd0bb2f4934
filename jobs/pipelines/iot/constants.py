"""What the IoT declaration, transforms, checks and generator share: one place for each value."""

from lakehouse.spec import Window

EVENT_SCHEMA = (
    "event_id STRING NOT NULL, device STRING, device_type STRING, "
    "signal DOUBLE NOT NULL, event_time TIMESTAMP NOT NULL"
)
TOPIC = "iot.device_events"  # the Kafka alternative of the landing files
WATERMARK = "10 minutes"  # how late an event may arrive
WINDOW = Window(size="10 minutes", slide="5 minutes")  # gold.device_type_stats
