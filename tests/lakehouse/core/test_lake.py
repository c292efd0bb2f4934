"""Where things live under the lake root: the paths the README's layout names, on any root."""

from __future__ import annotations

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake


def test_the_layout_under_a_local_root() -> None:
    lake = Lake("/data/lake/")  # a trailing slash does not double
    assert lake.table("silver.device_events") == "/data/lake/tables/silver/device_events"
    assert lake.checkpoint("iot", "gold.device_status") == "/data/lake/checkpoints/iot/gold.device_status"
    assert lake.landing("iot", "device_events") == "/data/lake/landing/iot/device_events"
    assert lake.reference("iot", "devices.csv") == "/data/lake/reference/iot/devices.csv"
    assert lake.scratch("iot", "gold.x", "run-1") == "/data/lake/scratch/iot/gold.x/run-1"
    assert lake.tables_root == "/data/lake/tables"


def test_the_same_layout_on_object_storage_and_from_settings() -> None:
    lake = Lake.from_settings(Settings(root="s3a://bucket/lake"))
    assert lake == Lake("s3a://bucket/lake")
    assert lake.table("gold.device_type_stats") == "s3a://bucket/lake/tables/gold/device_type_stats"
    assert lake.table("ops.stream_progress") == "s3a://bucket/lake/tables/ops/stream_progress"
