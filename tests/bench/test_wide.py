"""Smoke test of the wide-orders backfill benchmark with tiny sizes: it runs end to end, every
way gives the generator's answer, and it writes sane figures and a chart (timings are the
script's to print, never a test's to assert)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_wide_bench_gives_the_generators_answers_every_way(spark, bench_script, tmp_path: Path) -> None:
    wide = bench_script("wide")
    results = wide.bench(spark, tmp_path / "work", orders=2000, files=3, warm_up=False, process_runs=1)
    wide.chart(results, tmp_path / "wide.png")
    (tmp_path / "wide.json").write_text(json.dumps(results))
    record = results["generator"]
    assert record["lines"] == 2000 + 20 and record["amount_cents"] > 0, record
    landed = sum(
        len(f.read_text().splitlines())
        for f in (tmp_path / "work" / "day" / "source" / "landing").rglob("*.json")
    )
    assert landed == record["lines"], "every order once, every 100th twice"
    assert results["files"] == 3
    want = {"silver_orders": 2000}
    for gold in ("revenue_by_country", "orders_by_payment"):
        want |= {f"{gold}_orders": 2000, f"{gold}_amount_cents": record["amount_cents"]}
    # five ways: in this session, and `lakehouse backfill` and the hand-written jobs as processes
    assert results["answers"] == dict.fromkeys(
        ("plain_batch", "backfill", "user_backfill", "plain_process", "cli_backfill"), want
    )
    for key in (
        "backfill_ratio", "user_backfill_ratio", "plain_batch_rows_per_s_per_core", "cli_backfill_ratio",
        "plain_batch_process_seconds", "cli_backfill_seconds",
    ):  # fmt: skip
        assert isinstance(results[key], float) and results[key] > 0, results
    assert set(results["plain_batch_layers"]) == {"bronze", "silver", "gold"}, results["plain_batch_layers"]
    for run in ("backfill_phases", "user_backfill_phases"):
        assert set(results[run]) == {"bronze", "silver", "gold", "coordination"}, results[run]
    assert (tmp_path / "wide.png").read_bytes()[:4] == b"\x89PNG"
    assert "orders" not in json.dumps(sorted(wide.registry.discover("pipelines"))), "never in production DAGs"
