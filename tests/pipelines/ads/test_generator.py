"""The ads generator is deterministic, its summary counts what it wrote, lateness stays in bounds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.spec import Pipeline
from pipelines.ads.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)
END = START + timedelta(hours=8)


def lines(files: list[str], kind: str) -> list[str]:
    return [line for f in files if f"/{kind}/" in f for line in Path(f).read_text().splitlines()]


def parsed(raw: list[str]) -> list[dict]:
    out = []
    for line in raw:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def max_lateness(events: list[dict], field: str) -> timedelta:
    """How far each event is behind the newest one delivered before it (files in order)."""
    latest, worst = None, timedelta(0)
    for event in events:
        try:
            at = datetime.fromisoformat(event[field].replace("Z", "+00:00"))
        except (KeyError, ValueError):
            continue
        if latest is not None:
            worst = max(worst, latest - at)
        latest = at if latest is None else max(latest, at)
    return worst


def test_same_seed_same_files_and_counts_add_up(ads: Pipeline, tmp_path: Path) -> None:
    options = {"events": 400, "files": 3, "seed": 9, "start": START, "end": END, "late_fraction": 0.1}
    one = generate(Landing(Lake(str(tmp_path / "a")), ads), **options)  # type: ignore[arg-type]
    two = generate(Landing(Lake(str(tmp_path / "b")), ads), **options)  # type: ignore[arg-type]
    assert one.as_dict(with_ids=True) | {"files": []} == two.as_dict(with_ids=True) | {"files": []}
    assert [Path(f).read_text() for f in one.files] == [Path(f).read_text() for f in two.files]
    assert len(one.files) == 6  # 3 impressions files and 3 clicks files

    impressions, clicks = lines(one.files, "impressions"), lines(one.files, "clicks")
    assert len(impressions) + len(clicks) == one.lines
    assert one.impressions == 400 and one.clicks > 40 and one.late_impressions > 0
    good = parsed(impressions) + parsed(clicks)
    assert len({e.get("impression_id") or e.get("click_id") for e in good}) == one.impressions + one.clicks
    assert one.lines == one.impressions + one.clicks + one.duplicates + one.malformed
    times = sorted(e["impression_time"] for e in good if e.get("impression_time", "").startswith("2026"))
    assert times[0] >= "2026-01-01T00:00" and times[-1] < "2026-01-01T08:00"
    # lateness (delivery order within each stream) stays within the pipeline's bounds
    assert max_lateness(parsed(impressions), "impression_time") < timedelta(hours=2)
    assert max_lateness(parsed(clicks), "click_time") < timedelta(hours=3)
    # every expected attribution is a click on the same ad within the hour after the impression
    by_id = {e.get("impression_id") or e.get("click_id"): e for e in good}
    assert one.attributions
    for impression_id, click_id in one.attributions:
        shown, clicked = by_id[impression_id], by_id[click_id]
        assert shown["ad_id"] == clicked["ad_id"]
        gap = datetime.fromisoformat(clicked["click_time"][:-1]) - datetime.fromisoformat(
            shown["impression_time"][:-1]
        )
        assert timedelta(0) <= gap <= timedelta(hours=1)


def test_too_late_events_are_delivered_beyond_their_bounds(ads: Pipeline, tmp_path: Path) -> None:
    summary = generate(
        Landing(Lake(str(tmp_path / "lake")), ads),
        events=600,
        seed=3,
        start=START,
        end=END,
        too_late_fraction=0.05,
        late_fraction=0.0,
        duplicate_fraction=0.0,
        malformed_fraction=0.0,
    )
    assert summary.too_late_impressions > 0 and summary.too_late_clicks > 0
    assert max_lateness(parsed(lines(summary.files, "impressions")), "impression_time") > timedelta(hours=2)
