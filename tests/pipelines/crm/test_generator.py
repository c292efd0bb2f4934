"""The CRM generator is deterministic, continues one database across calls, and its summary
counts what it delivered."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakehouse import registry
from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from pipelines.crm.generator import generate

START = datetime(2026, 3, 1, 8, tzinfo=UTC)


@pytest.fixture
def landing(tmp_path: Path) -> Landing:
    return Landing(Lake(str(tmp_path / "lake")), registry.get("pipelines", "crm"))


def lines(files: list[str]) -> list[str]:
    return [line for f in files for line in Path(f).read_text().splitlines()]


def test_same_seed_same_feed_and_counts_add_up(tmp_path: Path) -> None:
    crm = registry.get("pipelines", "crm")
    feeds = []
    for run in ("a", "b"):
        landing = Landing(Lake(str(tmp_path / run)), crm)
        summary = generate(landing, events=800, files=2, seed=3, start=START, end=START + timedelta(hours=1))
        feeds.append((summary, lines(summary.files)))
    (summary, delivered), (_, again) = feeds
    assert delivered == again and len(summary.files) == 4
    assert (
        len(delivered)
        == summary.lines
        == summary.changes + summary.duplicates + summary.malformed + summary.quarantined
    )
    events = [json.loads(line) for line in delivered if line.startswith("{") and line.endswith("}")]
    changes = {
        (e["source"]["table"], e["source"]["lsn"]) for e in events if e["op"] in "cud" and e["source"]["lsn"]
    }
    assert len(changes) == summary.changes == summary.customer_changes + summary.order_changes
    positions = [e["source"]["lsn"] for e in events if e["source"]["lsn"]]
    assert positions != sorted(positions), "events arrive out of log order"
    ops = {e["op"] for e in events}
    assert {"c", "u", "d"} <= ops
    # re-inserts after a delete: a customer created twice
    created = [
        e["after"]["customer_id"]
        for e in events
        if e["op"] == "c" and e["source"]["table"] == "customers" and e["after"]["customer_id"]
    ]
    assert len(created) > len(set(created))


def test_calls_continue_one_database_and_a_snapshot_comes_first(landing: Landing) -> None:
    first = generate(landing, events=300, seed=1, start=START, end=START + timedelta(minutes=30))
    second = generate(landing, events=300, seed=2, start=START + timedelta(minutes=30), snapshot=True,
                      end=START + timedelta(hours=1), quarantine_fraction=0, malformed_fraction=0, duplicate_fraction=0)  # fmt: skip
    assert second.snapshot_rows == len(first.customers) + len(first.orders)
    events = [json.loads(line) for line in lines(second.files)]
    snapshot = [e for e in events if e["op"] == "r"]
    assert len(snapshot) == second.snapshot_rows
    assert {e["after"]["customer_id"] for e in snapshot if e["source"]["table"] == "customers"} == set(
        first.customers
    )
    assert len({e["source"]["lsn"] for e in snapshot}) == 1, "a snapshot is read at one log position"
    earlier = [json.loads(line) for line in lines(first.files) if line.startswith("{") and line.endswith("}")]
    before = max(e["source"]["lsn"] or 0 for e in earlier)
    after = min(e["source"]["lsn"] for e in events if e["op"] != "r")
    assert before == snapshot[0]["source"]["lsn"] < after, "the snapshot is read where the log stands"
    open_first = {v.customer_id for v in first.customer_versions if v.valid_to is None}
    assert open_first == set(first.customers), "one open version per live customer"
