"""Smoke test of the YSB benchmark script with tiny sizes: it runs end to end and writes sane
figures (not timings: those are the script's to print, never a test's to assert)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

KEYS = (
    "platform_rows_per_s_per_core", "plain_spark_rows_per_s_per_core", "ratio", "freshness_p50_s",
    "freshness_p95_s", "backfill_rows_per_s_per_core", "plain_freshness_p50_s", "backfill_ratio",
    "plain_batch_rows_per_s_per_core", "user_backfill_ratio", "user_backfill_rows_per_s_per_core",
)  # fmt: skip


@pytest.mark.slow
def test_ysb_bench_writes_sane_figures_and_a_chart(spark, bench_script, tmp_path: Path) -> None:
    ysb = bench_script("ysb")
    # one regime: the throughput regime is the same function at other sizes
    # (`lakehouse backfill` and the hand-written jobs as processes: test_wide.py, the same harness)
    results = ysb.bench(
        spark, tmp_path / "work", events=3000, files=3, probes=2, interval="0 seconds", warm_up=False,
        process_runs=0,
    )  # fmt: skip
    ysb.chart(results, tmp_path / "latest.png")
    (tmp_path / "latest.json").write_text(json.dumps(results))
    assert all(isinstance(results[k], float) and results[k] > 0 for k in KEYS), results
    assert results["freshness_p50_s"] <= results["freshness_p95_s"] and results["freshness_probes"] == 2
    assert "throughput" not in results, "no throughput regime unless asked for"
    views = results["gold_views"]  # same data, same answer, five ways
    assert len(set(views.values())) == 1 and views["plain_batch"] > 0, views
    assert set(views) == {"platform", "plain_spark", "backfill", "user_backfill", "plain_batch"}
    for run in ("backfill", "user_backfill"):  # the steps' phases within the steps, the steps within the run
        phases = results[f"{run}_phases"]
        assert set(phases) == {"bronze", "silver", "gold", "coordination"}, phases
        assert sum(phases["bronze"].values()) > 0 and "other" in phases["gold"], phases
        assert all(spent >= 0 for layer in phases.values() for spent in layer.values()), phases
    assert {"plan", "write"} <= set(results["backfill_phases"]["gold"]), results["backfill_phases"]
    catch_up = results["user_backfill_phases"]["coordination"]["other"]
    assert catch_up > results["backfill_phases"]["coordination"]["other"], "leases, catch-up, cut"
    layers = results["plain_batch_layers"]
    assert list(layers) == ["bronze", "silver", "gold"] and all(s > 0 for s in layers.values()), layers
    assert (tmp_path / "latest.png").read_bytes()[:4] == b"\x89PNG"
    assert "ysb" not in json.dumps(sorted(ysb.registry.discover("pipelines"))), "never in production DAGs"
