"""Models in a continuous application, on the IoT pipeline's anomaly model: trained and
evaluated on generated ground truth, registered, promoted through its gate; a running stream
switches to a promoted version at a batch boundary with no row scored twice or missed; a
backfill scores as the stream did (stream = batch for the same input and version); a missing
model, or a broken version, fails the flow clearly or quarantines its rows, as declared."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from lakehouse.core.lake import Lake
from lakehouse.models.scoring import ScoredFlow
from lakehouse.models.store import ModelStore, ModelUnavailable, PromotionRefused
from lakehouse.models.training import train
from lakehouse.plan.generators import Landing
from lakehouse.run.batch import backfill
from lakehouse.run.stream import FlowFailed, StreamRunner
from lakehouse.slices import Slice
from lakehouse.spec import Pipeline
from pipelines.iot.generator import generate

# slow: long Spark scenarios on module/session fixtures (tests/conftest.py: test tiers)
pytestmark = pytest.mark.slow
START = datetime(2026, 3, 1, 8, tzinfo=UTC)
SCORES = "gold.device_anomaly_scores"
UPSTREAM = ["bronze.device_events", "silver.device_events"]


def land(lake: Lake, iot: Pipeline, wave: int) -> dict[str, str]:
    """Land one hour of events; the anomalies the generator planted (event id -> kind)."""
    return generate(
        Landing(lake, iot), events=1200, seed=wave, start=START + timedelta(hours=wave),
        end=START + timedelta(hours=wave + 1), anomaly_fraction=0.02, late_fraction=0.0,
    ).anomalies  # fmt: skip


def scores(spark, lake: Lake):
    return spark.read.format("delta").load(lake.table(SCORES))


@pytest.fixture(scope="module")
def scenario(spark, iot: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two hours of events with anomalies; version 1 trained and promoted on the first; the
    scores flow running continuously while version 2 is promoted between the two hours."""
    lake = Lake(str(tmp_path_factory.mktemp("models") / "lake"))
    store = ModelStore(lake)
    model = iot.model("iot_anomaly")
    planted = land(lake, iot, 0)
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select(UPSTREAM))
    first = train(
        spark, lake, iot, model, train_range=Slice(START, START + timedelta(minutes=40)),
        eval_range=Slice(START + timedelta(minutes=40), START + timedelta(hours=1)), promote=True, by="test",
    )  # fmt: skip
    runner = StreamRunner(spark, lake, iot)
    query = runner.start(iot.table(SCORES), _continuous())
    try:
        query.processAllAvailable()
        half = Slice(START + timedelta(minutes=30), START + timedelta(hours=1))
        second = train(
            spark, lake, iot, model, train_range=Slice(START, half.start), eval_range=half, by="test"
        )
        store.promote(model, second.version.version, by="test", force=True)
        land(lake, iot, 1)
        runner.run_incremental(iot.select(UPSTREAM))
        query.processAllAvailable()  # the same query (no restart) scores the second hour
    finally:
        query.stop()
        runner.close()
    return {"lake": lake, "first": first, "second": second, "query_id": str(query.id), "planted": planted}


def test_the_registered_metrics_are_those_of_the_held_out_rows_and_the_planted_anomalies(
    spark, scenario: dict
) -> None:
    """Precision and recall recomputed here, in plain Python, from the rows training held out (silver
    at the version it read, in the evaluation range), the model's own rule over its artifact
    (more than k MADs from the type's median) and the anomalies the generator planted."""
    version = scenario["first"].version
    held_out = (
        spark.read.format("delta")
        .option("versionAsOf", version.trained_on_version)
        .load(scenario["lake"].table("silver.device_events"))
        .where(
            f"event_time >= '{version.eval_start.isoformat()}' AND event_time < '{version.eval_end.isoformat()}'"
        )
        .select("event_id", "device_type", "signal")
        .collect()
    )
    assert len(held_out) == version.eval_rows
    types, k = version.artifact["types"], float(version.artifact["k"])
    flagged = {
        r.event_id
        for r in held_out
        if r.device_type in types
        and abs(r.signal - types[r.device_type]["median"]) / types[r.device_type]["mad"] > k
    }
    labelled = {r.event_id for r in held_out} & set(scenario["planted"])
    assert labelled, "the evaluation range holds planted anomalies"
    assert version.metrics["precision"] == pytest.approx(
        len(flagged & labelled) / len(flagged), abs=5e-5
    )  # stored to 4 places
    assert version.metrics["recall"] == pytest.approx(len(flagged & labelled) / len(labelled), abs=5e-5)
    assert version.metrics["labelled"] == len(labelled)


