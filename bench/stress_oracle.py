"""The oracle of ``bench/stress.py``: what every iot table must hold, from the producers' record.

Plain Python, written by hand from the iot pipeline's declaration (``jobs/pipelines/iot/``): no
Spark, no lakehouse plan, transform or write code. Its input is what the run *produced*, as the
producers recorded it (the generator's ``Summary``: each event's values, each landed file's lines,
which lines are malformed; the stress script's own too-late events; the device registry it wrote),
never what a table holds. The tables are compared with it at the end:

- **bronze**: every landed line exactly once in bronze or its quarantine, by identity (its file
  and its content: the parsed values of a well-formed line, the text of a malformed one), as
  multisets: a lost line and a duplicated one are two differences, never a wash. A well-formed
  line with an event time more than a day ahead (a broken clock) goes to the quarantine
  (``event_time_not_in_far_future``, drop), every other line to bronze (malformed ones with
  ``_parse_error`` and ``_raw_record``, the line as received).
- **silver**: each event once (duplicates are retries of the same line: deduplicated on
  ``event_id``), device and type trimmed and lower-cased, the type defaulting to the registry's,
  enriched with the registry (location, sensor range, threshold, ``registered``), its
  ``event_date``; events without a device, of an unregistered device or with a signal outside
  the sensor's range go to silver's quarantine instead, once each. Late data: an event beyond the
  watermark (the stress script's ``too_late`` ones, 15 to 60 minutes behind the latest) *must*
  be in silver when a backfill whose slice holds its time started after it landed (the backfill
  restored it); otherwise the stream may have dropped it (if its watermark had passed it when it
  read it) or kept it (if not yet): which one is read from silver for those events only, and
  each one missing must be a counted late drop. Every other valid event must be there.
- **gold.device_type_stats**: per device type and 10-minute window sliding by 5 minutes (a
  window holds ``[start, start + 10 min)``, starts on multiples of 5 minutes from the epoch):
  events, average, minimum and maximum signal, over the expected silver events.
- **gold.device_status**: per device, its latest expected silver event by (event time, event id):
  type, location, signal, ``alert`` (signal above the device's threshold), event time, event id.
- **gold.device_anomaly_scores**: no model version is trained in a stress run, so no row; each
  expected silver event waits once in its quarantine, unscored, too-late events a backfill
  restored into silver after the stream dropped them included (the backfill of the scores adds
  those to the quarantine: ``lakehouse.flows.scored.ScoredFlow.waiting_rows``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WINDOW_SLIDE = 300  # seconds: windows start every 5 minutes
WINDOW_SIZE = 600  # seconds: and last 10
FAR_FUTURE = timedelta(days=1)  # bronze drops an event time beyond now + 1 day


@dataclass
class Record:
    """What the run produced, as its producers recorded it."""

    registry: str = ""  # the devices CSV written to the reference files
    events: list[dict[str, Any]] = field(default_factory=list)  # every event's values as sent
    landed: dict[str, list[str]] = field(default_factory=dict)  # landed file name -> its lines
    malformed: set[str] = field(default_factory=set)  # lines written broken on purpose
    too_late: set[str] = field(default_factory=set)  # events sent beyond the watermark
    restored: set[str] = field(default_factory=set)  # too-late events a backfill must have restored


@dataclass
class Tables:
    """What the platform wrote, read back as rows (dicts)."""

    bronze: list[dict[str, Any]]
    bronze_quarantine: list[dict[str, Any]]
    silver: list[dict[str, Any]]
    silver_quarantine: list[dict[str, Any]]
    type_stats: list[dict[str, Any]]
    status: list[dict[str, Any]]
    scores: list[dict[str, Any]]
    scores_quarantine: list[dict[str, Any]]


@dataclass
class Truth:
    bronze: Counter[tuple[Any, ...]]
    bronze_quarantine: Counter[tuple[Any, ...]]
    silver: dict[str, dict[str, Any]]
    rejected: set[str]  # silver's quarantine
    dropped_late: set[str]  # too-late events the stream dropped (counted, not restored)
    type_stats: dict[tuple[int, str], tuple[int, float, float, float]]
    status: dict[str, tuple[Any, ...]]


def micros(value: Any) -> int | None:
    """A time (ISO text, aware or naive UTC datetime) as microseconds since the epoch."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - EPOCH) // timedelta(microseconds=1)


def _norm(text: str | None) -> str | None:
    return None if text is None else text.strip().lower()


def _file(path: Any) -> str:
    return str(path).rstrip("/").rsplit("/", 1)[-1]


