"""Smoke test of the real-time bench with tiny sizes on the stack's broker: every way delivers
every record it was sent, the figures are sane and the chart is written (timings are the
script's to print, never a test's to assert)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_realtime_bench_measures_every_record_every_way(stack, bench_script, tmp_path: Path) -> None:
    realtime = bench_script("realtime")
    results = realtime.bench(stack.kafka_servers, tmp_path / "runs", records=10, rate=10.0, rounds=1)
    for way in ("platform", "floor", "micro_batch"):
        figures = results[way]
        assert figures["records"] == 10, (way, figures)  # every record measured: none lost on the way
        assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"], (way, figures)
    assert [(r["way"], r["records"]) for r in results["runs"]] == [
        ("floor", 10), ("platform", 10), ("micro_batch", 10),
    ]  # fmt: skip
    assert results["p99_vs_floor"] > 0 and results["micro_batch_vs_lane_p50"] > 0
    realtime.chart(results, tmp_path / "realtime.png")
    assert (tmp_path / "realtime.png").stat().st_size > 10_000
