"""Smoke test of the YSB benchmark script with tiny sizes: it runs end to end and writes sane
figures (not timings: those are the script's to print, never a test's to assert)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

KEYS = (
    "platform_rows_per_s_per_core", "plain_spark_rows_per_s_per_core", "ratio", "freshness_p50_s",
    "freshness_p95_s", "backfill_rows_per_s_per_core", "plain_freshness_p50_s", "backfill_ratio",
    "plain_batch_rows_per_s_per_core",
)  # fmt: skip
REGIME = ("ratio", "backfill_ratio", "platform_rows_per_s_per_core", "plain_batch_rows_per_s_per_core")


@pytest.mark.slow
def test_ysb_bench_writes_sane_figures_and_a_chart(spark, bench_script, tmp_path: Path) -> None:
    ysb = bench_script("ysb")
    results = ysb.bench(
        spark, tmp_path / "work", events=3000, files=3, probes=2, interval="0 seconds",
        throughput_events=2000, throughput_files=2,
    )  # fmt: skip
    ysb.chart(results, tmp_path / "latest.png")
    (tmp_path / "latest.json").write_text(json.dumps(results))
    assert all(isinstance(results[k], float) and results[k] > 0 for k in KEYS), results
    assert results["freshness_p50_s"] <= results["freshness_p95_s"] and results["freshness_probes"] == 2
    large = results["throughput"]
    assert large["events"] == 2000, large
    assert all(isinstance(large[k], float) and large[k] > 0 for k in REGIME), large
    for views in (results["gold_views"], large["gold_views"]):  # same data, same answer, four ways
        assert views["platform"] == views["plain_spark"] == views["backfill"] == views["plain_batch"] > 0
    assert (tmp_path / "latest.png").read_bytes()[:4] == b"\x89PNG"
    assert "ysb" not in json.dumps(sorted(ysb.registry.discover("pipelines"))), "never in production DAGs"