def _continuous():
    from lakehouse.run.stream import Trigger

    return Trigger("continuous", "1 second")


def test_training_evaluates_on_ground_truth_and_registers_with_lineage(scenario: dict, iot: Pipeline) -> None:
    first = scenario["first"].version
    assert scenario["first"].promoted is not None and scenario["first"].refused == []
    assert first.version == 1 and first.trained_on == "silver.device_events" and first.train_rows > 500
    assert first.eval_start == START + timedelta(minutes=40) and first.eval_rows > 100
    metrics = first.metrics
    assert metrics["precision"] >= 0.9 and metrics["recall"] >= 0.5, metrics
    assert metrics["recall_where_threshold_missed"] > 0.3, "it finds anomalies the fixed threshold misses"
    assert set(first.artifact["types"]) == {"thermostat", "pressure", "humidity", "vibration"}
    store = ModelStore(scenario["lake"])
    assert [v.version for v in store.versions("iot_anomaly")] == [1, 2]
    assert [(m.version, m.previous) for m in store.moves("iot_anomaly", "champion")] == [(1, None), (2, 1)]
    strict = attrs.evolve(iot.model("iot_anomaly"), promote_when={"precision": ">= 1.01"})
    with pytest.raises(PromotionRefused, match=r"precision >= 1.01 \(got"):
        store.promote(strict, 1, by="test")
    assert store.aliased("iot_anomaly", "champion") == 2, "a refused promotion changes nothing"


def test_a_promotion_switches_versions_at_a_batch_boundary(spark, scenario: dict) -> None:
    lake = scenario["lake"]
    scored = scores(spark, lake)
    silver = spark.read.format("delta").load(lake.table("silver.device_events"))
    assert scored.count() == silver.count() == scored.select("event_id").distinct().count(), (
        "every event scored once: none twice, none missed"
    )
    hour = F.when(F.col("event_time") < START + timedelta(hours=1), 0).otherwise(1)
    versions = {(r[0], r[1]) for r in scored.select(hour, "_model_version").distinct().collect()}
    assert versions == {(0, 1), (1, 2)}, versions
    assert {r[0] for r in scored.select("_model").distinct().collect()} == {"iot_anomaly"}
    assert scored.where("anomaly").count() > 10


