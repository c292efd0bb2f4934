"""Slices and the flow plan: what a backfill reads and replaces; dedupe in batch."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from lakehouse.core.times import floor_to
from lakehouse.flows import affected_slice, input_slice
from lakehouse.plan.flow import dedupe
from lakehouse.run.batch import plan
from lakehouse.slices import Slice
from lakehouse.spec import Aggregate, Pipeline

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(hour: int, minute: int = 0) -> datetime:
    return T0.replace(hour=hour, minute=minute)


def test_slice_predicate_and_validation() -> None:
    s = Slice(datetime(2026, 1, 1), datetime(2026, 1, 2))  # naive means UTC
    assert s.start == T0
    assert s.condition("`event_time`") == (
        "`event_time` >= TIMESTAMP '2026-01-01 00:00:00.000000' AND "
        "`event_time` < TIMESTAMP '2026-01-02 00:00:00.000000'"
    )
    assert Slice().condition("x") == "true" and Slice().is_full
    with pytest.raises(ValueError, match="must be before"):
        Slice(at(2), at(1))


def test_windows_read_ahead_by_their_size_and_cascade_to_overlapping_windows(iot: Pipeline) -> None:
    stats = iot.table("gold.device_type_stats")  # 10-minute windows sliding every 5
    hour = Slice(at(1), at(2))
    assert input_slice(stats, hour) == Slice(at(1), at(2, 10))
    # windows overlapping [01:00, 02:00) start at 00:55 at the earliest
    assert affected_slice(stats, hour) == Slice(at(0, 55), at(2))
    assert affected_slice(stats, Slice(at(1, 3), at(2))) == Slice(at(0, 55), at(2))
    status = iot.table("gold.device_status")
    assert input_slice(status, hour) == hour and affected_slice(status, hour) == hour
    assert isinstance(stats.write, Aggregate)
    assert floor_to(at(1, 7), stats.write.window.slide_delta) == at(1, 5)


def test_backfill_plan_with_and_without_downstream(iot: Pipeline) -> None:
    hour = Slice(at(1), at(2))
    only = plan(iot, ["silver.device_events"], hour, downstream=False)
    assert [(t.name, s) for t, s in only] == [("silver.device_events", hour)]
    cascade = plan(iot, ["silver.device_events"], hour, downstream=True)
    assert [(t.name, s) for t, s in cascade] == [
        ("silver.device_events", hour),
        ("gold.device_type_stats", Slice(at(0, 55), at(2))),
        ("gold.device_status", hour),
        ("gold.device_anomaly_scores", hour),
    ]
    assert [t.name for t, _ in plan(iot, None, Slice(), downstream=False)] == list(iot.table_names)


def test_batch_dedupe_is_deterministic(spark) -> None:
    """A key's least row, however the rows arrive: its other columns compared in order (a null
    first), nested ones too; with a column of a type without an order (a map), by its JSON text.
    The columns keep their order; a key that is null is a key like any other."""
    rows = [
        ("a", 2, [3], None),
        ("a", 1, [2, 9], (1,)),
        ("b", 5, [1], (2,)),
        ("a", 1, [2], (0,)),
        (None, 7, [], None),
    ]
    schema = "id STRING, v INT, tags ARRAY<INT>, s STRUCT<n: INT>"
    want = [(None, 7, [], None), ("a", 1, [2], (0,)), ("b", 5, [1], (2,))]
    for ordering in (rows, list(reversed(rows))):
        df = spark.createDataFrame(ordering, schema).repartition(3)
        deduped = dedupe(df, ("id",), streaming=False)
        assert deduped.columns == ["id", "v", "tags", "s"]
        assert sorted(deduped.collect(), key=str) == sorted(want, key=str)
        mapped = df.withColumn("m", F.create_map(F.lit("k"), F.col("v")))  # maps have no order
        assert sorted(r[:2] for r in dedupe(mapped, ("id",), streaming=False).collect() if r[0]) == [
            ("a", 1), ("b", 5),
        ]  # fmt: skip


def test_time_range_joins_read_their_upstreams_around_the_slice(ads: Pipeline) -> None:
    hour = Slice(at(10), at(11))
    outer = ads.table("gold.impression_clicks")  # clicks up to 1 hour after the impression
    impressions, clicks = outer.upstreams
    assert input_slice(outer, hour, impressions) == hour  # type: ignore[arg-type]
    assert input_slice(outer, hour, clicks) == Slice(at(10), at(12))  # type: ignore[arg-type]
    # a change to clicks in [10:00, 11:00) reaches impressions from 09:00 on
    assert affected_slice(outer, hour, clicks) == Slice(at(9), at(11))  # type: ignore[arg-type]
    inner = ads.table("gold.attributed_clicks")  # sliced on click time: impressions 1 hour before
    impressions, clicks = inner.upstreams
    assert input_slice(inner, hour, impressions) == Slice(at(9), at(11))  # type: ignore[arg-type]
    assert affected_slice(inner, hour, impressions) == Slice(at(10), at(12))  # type: ignore[arg-type]
    assert input_slice(inner, Slice(), impressions) == Slice()  # type: ignore[arg-type]


def test_stateful_flows_replay_their_history_and_read_past_the_slice(ads: Pipeline) -> None:
    from attrs import evolve

    from lakehouse.spec import State

    activity = ads.table("gold.user_activity")  # timeout 30 minutes, unbounded history
    impressions, clicks = activity.upstreams
    hour = Slice(at(10), at(11))
    # from the beginning, to end + timeout + the upstream's watermark delay
    assert input_slice(activity, hour, impressions) == Slice(None, at(13, 30))  # type: ignore[arg-type]
    assert input_slice(activity, hour, clicks) == Slice(None, at(14, 30))  # type: ignore[arg-type]
    assert affected_slice(activity, hour, clicks) == Slice(at(10), None)  # type: ignore[arg-type]
    bounded = evolve(activity, state=State("30 minutes", history="2 hours"))
    assert input_slice(bounded, hour, impressions) == Slice(at(8), at(13, 30))  # type: ignore[arg-type]
    assert affected_slice(bounded, hour, impressions) == Slice(at(10), at(13, 30))  # type: ignore[arg-type]


def test_backfill_plan_cascades_through_joins_and_state(ads: Pipeline) -> None:
    hour = Slice(at(10), at(11))
    cascade = dict(
        (t.name, s) for t, s in plan(ads, ["silver.clicks"], hour, downstream=True)
    )  # fmt: skip
    assert cascade == {
        "silver.clicks": hour,
        "gold.attributed_clicks": hour,
        "gold.impression_clicks": Slice(at(9), at(11)),
        "gold.user_activity": Slice(at(10), None),
        "gold.campaign_ctr": hour,
        "gold.user_status": Slice(at(10), None),
    }


def test_a_stateful_flow_refuses_to_run_as_a_batch_query(ads: Pipeline, lake) -> None:
    from lakehouse.flows import build
    from lakehouse.spec import SpecError

    with pytest.raises(SpecError, match=r"'gold.user_activity' keeps per-key state.*replays it"):
        build(None, lake, ads, ads.table("gold.user_activity"), streaming=False)  # type: ignore[arg-type]
