"""docs/query.md runs as written: its queries against a real server over the demo data, its
beeline command, its DB-API and Spark-free Python snippets."""

from __future__ import annotations

import math
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakehouse import registry
from lakehouse.core.config import settings
from lakehouse.serving.tables import read_polars

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
PAGE = (REPO / "docs" / "query.md").read_text()
FENCE = r"\n```[a-z]*\n(.*?)\n```"
# The crm-* queries run in tests/pipelines/crm/test_pipeline.py, over the CRM pipeline's tables.
QUERIES = {
    name: sql
    for name, sql in re.findall(r"<!-- sql: (\S+) -->" + FENCE, PAGE, re.DOTALL)
    if not name.startswith("crm-")
}


def block(kind: str, name: str) -> str:
    match = re.search(rf"<!-- {kind}: {name} -->" + FENCE, PAGE, re.DOTALL)
    assert match, f"docs/query.md has no '<!-- {kind}: {name} -->' block"
    return match[1]


def on_port(text: str, port: int) -> str:
    """The examples use the default port; tests run the server on a free one."""
    return text.replace("127.0.0.1:10000", f"127.0.0.1:{port}").replace("port=10000", f"port={port}")


def test_the_readme_has_the_analyst_examples() -> None:
    assert set(QUERIES) == {
        "avg-signal-last-hour", "devices-in-alert", "recent-windows", "rejected-lines",
        "flow-freshness", "status-at-version-1",
    }  # fmt: skip


def rounded_2(rounded: float, exact: float) -> bool:
    """SQL's ROUND(x, 2) rounds half up on the decimal text; Python's round() rounds the
    binary float (983.635 -> 983.63): accept either side of a half."""
    return math.isclose(rounded, exact, abs_tol=0.005 + 1e-9)


@pytest.fixture(scope="module")
def answers(served) -> dict[str, list[tuple]]:
    """Each query's rows; ``asked`` holds when they ran (the queries say "the last hour")."""
    asked = datetime.now(UTC)
    rows: dict[str, list[tuple]] = {name: served.query(sql) for name, sql in QUERIES.items()}
    rows["asked"] = [(asked, datetime.now(UTC))]
    return rows


def matches(answered: dict[str, tuple[int, float]], expected: dict[str, tuple[int, float]]) -> bool:
    return answered.keys() == expected.keys() and all(
        answered[t][0] == n and rounded_2(answered[t][1], avg) for t, (n, avg) in expected.items()
    )


def test_average_signal_per_device_type_in_the_last_hour(answers, demo) -> None:
    answered = {r[0]: (r[1], r[2]) for r in answers["avg-signal-last-hour"]}
    # "the last hour" moves while the queries run: events leave it one by one, so the answer is
    # the expected one for some cut-off between the two ends (at an end, or at an event that left)
    first, last = (at - timedelta(hours=1) for at in answers["asked"][0])
    leaving = [e["event_time"] for e in demo.expected.events if first < e["event_time"] <= last]
    expected = [demo.expected.avg_signal_by_type(since=cutoff) for cutoff in (first, last, *leaving)]
    assert any(matches(answered, e) for e in expected), (answered, expected)
    assert answered or answers["asked"][0][0] - demo.end > timedelta(minutes=55)  # (as below)


def test_devices_in_alert(answers, demo) -> None:
    rows = answers["devices-in-alert"]
    assert {r[0] for r in rows} == {d for d, s in demo.expected.status.items() if s[2]} != set()
    assert [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)


def test_recent_windows(answers, demo) -> None:
    rows = answers["recent-windows"]
    # gold holds the windows the watermark closed; "the last half hour" of them shrinks as the demo
    # ages (a slow session asks long after it was built): as many rows as gold holds then
    starts = [
        s.replace(tzinfo=UTC) for s in read_polars("gold.device_type_stats", lake=demo.lake)["window_start"]
    ]
    first, last = answers["asked"][0]
    recent = [sum(s >= at - timedelta(minutes=30) for s in starts) for at in (last, first)]
    assert recent[0] <= len(rows) <= recent[1], (len(rows), recent, max(starts), first)
    for start, device_type, events, avg, high in rows:
        count, mean, _, maximum = demo.expected.type_stats[(start.replace(tzinfo=UTC), device_type)]
        assert (events, high) == (count, maximum) and rounded_2(avg, mean)


def test_rejected_lines(answers, demo) -> None:
    rows = answers["rejected-lines"]
    assert sum(r[1] for r in rows) == demo.expected.rejected > 0
    assert {r[0].split(":")[0] for r in rows} <= {
        "not a JSON object",
        "wrong type for",
        "missing required field(s)",
    }


def test_flow_freshness(answers) -> None:
    flows = {r[0] for r in answers["flow-freshness"]}
    assert flows == set(
        registry.get("pipelines", "iot").configured("files").table_names
    )  # every flow that ran


def test_time_travel_example(answers, demo) -> None:
    first = read_polars("gold.device_status", version=1, lake=demo.lake).sort("device")
    assert [(r[0], r[1], r[2]) for r in answers["status-at-version-1"]] == list(
        first.select("device", "signal", "alert").iter_rows()
    )


def test_beeline_example(served, tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", on_port(block("run", "beeline"), served.port)],
        env=served.env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    counts = dict(served.query("SELECT device_type, count(*) FROM gold.device_status GROUP BY device_type"))
    for device_type, devices in counts.items():
        assert re.search(rf"\|\s*{device_type}\s*\|\s*{devices}\s*\|", result.stdout), result.stdout


def test_dbapi_example(served, demo, capsys) -> None:
    exec(on_port(block("python", "dbapi"), served.port), {})
    printed = capsys.readouterr().out.split()
    assert set(printed[::2]) == {d for d, s in demo.expected.status.items() if s[2]}


def test_spark_free_example(demo, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("LAKEHOUSE_ROOT", demo.lake.root)
    settings.cache_clear()
    scope: dict = {}
    try:
        exec(block("python", "spark-free"), scope)
    finally:
        settings.cache_clear()
    assert scope["status"].height == len(demo.expected.status)
    assert scope["stats"].shape[0] == len(demo.expected.type_stats)
    assert scope["events"].height == len(demo.expected.events)
    assert scope["bronze"].num_rows > len(demo.expected.events)  # with duplicates and rejected lines
    averages = dict(scope["per_type"].iter_rows())
    expected = demo.expected.avg_signal_by_type(since=demo.start - timedelta(hours=1))
    assert averages.keys() == expected.keys()
    assert all(math.isclose(averages[k], expected[k][1]) for k in expected)
    assert "signal" in capsys.readouterr().out
