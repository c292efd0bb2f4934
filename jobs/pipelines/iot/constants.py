"""What the IoT declaration, transforms, checks and generator share: one place for each value."""

from lakehouse.spec import Window

EVENT_SCHEMA = (
    "event_id STRING NOT NULL, device STRING, device_type STRING, "
    "signal DOUBLE NOT NULL, event_time TIMESTAMP NOT NULL"
)
TOPIC = "iot.device_events"  # the Kafka alternative of the landing files
ALERTS_TOPIC = "iot.device_alerts"  # the real-time lane's output (silver.device_alerts is its twin)
WATERMARK = "10 minutes"  # how late an event may arrive
WINDOW = Window(size="10 minutes", slide="5 minutes")  # gold.device_type_stats

# per device type: physical range of the sensor, normal operating range, alert threshold
DEVICE_TYPES: dict[str, tuple[tuple[float, float], tuple[float, float], float]] = {
    "thermostat": ((-40.0, 125.0), (18.0, 26.0), 30.0),
    "pressure": ((300.0, 1100.0), (980.0, 1030.0), 1040.0),
    "humidity": ((0.0, 100.0), (30.0, 70.0), 85.0),
    "vibration": ((0.0, 50.0), (0.5, 5.0), 12.0),
}