def event_identity(values: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a well-formed line: its values as sent (bronze keeps them as they are)."""
    signal = values["signal"]
    return (
        "event",
        values["event_id"],
        values["device"],
        values["device_type"],
        None if signal is None else float(signal),
        micros(values["event_time"]),
    )


def bronze_identity(row: dict[str, Any]) -> tuple[Any, ...]:
    """A bronze (or bronze quarantine) row's line identity: its file, and what it says."""
    if row.get("_parse_error") is not None:
        return (_file(row["_source_file"]), "raw", row["_raw_record"])
    return (_file(row["_source_file"]), *event_identity(row))


def parse_registry(text: str) -> dict[str, tuple[str, str, float, float, float]]:
    """device -> (type, location, min signal, max signal, alert threshold)."""
    out = {}
    for row in text.splitlines()[1:]:
        if row.strip():
            device, kind, location, low, high, threshold = row.split(",")
            out[device.strip().lower()] = (kind, location, float(low), float(high), float(threshold))
    return out


def truth(record: Record, silver_ids: set[str], now: datetime) -> Truth:
    """The tables the record implies. ``silver_ids`` is read only for the too-late events no backfill
    restored, which the stream may have kept or dropped (see the module doc)."""
    registry = parse_registry(record.registry)
    by_line = {}
    for values in record.events:
        by_line.setdefault(_line_key(values), values)
    horizon = micros(now + FAR_FUTURE)
    assert horizon is not None
    bronze: Counter[tuple[Any, ...]] = Counter()
    bronze_q: Counter[tuple[Any, ...]] = Counter()
    for name, lines in record.landed.items():
        for line in lines:
            if line in record.malformed:
                bronze[(_file(name), "raw", line)] += 1
                continue
            values = by_line[line]  # a well-formed line is an event the producer recorded
            identity = (_file(name), *event_identity(values))
            far = (micros(values["event_time"]) or 0) > horizon
            (bronze_q if far else bronze)[identity] += 1
    silver: dict[str, dict[str, Any]] = {}
    rejected: set[str] = set()
    dropped: set[str] = set()
    seen: set[str] = set()
    for values in record.events:
        event_id = values["event_id"]
        if event_id in seen:
            continue
        seen.add(event_id)
        when = micros(values["event_time"])
        assert when is not None
        if when > horizon:
            continue  # in bronze's quarantine, never read downstream
        device = _norm(values["device"])
        registered = registry.get(device) if device is not None else None
        signal = float(values["signal"])
        if registered is None or not registered[2] <= signal <= registered[3]:
            rejected.add(event_id)
            continue
        if event_id in record.too_late and event_id not in record.restored and event_id not in silver_ids:
            dropped.add(event_id)
            continue
        kind, location, low, high, threshold = registered
        moment = EPOCH + timedelta(microseconds=when)
        silver[event_id] = {
            "event_id": event_id,
            "device": device,
            "device_type": _norm(values["device_type"]) or kind,
            "signal": signal,
            "event_time": when,
            "event_date": moment.date(),
            "location": location,
            "min_signal": low,
            "max_signal": high,
            "alert_threshold": threshold,
            "registered": True,
        }
    groups: dict[tuple[int, str], list[float]] = {}
    status: dict[str, tuple[Any, ...]] = {}
    for e in silver.values():
        seconds = e["event_time"] // 1_000_000
        first = math.floor(seconds / WINDOW_SLIDE) * WINDOW_SLIDE
        for start in range(first, first - WINDOW_SIZE, -WINDOW_SLIDE):  # every window holding it
            groups.setdefault((start * 1_000_000, e["device_type"]), []).append(e["signal"])
        current = status.get(e["device"])
        if current is None or (e["event_time"], e["event_id"]) > (current[4], current[5]):
            alert = e["signal"] > e["alert_threshold"]
            status[e["device"]] = (
                e["device_type"], e["location"], e["signal"], alert, e["event_time"], e["event_id"]
            )  # fmt: skip
    stats = {k: (len(v), sum(v) / len(v), min(v), max(v)) for k, v in groups.items()}
    return Truth(bronze, bronze_q, silver, rejected, dropped, stats, status)


def _line_key(values: dict[str, Any]) -> str:
    return json.dumps(values)  # how the producers write an event: one JSON object per line


def _multiset_diff(name: str, actual: Counter[Any], expected: Counter[Any]) -> list[str]:
    if actual == expected:
        return []
    missing, extra = expected - actual, actual - expected
    return [
        f"{name}: {sum(missing.values())} landed line(s) missing (e.g. {list(missing)[:2]}), "
        f"{sum(extra.values())} unexpected or duplicated (e.g. {list(extra)[:2]})"
    ]


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _day(value: Any) -> date | None:
    return value.date() if isinstance(value, datetime) else value


def differences(
    record: Record, tables: Tables, now: datetime, late_drops_counted: int
) -> tuple[list[str], Truth]:
    """Every way the tables differ from the truth of ``record`` (empty: they hold it)."""
    out: list[str] = []
    silver_ids = [r["event_id"] for r in tables.silver]
    expected = truth(record, set(silver_ids), now)
    # bronze, line by line
    out += _multiset_diff("bronze", Counter(map(bronze_identity, tables.bronze)), expected.bronze)
    out += _multiset_diff(
        "bronze quarantine",
        Counter(map(bronze_identity, tables.bronze_quarantine)),
        expected.bronze_quarantine,
    )
    # silver: each expected event once, with its values
    counts = Counter(silver_ids)
    if duplicated := [i for i, n in counts.items() if n > 1]:
        out.append(f"silver holds {len(duplicated)} event id(s) more than once, e.g. {duplicated[:3]}")
    if extra := set(counts) - set(expected.silver):
        out.append(f"silver holds {len(extra)} unexpected event(s), e.g. {sorted(extra)[:3]}")
    if missing := set(expected.silver) - set(counts):
        restored = missing & record.restored
        out.append(
            f"{len(missing)} event(s) missing from silver ({len(restored)} of them too late but restored "
            f"by a backfill), e.g. {sorted(missing)[:3]}"
        )
    wrong = []
    for row in tables.silver:
        want = expected.silver.get(row["event_id"])
        if want is None:
            continue
        got = {**row, "event_time": micros(row["event_time"]), "event_date": _day(row["event_date"])}
        if any(got.get(k) != v for k, v in want.items()):
            wrong.append((row["event_id"], {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}))
    if wrong:
        out.append(f"{len(wrong)} silver row(s) differ from the events sent (got, expected): {wrong[:2]}")
    if len(expected.dropped_late) > late_drops_counted:
        out.append(
            f"{len(expected.dropped_late)} too-late event(s) not in silver, only {late_drops_counted} late "
            "drop(s) counted"
        )
    quarantined = Counter(r["event_id"] for r in tables.silver_quarantine)
    if quarantined != Counter(expected.rejected):
        out.append(
            f"silver quarantine: {sum(quarantined.values())} rows ({len(quarantined)} ids), expected the "
            f"{len(expected.rejected)} rejected events once each (missing e.g. "
            f"{sorted(expected.rejected - set(quarantined))[:2]}, unexpected e.g. "
            f"{sorted(set(quarantined) - expected.rejected)[:2]})"
        )
    # gold
    stats: dict[tuple[int, str], tuple[Any, ...]] = {}
    for r in tables.type_stats:
        key = (micros(r["window_start"]), r["device_type"])
        if key in stats or micros(r["window_end"]) != micros(r["window_start"]) + WINDOW_SIZE * 1_000_000:
            out.append(f"gold.device_type_stats: window {key} twice or of the wrong length")
        stats[key] = (r["events"], r["avg_signal"], r["min_signal"], r["max_signal"])  # type: ignore[index]
    bad = sorted(
        (k for k in stats.keys() | expected.type_stats.keys()
         if k not in stats or k not in expected.type_stats
         or stats[k][0] != expected.type_stats[k][0] or not _close(stats[k][1], expected.type_stats[k][1])
         or stats[k][2:] != expected.type_stats[k][2:]),
        key=str,
    )  # fmt: skip
    if bad:
        out.append(
            f"gold.device_type_stats: {len(bad)} window(s) differ ({len(stats)} in the table, "
            f"{len(expected.type_stats)} expected), e.g. "
            + "; ".join(f"{k}: {stats.get(k)} != {expected.type_stats.get(k)}" for k in bad[:2])
        )
    status = {
        r["device"]: (r["device_type"], r["location"], r["signal"], r["alert"], micros(r["event_time"]), r["event_id"])
        for r in tables.status
    }  # fmt: skip
    if len(status) != len(tables.status):
        out.append("gold.device_status: a device has more than one row")
    if status != expected.status:
        bad_devices = sorted(
            d for d in status.keys() | expected.status.keys() if status.get(d) != expected.status.get(d)
        )
        out.append(
            f"gold.device_status: {len(bad_devices)} device(s) differ, e.g. "
            + "; ".join(f"{d}: {status.get(d)} != {expected.status.get(d)}" for d in bad_devices[:2])
        )
    if tables.scores:
        out.append(
            f"gold.device_anomaly_scores: {len(tables.scores)} row(s), but no model version was trained"
        )
    # Each silver event waits once in the quarantine of the scores, unscored (a too-late event a
    # backfill restored into silver too: the scores' backfill puts it there).
    unscored = Counter(r["event_id"] for r in tables.scores_quarantine)
    expected_unscored = Counter(list(expected.silver))
    if unscored != expected_unscored:
        missing, extra = expected_unscored - unscored, unscored - expected_unscored
        out.append(
            f"gold.device_anomaly_scores' quarantine: {sum(unscored.values())} rows ({len(unscored)} ids), "
            f"expected the {len(expected.silver)} silver events once each, unscored; missing e.g. "
            f"{sorted(missing)[:2]} ({len(missing)}, of them restored by a backfill: "
            f"{len(set(missing) & record.restored)}), unexpected or twice e.g. {list(extra)[:2]}"
        )
    return out, expected
