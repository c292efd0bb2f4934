"""The ads pipeline gets its DAGs from the factory like every pipeline: no DAG code of its own."""

from __future__ import annotations

from pathlib import Path

from lakehouse.config import Settings


def test_the_factory_builds_the_same_dags_for_ads_as_for_iot(tmp_path: Path) -> None:
    from lakehouse.orchestration.factory import build_all

    dags = build_all(Settings(root=str(tmp_path / "lake")))
    kinds = {
        pipeline: {d.removeprefix(f"{pipeline}_") for d in dags if d.startswith(f"{pipeline}_")}
        for pipeline in ("iot", "ads")
    }
    assert kinds["ads"] and kinds["ads"] == kinds["iot"]
    assert {"ads_stream_deploy", "ads_incremental", "ads_backfill"} <= set(dags)
    backfill_flows = dags["ads_backfill"].params["flows"]
    assert "gold.user_activity" in backfill_flows and "gold.impression_clicks" in backfill_flows
