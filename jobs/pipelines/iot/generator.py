"""Seeded generator of realistic IoT traffic: a device registry and JSON-lines event files.

Besides clean events it produces what real devices send: out-of-order events (late, but within
the watermark), events too late for it, exact duplicates (retries), malformed lines (truncated
JSON, wrong types, missing fields), signal spikes (above the alert threshold, within the
sensor's range), and events the pipeline's expectations reject: unregistered devices, a
missing device, a signal outside the sensor's physical range, an event time decades ahead (a
device with a broken clock). The same seed and options give the same files; the returned
summary says how many of each were written (and which event ids were rejected, by kind), so
tests can check that every line is accounted for; it also records what was written: each
event's values, each landed file's lines, which lines are malformed (an oracle of its own for
``bench/stress.py``).

With ``anomaly_fraction`` it also injects what the anomaly model should find (each event starts
one with that chance): an in-range spike (above the normal range, below the alert threshold),
a drifting sensor (its next 5 to 15 readings offset by about the width of the normal range) or a
sensor stuck at its rail (its physical minimum, for 5 to 15 readings). Ground truth, with the
spikes above the alert threshold, is appended to the ``anomaly_labels`` reference file
(``event_id,kind``), which the model's evaluation reads.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakehouse.plan.generators import chunks, iso, malformed, time_range, uid
from pipelines.iot.constants import DEVICE_TYPES

if TYPE_CHECKING:
    from lakehouse.plan.generators import Landing

SOURCE = "bronze.device_events"


@dataclass
class Summary:
    lines: int = 0
    events: int = 0
    duplicates: int = 0
    malformed: int = 0
    late: int = 0
    too_late: int = 0
    unregistered: int = 0
    out_of_range: int = 0
    null_device: int = 0
    far_future: int = 0
    files: list[str] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)  # every event, valid or not
    rejected_ids: dict[str, list[str]] = field(default_factory=dict)  # invalid events by kind
    anomalies: dict[str, str] = field(default_factory=dict)  # event id -> kind of anomaly (ground truth)
    records: list[dict[str, Any]] = field(default_factory=list)  # every event's values as written, in order
    landed: dict[str, list[str]] = field(default_factory=dict)  # each landed file (as delivered) -> its lines
    malformed_lines: list[str] = field(default_factory=list)  # the lines written broken on purpose
    first_event_time: str | None = None
    last_event_time: str | None = None

    def as_dict(self, with_ids: bool = False) -> dict[str, Any]:
        if with_ids:
            return asdict(self)
        record = ("event_ids", "rejected_ids", "records", "landed", "malformed_lines")  # not copied
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in record}
        return {**data, "files": list(self.files), "anomalies": len(self.anomalies)}

    @property
    def valid_ids(self) -> set[str]:
        """Events that pass the IoT expectations (whether or not a watermark drops them)."""
        rejected = {i for ids in self.rejected_ids.values() for i in ids}
        return {i for i in self.event_ids if i not in rejected}


def device_name(number: int) -> str:
    return f"dev-{number:04d}"


def registry_csv(devices: int) -> str:
    rows = ["device,device_type,location,min_signal,max_signal,alert_threshold"]
    types = list(DEVICE_TYPES)
    for n in range(1, devices + 1):
        kind = types[(n - 1) % len(types)]
        (low, high), _, threshold = DEVICE_TYPES[kind]
        rows.append(f"{device_name(n)},{kind},site-{(n - 1) % 5 + 1},{low},{high},{threshold}")
    return "\n".join(rows) + "\n"


def generate(
    landing: Landing,
    *,
    events: int = 1000,
    files: int = 1,
    seed: int = 42,
    start: datetime | None = None,
    end: datetime | None = None,
    devices: int = 20,
    late_fraction: float = 0.05,
    late_max_seconds: float = 480.0,
    too_late_fraction: float = 0.0,
    duplicate_fraction: float = 0.02,
    malformed_fraction: float = 0.01,
    unregistered_fraction: float = 0.0,
    out_of_range_fraction: float = 0.0,
    null_device_fraction: float = 0.0,
    far_future_fraction: float = 0.0,
    spike_fraction: float = 0.02,
    anomaly_fraction: float = 0.0,
    file_prefix: str | None = None,
    write_registry: bool = True,
) -> Summary:
    """Write ``events`` events (plus duplicates and malformed lines) as ``files`` files, their
    times spread over ``[start, end)`` (default: the hour up to now).

    Lateness is relative to the arrival order: a late event's time is at most
    ``late_max_seconds`` behind the latest event written before it, so any split of the files
    into waves keeps it inside a watermark longer than that. ``too_late`` events are 15 to 60
    minutes behind. Invalid events (unregistered, out of range, no device, far future: one kind
    each) are never late, duplicated or spiked, so each ends in exactly one quarantine.
    """
    rng = random.Random(seed)
    start, end = time_range(start, end, timedelta(hours=1))
    interval_seconds = (end - start).total_seconds() / max(events, 1)
    if write_registry:
        landing.write_reference("devices", registry_csv(devices))
    summary = Summary()
    lines: list[str] = []
    pending: list[tuple[int, str]] = []  # duplicates waiting for their arrival position
    clock = start
    latest = start
    types = list(DEVICE_TYPES)
    invalid_kinds = [
        ("out_of_range", out_of_range_fraction),
        ("null_device", null_device_fraction),
        ("far_future", far_future_fraction),
    ]
    invalid_fraction = sum(f for _, f in invalid_kinds)
    injector = Injector(
        random.Random(seed * 7919 + 17), anomaly_fraction
    )  # its own draws: other options keep their files
    for i in range(events):
        clock = min(
            clock + timedelta(seconds=rng.expovariate(1 / interval_seconds)), end - timedelta(milliseconds=1)
        )
        invalid: str | None = None
        if rng.random() < unregistered_fraction:
            device, kind = f"dev-9{rng.randrange(1000):03d}", rng.choice(types)
            invalid = "unregistered"
        else:
            number = rng.randrange(1, devices + 1)
            device, kind = device_name(number), types[(number - 1) % len(types)]
            if invalid_fraction:  # drawn only when asked for, so other options keep their files
                roll = rng.random()
                for name, fraction in invalid_kinds:
                    if roll < fraction:
                        invalid = name
                        break
                    roll -= fraction
        (low_limit, high_limit), (low, high), threshold = DEVICE_TYPES[kind]
        signal = rng.uniform(low, high)
        anomaly: str | None = None
        if rng.random() < spike_fraction and invalid is None:
            signal = min(threshold * rng.uniform(1.01, 1.2), high_limit)  # a spike, still physical
            anomaly = "spike_above_threshold"
        elif invalid is None and anomaly_fraction:
            signal, anomaly = injector.inject(device, kind, signal)
        if invalid == "out_of_range":
            span = high_limit - low_limit
            signal = (
                high_limit + rng.uniform(1, span) if rng.random() < 0.5 else low_limit - rng.uniform(1, span)
            )
        event_time = clock
        roll = rng.random()
        if invalid is not None:
            pass  # never late: it must reach (and stop at) its expectation
        elif roll < too_late_fraction:
            event_time = latest - timedelta(seconds=rng.uniform(900, 3600))
            summary.too_late += 1
        elif roll < too_late_fraction + late_fraction:
            event_time = latest - timedelta(seconds=rng.uniform(1, late_max_seconds))
            summary.late += 1
        if invalid == "far_future":  # a broken clock, decades ahead; it moves no watermark
            event_time = clock + timedelta(days=rng.uniform(20 * 365, 80 * 365))
        else:
            latest = max(latest, event_time)
        event = {
            "event_id": uid(rng),
            "device": None if invalid == "null_device" else device,
            "device_type": kind,
            "signal": round(signal, 3),
            "event_time": iso(event_time),
        }
        line = json.dumps(event)
        lines.append(line)
        summary.events += 1
        summary.event_ids.append(event["event_id"])
        summary.records.append(event)
        if anomaly is not None:
            summary.anomalies[event["event_id"]] = anomaly
        if invalid is not None:
            setattr(summary, invalid, getattr(summary, invalid) + 1)
            summary.rejected_ids.setdefault(invalid, []).append(event["event_id"])
        if rng.random() < duplicate_fraction and invalid is None:
            pending.append((i + rng.randrange(1, 10), line))
            pending.sort()
            summary.duplicates += 1
        while pending and pending[0][0] <= i:
            lines.append(pending.pop(0)[1])
        if rng.random() < malformed_fraction:
            lines.append(malformed(rng, event, wrong_type=("signal", "high"), missing="event_time"))
            summary.malformed_lines.append(lines[-1])
            summary.malformed += 1
    lines.extend(line for _, line in pending)
    summary.lines = len(lines)
    summary.first_event_time = iso(start)
    summary.last_event_time = iso(latest)
    prefix = file_prefix or f"events-{start:%Y%m%dT%H%M%S}-{seed}"
    for k, chunk in enumerate(chunks(lines, files)):
        summary.files.append(str(landing.write_lines(SOURCE, f"{prefix}-{k:04d}.json", chunk)))
        summary.landed.setdefault(summary.files[-1], []).extend(chunk)  # one topic for every chunk
    if write_registry or summary.anomalies:
        append_labels(landing, summary.anomalies)
    return summary


class Injector:
    """Anomalies the model should find (see the module doc), with its own random draws."""

    def __init__(self, rng: random.Random, fraction: float) -> None:
        self.rng, self.fraction = rng, fraction
        self.episodes: dict[str, tuple[str, int, float]] = {}  # device -> (kind, readings left, value)

    def inject(self, device: str, kind: str, signal: float) -> tuple[float, str | None]:
        (low_limit, high_limit), (low, high), threshold = DEVICE_TYPES[kind]
        episode = self.episodes.pop(device, None)
        if episode is None and self.rng.random() < self.fraction:
            anomaly = self.rng.choice(("in_range_spike", "drift", "stuck"))
            if anomaly == "in_range_spike":
                return high + self.rng.uniform(0.6, 0.95) * (threshold - high), anomaly
            value = (high - low) * self.rng.uniform(0.8, 1.2) if anomaly == "drift" else low_limit
            episode = (anomaly, self.rng.randrange(5, 16), value)
        if episode is None:
            return signal, None
        anomaly, left, value = episode
        if left > 1:
            self.episodes[device] = (anomaly, left - 1, value)
        return (min(signal + value, high_limit) if anomaly == "drift" else value), anomaly


LABELS = "event_id,kind"


def append_labels(landing: Landing, anomalies: dict[str, str]) -> None:
    """Add ``anomalies`` to the ground truth of earlier calls (the ``anomaly_labels`` file)."""
    known = (landing.read_reference("anomaly_labels") or LABELS).splitlines()[1:]
    rows = [LABELS, *known, *(f"{event_id},{kind}" for event_id, kind in anomalies.items())]
    landing.write_reference("anomaly_labels", "\n".join(rows) + "\n")