def test_a_backfill_scores_as_the_stream_did(spark, scenario: dict, iot: Pipeline, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    shutil.copytree(scenario["lake"].root, lake.root)
    streamed = scores(spark, lake).localCheckpoint()
    everything = Slice(START, START + timedelta(hours=2))
    backfill(spark, lake, iot, everything, [SCORES])
    assertDataFrameEqual(scores(spark, lake), streamed, checkRowOrder=False)  # each row with its version
    backfill(spark, lake, iot, everything, [SCORES], model_version=1)
    again = scores(spark, lake)
    assert {r[0] for r in again.select("_model_version").distinct().collect()} == {1}
    first_hour = F.col("event_time") < START + timedelta(hours=1)
    assertDataFrameEqual(again.where(first_hour), streamed.where(first_hour), checkRowOrder=False)


def test_a_replayed_batch_keeps_the_version_its_first_attempt_used(
    spark, scenario: dict, iot: Pipeline, tmp_path: Path
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    shutil.copytree(scenario["lake"].root, lake.root)
    step = ScoredFlow(spark, lake, iot, iot.table(SCORES)).micro_batch(str(tmp_path / "checkpoint"))
    events = spark.read.format("delta").load(lake.table("silver.device_events")).limit(5)
    assert {r["_model_version"] for r in step(events, 7).collect()} == {2}
    ModelStore(lake).promote(iot.model("iot_anomaly"), 1, by="test", force=True)
    assert {r["_model_version"] for r in step(events, 7).collect()} == {2}, (
        "batch 7 again: its recorded version"
    )
    assert {r["_model_version"] for r in step(events, 8).collect()} == {1}, "the next batch: the new one"


def test_a_promotion_while_a_batch_scores_takes_effect_from_the_next_batch(
    spark, scenario: dict, iot: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    shutil.copytree(scenario["lake"].root, lake.root)
    flow = ScoredFlow(spark, lake, iot, iot.table(SCORES))
    step = flow.micro_batch(str(tmp_path / "checkpoint"))
    events = spark.read.format("delta").load(lake.table("silver.device_events")).limit(5)
    scoring = flow.apply

    def promote_midway(rows, model):  # the promotion lands while batch 3 is being scored
        ModelStore(lake).promote(iot.model("iot_anomaly"), 1, by="test", force=True)
        monkeypatch.setattr(flow, "apply", scoring)
        return scoring(rows, model)

    monkeypatch.setattr(flow, "apply", promote_midway)
    assert {r["_model_version"] for r in step(events, 3).collect()} == {2}, (
        "batch 3: the version at its start"
    )
    assert ModelStore(lake).aliased("iot_anomaly", "champion") == 1
    assert {r["_model_version"] for r in step(events, 4).collect()} == {1}, "batch 4: the one promoted"
    records = {b: json.loads((tmp_path / "checkpoint" / "models" / str(b)).read_text()) for b in (3, 4)}
    assert {b: r["version"] for b, r in records.items()} == {3: 2, 4: 1}


def test_without_a_promoted_version_rows_wait_in_quarantine_or_the_flow_fails(
    spark, iot: Pipeline, tmp_path: Path
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    quarantined, silver = quarantine_every_score(spark, lake, iot)
    reasons = {r[0][0] for r in quarantined.select("_failed_expectations").distinct().collect()}
    assert len(reasons) == 1 and "has no version promoted to 'champion'" in reasons.pop()
    hour = Slice(START, START + timedelta(hours=1))
    [step] = backfill(spark, lake, iot, hour, [SCORES])  # the daily backfill stays green: it waits too
    assert step.rows_written == 0 and quarantined.count() == silver.count()

    # events too late for silver's watermark: the stream drops them, a backfill of silver restores
    # them, and the scores' backfill (still no version) puts them beside the stream's unscored
    # rows: every silver event waits once in the quarantine, none is left out
    late = generate(
        Landing(lake, iot), events=20, seed=17, start=START, end=START + timedelta(minutes=10),
        file_prefix="too-late", write_registry=False, late_fraction=0, duplicate_fraction=0,
        malformed_fraction=0, spike_fraction=0,
    ).event_ids  # fmt: skip
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select([*UPSTREAM, SCORES]))

    def ids(name: str) -> Counter:  # read afresh
        return Counter(
            r[0] for r in spark.read.format("delta").load(lake.table(name)).select("event_id").collect()
        )

    waiting = iot.table(SCORES).quarantine
    assert not set(late) & set(ids("silver.device_events")), "too late for the stream"
    backfill(spark, lake, iot, hour, ["silver.device_events", SCORES])
    assert set(late) <= set(ids("silver.device_events")), "restored by silver's backfill"
    assert ids(waiting) == ids("silver.device_events"), "each silver event once in the scores' quarantine"
    backfill(spark, lake, iot, hour, [SCORES])  # again: nothing added twice
    assert ids(waiting) == ids("silver.device_events")
    # events the stream has not read yet are not added by a backfill: its stream brings them
    later = generate(
        Landing(lake, iot), events=10, seed=18, start=START + timedelta(minutes=58),
        end=START + timedelta(minutes=59), file_prefix="next", write_registry=False, late_fraction=0,
        duplicate_fraction=0, malformed_fraction=0, spike_fraction=0,
    ).event_ids  # fmt: skip
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select(UPSTREAM))
        assert set(later) <= set(ids("silver.device_events"))
        backfill(spark, lake, iot, hour, [SCORES])
        assert not set(later) & set(ids(waiting)), "the stream's to quarantine, not the backfill's"
        runner.run_incremental([iot.table(SCORES)])
    assert ids(waiting) == ids("silver.device_events"), "each once, the stream's included"
    first_hour = set(ids("silver.device_events"))

    strict = fail_next_scores(spark, lake, iot, r"iot_anomaly.*no version promoted")
    with pytest.raises(ModelUnavailable, match="no version promoted"):
        backfill(spark, lake, strict, hour, [SCORES])

    # once a version is in force, a backfill scores the slice: none waits any more
    model = iot.model("iot_anomaly")
    train(spark, lake, iot, model, train_range=Slice(START, START + timedelta(minutes=40)),
          eval_range=Slice(START + timedelta(minutes=40), START + timedelta(hours=1)), promote=True, by="test")  # fmt: skip
    backfill(spark, lake, iot, hour, [SCORES])
    in_hour = Counter({i: n for i, n in ids("silver.device_events").items() if i in first_hour})
    assert ids(SCORES) == in_hour and not set(ids(waiting)) & set(in_hour), "scored, none left waiting"


def test_the_scores_table_checks_hold(spark, scenario: dict, iot: Pipeline, tmp_path: Path) -> None:
    from lakehouse.quality.checks import run_checks

    report = run_checks(spark, scenario["lake"], iot, tmp_path / "quality", [SCORES])
    assert report.violated == [], report.text()
    assert {r.expectation for t in report.tables for r in t.results} == {
        "one_score_per_event", "scored_by_a_registered_version"
    }  # fmt: skip


def test_a_broken_version_fails_the_flow_clearly_or_quarantines(spark, iot: Pipeline, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    model = iot.model("iot_anomaly")
    store = ModelStore(lake)
    broken = store.register(model.name, {"k": 2.4}, created_by="test")  # no baselines per device type
    store.promote(model, broken.version, by="test", force=True)
    quarantined, _ = quarantine_every_score(spark, lake, iot)
    [reason] = {r[0][0] for r in quarantined.select("_failed_expectations").distinct().collect()}
    assert f"'iot_anomaly' version {broken.version} failed to score" in reason and "types" in reason

    strict = fail_next_scores(spark, lake, iot, rf"iot_anomaly' version {broken.version} failed to score")

    # the operator promotes a version that scores: the failed batch, replayed, takes it
    mended = store.register(model.name, {"k": 2.4, "types": {}}, created_by="test")
    store.promote(model, mended.version, by="test", force=True)
    with StreamRunner(spark, lake, strict) as runner:
        runner.run_incremental([strict.table(SCORES)])
    second_hour = spark.read.format("delta").load(lake.table("silver.device_events"))
    second_hour = second_hour.where(F.col("event_time") >= START + timedelta(hours=1))
    scored = scores(spark, lake)
    assert {r[0] for r in scored.select("_model_version").distinct().collect()} == {mended.version}
    assert sorted(r[0] for r in scored.select("event_id").collect()) == sorted(
        r[0] for r in second_hour.select("event_id").collect()
    ), "the second hour scored once each, by the mended version; the first waits in quarantine"


def quarantine_every_score(spark, lake: Lake, iot: Pipeline):
    """The first hour through the scores flow under the reference model's quarantine policy:
    every silver event waits in the quarantine (returned with silver)."""
    land(lake, iot, 0)
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select([*UPSTREAM, SCORES]))
    quarantined = spark.read.format("delta").load(lake.table(iot.table(SCORES).quarantine))
    silver = spark.read.format("delta").load(lake.table("silver.device_events"))
    assert quarantined.count() == silver.count()
    return quarantined, silver


def fail_next_scores(spark, lake: Lake, iot: Pipeline, message: str) -> Pipeline:
    """The second hour under ``unavailable="fail"``: the scores flow fails with ``message``;
    returns that pipeline."""
    land(lake, iot, 1)
    strict = attrs.evolve(iot, models=[attrs.evolve(iot.model("iot_anomaly"), unavailable="fail")])
    with StreamRunner(spark, lake, strict) as runner:
        runner.run_incremental(strict.select(UPSTREAM))
        with pytest.raises(FlowFailed, match=message):
            runner.run_incremental([strict.table(SCORES)])
    return strict
