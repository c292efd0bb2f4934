"""The IoT generator is deterministic and its summary counts what it wrote."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse.plan.generators import Landing
from pipelines.iot.generator import DEVICE_TYPES, generate

START = datetime(2026, 1, 1, tzinfo=UTC)


def read_lines(files: list[str]) -> list[str]:
    return [line for f in files for line in Path(f).read_text().splitlines()]


def test_same_seed_same_files_and_counts_add_up(iot_landing: Landing, tmp_path: Path) -> None:
    s1 = generate(
        iot_landing,
        events=500,
        files=3,
        seed=5,
        start=START,
        malformed_fraction=0.05,
        duplicate_fraction=0.05,
        late_fraction=0.1,
        file_prefix="a",
    )
    lines = read_lines(s1.files)
    assert len(s1.files) == 3 and len(lines) == s1.lines == s1.events + s1.duplicates + s1.malformed
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    good = [
        p for p in parsed if isinstance(p, dict) and isinstance(p.get("signal"), float) and "event_time" in p
    ]
    assert len({p["event_id"] for p in good}) == s1.events == len(set(s1.event_ids))
    assert len(good) == s1.events + s1.duplicates
    s2 = generate(
        iot_landing,
        events=500,
        files=3,
        seed=5,
        start=START,
        malformed_fraction=0.05,
        duplicate_fraction=0.05,
        late_fraction=0.1,
        file_prefix="b",
    )
    assert read_lines(s2.files) == lines


def test_lateness_stays_within_the_bound_in_arrival_order(iot_landing: Landing) -> None:
    s = generate(
        iot_landing,
        events=2000,
        seed=9,
        start=START,
        late_fraction=0.2,
        late_max_seconds=480,
        malformed_fraction=0.0,
    )
    latest = START
    worst = timedelta(0)
    for line in read_lines(s.files):
        t = datetime.fromisoformat(json.loads(line)["event_time"].replace("Z", "+00:00"))
        worst = max(worst, latest - t)
        latest = max(latest, t)
    assert s.late > 300
    # 480 s of lateness plus the arrival delay of a retried duplicate (a few events later)
    assert timedelta(minutes=5) < worst < timedelta(minutes=10)


def test_invalid_events_are_one_kind_each_and_reported_by_id(iot_landing: Landing) -> None:
    s = generate(
        iot_landing,
        events=1000,
        seed=12,
        start=START,
        unregistered_fraction=0.03,
        out_of_range_fraction=0.03,
        null_device_fraction=0.03,
        far_future_fraction=0.03,
        spike_fraction=0.05,
        malformed_fraction=0.0,
    )
    kinds = ("unregistered", "out_of_range", "null_device", "far_future")
    assert all(len(s.rejected_ids[k]) == getattr(s, k) > 10 for k in kinds)
    rejected = [i for k in kinds for i in s.rejected_ids[k]]
    assert len(rejected) == len(set(rejected))  # one kind per event
    assert s.valid_ids == set(s.event_ids) - set(rejected)
    physical = {kind: limits for kind, (limits, _normal, _threshold) in DEVICE_TYPES.items()}
    by_id = {}
    for line in read_lines(s.files):
        event = json.loads(line)
        by_id.setdefault(event["event_id"], event)
    for event_id, event in by_id.items():
        low, high = physical[event["device_type"]]
        in_range = low <= event["signal"] <= high
        assert in_range == (event_id not in s.rejected_ids["out_of_range"])  # spikes stay physical
        assert (event["device"] is None) == (event_id in s.rejected_ids["null_device"])
        assert (str(event["device"]).startswith("dev-9")) == (event_id in s.rejected_ids["unregistered"])
        future = datetime.fromisoformat(event["event_time"].replace("Z", "+00:00")) > START + timedelta(
            days=365
        )
        assert future == (event_id in s.rejected_ids["far_future"])
