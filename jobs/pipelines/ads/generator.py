"""Seeded generator of ad traffic: impressions and clicks as JSON-lines files.

Users visit in bursts: a visit shows them a few ads (impressions), some of which they click
within the hour. Besides that clean traffic it produces what real ad servers deliver: late
impressions and clicks (within their lateness bounds, 2 h and 3 h), some beyond them, clicks
more than an hour after their impression (not attributable), clicks on ads never shown,
retried duplicates and malformed lines. The same seed and options give the same files; the
returned summary says how many of each were written and which clicks should be attributed to
which impression, so tests can check every line is accounted for.

Lateness is delivery order: a late event keeps its event time but is delivered after events up
to ``delay`` newer than it (of its own stream), so its lateness never exceeds ``delay``
whatever the split of files into waves. Files are cut by delivery time: the k-th impressions
file and the k-th clicks file cover the same stretch of delivery.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakehouse.plan.generators import chunks, iso, malformed, time_range, uid
from lakehouse.spec import parse_duration
from pipelines.ads import constants

if TYPE_CHECKING:
    from lakehouse.plan.generators import Landing

IMPRESSIONS = "bronze.impressions"
CLICKS = "bronze.clicks"
IMPRESSIONS_LATE = parse_duration(constants.IMPRESSIONS_LATE, "IMPRESSIONS_LATE")  # the pipeline's bounds
CLICKS_LATE = parse_duration(constants.CLICKS_LATE, "CLICKS_LATE")
ATTRIBUTION = parse_duration(constants.ATTRIBUTION, "ATTRIBUTION")


@dataclass
class Summary:
    lines: int = 0
    impressions: int = 0
    clicks: int = 0
    users: int = 0
    visits: int = 0
    late_impressions: int = 0
    late_clicks: int = 0
    too_late_impressions: int = 0
    too_late_clicks: int = 0
    slow_clicks: int = 0  # more than the attribution window after their impression
    orphan_clicks: int = 0  # on an ad that was never shown
    duplicates: int = 0
    malformed: int = 0
    files: list[str] = field(default_factory=list)
    # (impression_id, click_id) pairs the attribution must find (both within their bounds)
    attributions: list[tuple[str, str]] = field(default_factory=list)
    first_event_time: str | None = None
    last_event_time: str | None = None

    def as_dict(self, with_ids: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_ids:
            data.pop("attributions")
        return data


@dataclass
class _Event:
    stream: str  # IMPRESSIONS or CLICKS
    body: dict[str, Any]
    at: datetime  # event time
    delivered: datetime  # when it reaches the landing zone (event time + delay)
    too_late: bool = False


def generate(
    landing: Landing,
    *,
    events: int = 1000,
    files: int = 1,
    seed: int = 42,
    start: datetime | None = None,
    end: datetime | None = None,
    users: int = 50,
    campaigns: int = 4,
    click_rate: float = 0.15,
    slow_click_fraction: float = 0.05,
    orphan_click_fraction: float = 0.02,
    late_fraction: float = 0.05,
    too_late_fraction: float = 0.0,
    duplicate_fraction: float = 0.02,
    malformed_fraction: float = 0.01,
    file_prefix: str | None = None,
) -> Summary:
    """Write about ``events`` impressions (and their clicks, duplicates and malformed lines) as
    ``files`` impressions files plus as many clicks files, event times in ``[start, end)``
    (default: the 6 hours up to now)."""
    rng = random.Random(seed)
    start, end = time_range(start, end, timedelta(hours=6))
    summary = Summary()
    stream: list[_Event] = []

    def deliver(kind: str, body: dict[str, Any], at: datetime) -> _Event:
        bound = IMPRESSIONS_LATE if kind == IMPRESSIONS else CLICKS_LATE
        roll, delay, too_late = rng.random(), timedelta(0), False
        if roll < too_late_fraction:
            delay, too_late = bound + timedelta(minutes=rng.uniform(20, 60)), True
        elif roll < too_late_fraction + late_fraction:
            delay = timedelta(seconds=rng.uniform(60, bound.total_seconds() * 0.8))
        event = _Event(kind, body, at, at + delay, too_late)
        stream.append(event)
        late = delay > timedelta(0)
        if kind == IMPRESSIONS:
            summary.late_impressions += late and not too_late
            summary.too_late_impressions += too_late
        else:
            summary.late_clicks += late and not too_late
            summary.too_late_clicks += too_late
        return event

    mean_visit = 3.5  # impressions per visit
    visit_gap = (end - start).total_seconds() / max(1.0, events / mean_visit)
    clock = start
    seen_users: set[str] = set()
    while summary.impressions < events:
        clock += timedelta(seconds=rng.expovariate(1 / visit_gap))
        if clock >= end:
            break
        user = f"user-{rng.randrange(1, users + 1):04d}"
        seen_users.add(user)
        summary.visits += 1
        moment = clock
        for _ in range(rng.randint(1, 6)):
            if moment >= end or summary.impressions >= events:
                break
            ad, campaign = f"ad-{rng.getrandbits(40):010x}", f"campaign-{rng.randrange(1, campaigns + 1)}"
            impression = {
                "impression_id": uid(rng),
                "ad_id": ad,
                "campaign_id": campaign,
                "user_id": user,
                "impression_time": iso(moment),
            }
            shown = deliver(IMPRESSIONS, impression, moment)
            summary.impressions += 1
            if rng.random() < click_rate:
                slow = rng.random() < slow_click_fraction
                after = timedelta(minutes=rng.uniform(61, 100) if slow else rng.uniform(0.1, 59))
                if moment + after < end:
                    click = {
                        "click_id": uid(rng),
                        "ad_id": ad,
                        "user_id": user,
                        "click_time": iso(moment + after),
                    }
                    clicked = deliver(CLICKS, click, moment + after)
                    summary.clicks += 1
                    summary.slow_clicks += slow
                    if not (slow or shown.too_late or clicked.too_late):
                        summary.attributions.append((impression["impression_id"], click["click_id"]))
            if rng.random() < orphan_click_fraction:
                orphan = {
                    "click_id": uid(rng),
                    "ad_id": f"ad-{rng.getrandbits(40):010x}",
                    "user_id": user,
                    "click_time": iso(moment),
                }
                deliver(CLICKS, orphan, moment)
                summary.clicks += 1
                summary.orphan_clicks += 1
            # mostly short gaps, sometimes a pause long enough to go idle
            moment += timedelta(
                seconds=rng.uniform(10, 240) if rng.random() < 0.85 else rng.uniform(360, 1200)
            )
    summary.users = len(seen_users)

    deliveries: list[tuple[datetime, int, str, str]] = []  # (delivered, order, stream, line)
    for order, event in enumerate(stream):
        line = json.dumps(event.body)
        deliveries.append((event.delivered, order, event.stream, line))
        if rng.random() < duplicate_fraction:  # a retry, shortly after
            retry = event.delivered + timedelta(seconds=rng.uniform(1, 120))
            deliveries.append((retry, order, event.stream, line))
            summary.duplicates += 1
        if rng.random() < malformed_fraction:
            time_field = "impression_time" if event.stream == IMPRESSIONS else "click_time"
            bad = malformed(rng, event.body, wrong_type=(time_field, "yesterday"), missing="ad_id")
            deliveries.append((event.delivered, order, event.stream, bad))
            summary.malformed += 1
    deliveries.sort()
    summary.lines = len(deliveries)
    if stream:
        summary.first_event_time = iso(min(e.at for e in stream))
        summary.last_event_time = iso(max(e.at for e in stream))
    prefix = file_prefix or f"ads-{start:%Y%m%dT%H%M%S}-{seed}"
    for k, chunk in enumerate(chunks(deliveries, files)):
        for table in (IMPRESSIONS, CLICKS):
            lines = [line for _, _, kind, line in chunk if kind == table]
            if lines:
                path = landing.write_lines(table, f"{prefix}-{k:04d}.json", lines)
                summary.files.append(str(path))
    return summary
