"""Change feeds applied as current state (Scd1) and history (Scd2): exact tables for the cases
that break naive implementations, the same whatever the arrival order and batching, and exactly
once across a replayed micro-batch."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.lake import Lake
from lakehouse.delta import Commit
from lakehouse.plan.changes import normalize
from lakehouse.spec import ApplyChanges, Scd1, Scd2, SpecError, Table, debezium_schema
from lakehouse.spec.modes.scd import CHANGE_OP
from lakehouse.state import storage
from lakehouse.writes.history import ChangeApplier, current_state, versions

ROW = "id BIGINT NOT NULL, name STRING, segment STRING"
ENVELOPE = debezium_schema(ROW)
HISTORY = ApplyChanges(
    "silver.history",
    upstream="bronze.feed",
    write=Scd2(keys=["id"], sequence_by=["source.lsn"], track=["segment"]),
)
CURRENT = ApplyChanges(
    "silver.current", upstream="bronze.feed", write=Scd1(keys=["id"], sequence_by=["source.lsn"])
)
T0 = 1_772_352_000_000  # 2026-03-01 08:00 UTC, in ms


def event(
    op: str,
    lsn: int | None,
    key: int | None,
    name: str | None = None,
    segment: str | None = None,
    *,
    delivered: int = 0,
) -> str:
    row = {"id": key, "name": name, "segment": segment}
    image = None if op == "d" else row
    before = {"id": key} if op == "d" else None
    source = {"lsn": lsn, "ts_ms": T0 + 1000 * (lsn or 0)}
    return json.dumps({"op": op, "before": before, "after": image, "source": source, "ts_ms": T0 + delivered})


def commit(run: str, batch_id: int, *, replay_possible: bool = True) -> Commit:
    """A stream's commit of batch ``batch_id`` of query ``run``."""
    return Commit(f"batch {batch_id}", app_id=run, batch=batch_id, replay_possible=replay_possible)


def at(lsn: int) -> datetime:
    return datetime.fromtimestamp((T0 + 1000 * lsn) / 1000, tz=UTC).replace(tzinfo=None)


def changes(spark: SparkSession, table: Table, lines: list[str]) -> DataFrame:
    bronze = spark.read.schema(ENVELOPE).json(spark.sparkContext.parallelize(lines, 1))
    return normalize(bronze, table)


def history_of(spark: SparkSession, lines: list[str]) -> list[tuple]:
    rows = versions(changes(spark, HISTORY, lines), HISTORY.write).orderBy("id", "_start_seq").collect()
    return [(r.id, r.name, r.segment, r.valid_from, r.valid_to, r.is_current, r["_end_op"]) for r in rows]


def state_of(spark: SparkSession, lines: list[str]) -> list[tuple]:
    rows = current_state(changes(spark, CURRENT, lines), CURRENT.write).orderBy("id").collect()
    return [(r.id, r.name, r.segment) for r in rows]


# Each case: the events in the order they arrive, the history and the current state they give.
CASES = {
    "out-of-order updates": (
        [event("u", 3, 1, "x", "c"), event("c", 1, 1, "x", "a"), event("u", 2, 1, "x", "b")],
        [
            (1, "x", "a", at(1), at(2), False, "u"),
            (1, "x", "b", at(2), at(3), False, "u"),
            (1, "x", "c", at(3), None, True, None),
        ],
        [(1, "x", "c")],
    ),
    "delete then re-insert": (
        [event("c", 1, 1, "x", "a"), event("d", 2, 1), event("c", 3, 1, "y", "b")],
        [(1, "x", "a", at(1), at(2), False, "d"), (1, "y", "b", at(3), None, True, None)],
        [(1, "y", "b")],
    ),
    "duplicate events": (
        [
            event("c", 1, 1, "x", "a"),
            event("u", 2, 1, "x", "b"),
            event("c", 1, 1, "x", "a", delivered=9),
            event("u", 2, 1, "x", "b"),
        ],
        [(1, "x", "a", at(1), at(2), False, "u"), (1, "x", "b", at(2), None, True, None)],
        [(1, "x", "b")],
    ),
    "a late change older than the current version": (
        # name is not tracked: u@3 updates version [1, ...) in place; the late u@2 splits it
        [event("c", 1, 1, "x", "a"), event("u", 3, 1, "y", "a"), event("u", 2, 1, "x", "b")],
        [
            (1, "x", "a", at(1), at(2), False, "u"),
            (1, "x", "b", at(2), at(3), False, "u"),
            (1, "y", "a", at(3), None, True, None),
        ],
        [(1, "y", "a")],
    ),
    "a late change older than a delete": (
        [event("c", 1, 1, "x", "a"), event("d", 3, 1), event("u", 2, 1, "x", "b")],
        [(1, "x", "a", at(1), at(2), False, "u"), (1, "x", "b", at(2), at(3), False, "d")],
        [],
    ),
    "a change for a key never seen": (
        [event("u", 5, 7, "z", "a"), event("u", 6, 7, "w", "a")],
        [(7, "w", "a", at(5), None, True, None)],
        [(7, "w", "a")],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_exact_history_and_state(spark: SparkSession, case: str) -> None:
    lines, history, state = CASES[case]
    assert history_of(spark, lines) == history
    assert state_of(spark, lines) == state
    assert history_of(spark, list(reversed(lines))) == history, "the arrival order must not matter"


def test_malformed_changes_are_named_by_the_implied_expectations(spark: SparkSession) -> None:
    lines = [
        event("x", 1, 1, "x", "a"),
        event("c", None, 1, "x", "a"),
        event("c", 1, None, "x", "a"),
        event("c", 2, 1, "x", "a"),
    ]
    rows = changes(spark, HISTORY, lines).collect()
    assert [r[CHANGE_OP] for r in rows] == ["x", "c", "c", "c"]
    assert rows[1]["_seq"] is None and rows[2].id is None and rows[3]["_seq"].lsn == 2
    labels = [e.label for e in HISTORY.expectations]
    assert labels == [
        "change_has_operation",
        "change_operation_known",
        "change_has_key_id",
        "change_has_sequence",
    ]


def test_a_feed_without_an_envelope_is_refused_clearly(spark: SparkSession) -> None:
    with pytest.raises(SpecError, match="debezium_schema"):
        normalize(spark.createDataFrame([(1, "x")], "id BIGINT, name STRING"), HISTORY)


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_applied_in_batches_exactly_once_equals_the_whole_feed(spark: SparkSession, tmp_path) -> None:
    """Every case's events in one feed, in three micro-batches (one replayed), through the change
    log and the MERGEs: the same tables as the pure functions over the whole feed."""
    lake = Lake(str(tmp_path / "lake"))
    lines = [
        line.replace('"id": 1', f'"id": {10 + n}')
        for n, (case, _, _) in enumerate(CASES.values())
        for line in case
    ]
    feed = changes(spark, HISTORY, lines)
    appliers = [ChangeApplier(lake, HISTORY), ChangeApplier(lake, CURRENT)]
    run = str(uuid.uuid4())
    waves = [lines[0::3], lines[1::3], lines[2::3]]
    for applier in appliers:
        applier.ensure(feed)
        for batch_id, wave in enumerate(waves):
            applier.apply_batch(changes(spark, applier.table, wave), commit(run, batch_id))
        applier.apply_batch(changes(spark, applier.table, waves[1]), commit(run, 1))  # a replay
    read = spark.read.format("delta").load
    got_history = read(lake.table(HISTORY.name)).orderBy("id", "_start_seq").collect()
    want_history = versions(feed, HISTORY.write).orderBy("id", "_start_seq").collect()
    assert got_history == want_history
    got_state = read(lake.table(CURRENT.name)).orderBy("id").collect()
    assert got_state == current_state(changes(spark, CURRENT, lines), CURRENT.write).orderBy("id").collect()
    assert read(lake.table(HISTORY.changes)).count() == len(lines), "each change logged once"


# --------------------------------------------------------------------------- a random feed
def random_feed(seed: int, keys: int = 20) -> tuple[list[tuple], list[str]]:
    """Changes of ``keys`` rows committed in order (lsn), each ``(lsn, ts_ms, op, key, name,
    segment)`` with the source clock up to two minutes behind, and the lines a connector delivers: out of
    order within 30 events, 5 % of them twice, the second copy later."""
    rng = random.Random(seed)
    committed: list[tuple] = []
    alive: dict[int, tuple[str, str]] = {}
    for lsn in range(1, keys * 5):
        key = rng.randint(1, keys)
        if key not in alive:
            op, row = "c", (f"n{lsn}", rng.choice("ab"))
        elif rng.random() < 0.1:
            op, row = "d", alive[key]
        else:  # a tracked change (segment) or an in-place one (name)
            name, segment = alive[key]
            op, row = "u", (name, rng.choice("abc")) if rng.random() < 0.5 else (f"n{lsn}", segment)
        committed.append((lsn, T0 + 1000 * lsn - rng.randint(0, 120_000), op, key, *row))
        alive.pop(key) if op == "d" else alive.__setitem__(key, row)
    lines = [
        json.dumps(
            {
                "op": op,
                "before": {"id": key} if op == "d" else None,
                "after": None if op == "d" else {"id": key, "name": name, "segment": segment},
                "source": {"lsn": lsn, "ts_ms": ts},
            }
        )
        for lsn, ts, op, key, name, segment in committed
    ]
    order = sorted(range(len(lines)), key=lambda i: i + rng.uniform(0, 30))
    delivered = [lines[i] for i in order]
    for i in rng.sample(range(len(lines)), len(lines) // 20):
        delivered.insert(rng.randint(order.index(i) + 1, len(delivered)), lines[i])
    return committed, delivered


def expected_tables(committed: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """The history (Scd2 on segment) and current state (Scd1) of ``committed``, by hand: each
    key's changes in lsn order, the interval times the greatest source time so far."""
    history: list[list] = []
    state: dict[int, tuple] = {}
    seen: dict[int, tuple[str | None, str | None, datetime]] = {}  # key -> last op, segment, time
    for _lsn, ts, op, key, name, segment in sorted(committed):
        last_op, last_segment, latest = seen.get(key, (None, None, datetime.min))
        now = max(latest, datetime.fromtimestamp(ts / 1000, tz=UTC).replace(tzinfo=None))
        opened = [v for v in history if v[0] == key and v[5]]
        if op == "d" or last_op in (None, "d") or segment != last_segment:
            for version in opened:  # closed by this change
                version[4], version[5], version[6] = now, False, "d" if op == "d" else "u"
            if op != "d":
                history.append([key, name, segment, now, None, True, None])
        else:
            opened[0][1] = name  # the same version, updated in place
        seen[key] = (op, segment, now)
        state.pop(key) if op == "d" else state.__setitem__(key, (key, name, segment))
    return sorted(tuple(v) for v in history), sorted(state.values())


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_random_feed_in_batches_equals_its_history_by_hand(
    spark: SparkSession, tmp_path, monkeypatch
) -> None:
    """A log short at first (keys recomputed from all their logged changes), then long enough to
    keep each key's latest change: keys continue from it, late ones (out of order, repeated) are
    recomputed from the log. A crash between the table's commit and the latest changes' is
    replayed; a backfill of a slice marks them stale and the resumed stream computes them again:
    the tables are still those computed by hand."""
    committed, delivered = random_feed(seed=1)
    want_history, want_state = expected_tables(committed)
    lake = Lake(str(tmp_path / "lake"))
    monkeypatch.setattr(ChangeApplier, "long_log", 36)
    monkeypatch.setattr(ChangeApplier, "check_every", 1_000)  # at a run's first batch only
    late: list[int] = []
    logged = ChangeApplier.logged_of
    monkeypatch.setattr(
        ChangeApplier, "logged_of", lambda self, keys: late.append(batch_id) or logged(self, keys)
    )
    batches = [delivered[i : i + 18] for i in range(0, len(delivered), 18)]
    assert len(batches) == 6
    run = str(uuid.uuid4())
    kept = []
    for table in (HISTORY, CURRENT):
        applier = ChangeApplier(lake, table)
        applier.ensure(changes(spark, table, delivered[:1]))
        for batch_id, lines in enumerate(batches):
            batch = changes(spark, table, lines)
            kept.append(applier.keeps_latest(spark))
            first_of_run = batch_id in (0, 2, 4)  # runs: 0-1, 2-3, 4-5 (after a backfill)
            if batch_id == 3:  # the driver dies after the table's commit
                with monkeypatch.context() as m:
                    m.setattr(
                        ChangeApplier, "_merge_latest", lambda *_: (_ for _ in ()).throw(OSError("killed"))
                    )
                    with pytest.raises(OSError):
                        applier.apply_batch(batch, commit(run, batch_id, replay_possible=False))
                first_of_run = True  # its restart replays it
            if batch_id == 4:  # a backfill of the hour in the middle, from bronze as it is now
                bronze = changes(spark, table, [line for b in batches[:4] for line in b])
                applier.apply_slice(bronze, "`_ts` >= TIMESTAMP '2026-03-01 08:00:30'")
                assert storage.exists(spark, applier.stale_mark)
            applier.apply_batch(batch, commit(run, batch_id, replay_possible=first_of_run))
        assert not storage.exists(spark, applier.stale_mark), "computed again by the resumed stream"
    read = spark.read.format("delta").load
    history = read(lake.table(HISTORY.name)).collect()
    got = [(r.id, r.name, r.segment, r.valid_from, r.valid_to, r.is_current, r["_end_op"]) for r in history]
    assert sorted(got, key=str) == sorted(want_history, key=str)
    assert sorted((r.id, r.name, r.segment) for r in read(lake.table(CURRENT.name)).collect()) == want_state
    assert kept == ([False] * 3 + [True] * 3) * 2, "kept from the run that starts with 36 logged"
    # (not 4: the backfill's slice and the stale changes it leaves are recomputed from the log anyway)
    assert {3, 5} & set(late), "a late change after the switch, recomputed from the log"


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_in_order_changes_leave_closed_versions_alone(spark: SparkSession, tmp_path, monkeypatch) -> None:
    """A history table is partitioned by ``is_current``: once each key's latest change is kept, a
    micro-batch continuing keys in order reads and rewrites only the current versions' files (its
    cost does not grow with the history), and the table is still the history by hand."""
    lake = Lake(str(tmp_path / "lake"))
    monkeypatch.setattr(ChangeApplier, "long_log", 1)  # kept from the first batch
    applier = ChangeApplier(lake, HISTORY)
    waves = [
        [event("c", 1, 1, "x", "a"), event("c", 2, 2, "y", "a"), event("c", 3, 3, "z", "a")],
        [event("u", 4, 1, "x", "b"), event("u", 5, 3, "w", "a")],  # closes 1's version; 3 in place
        [event("u", 6, 1, "x", "c"), event("d", 7, 2)],  # closes 1's second and 2's only version
        [event("u", 8, 1, "v", "c")],
    ]
    applier.ensure(changes(spark, HISTORY, waves[0]))
    run = str(uuid.uuid4())
    for batch_id, wave in enumerate(waves):
        applier.apply_batch(changes(spark, HISTORY, wave), commit(run, batch_id, replay_possible=False))
    path = lake.table(HISTORY.name)
    got = spark.read.format("delta").load(path).orderBy("id", "valid_from").collect()
    assert [(r.id, r.name, r.segment, r.valid_from, r.valid_to, r.is_current, r["_end_op"]) for r in got] == [
        (1, "x", "a", at(1), at(4), False, "u"),
        (1, "x", "b", at(4), at(6), False, "u"),
        (1, "v", "c", at(6), None, True, None),
        (2, "y", "a", at(2), at(7), False, "d"),
        (3, "w", "a", at(3), None, True, None),
    ]
    log = sorted(Path(path, "_delta_log").glob("*.json"))
    actions = [json.loads(line) for file in log for line in file.read_text().splitlines()]
    (metadata,) = [a["metaData"] for a in actions if "metaData" in a]
    assert metadata["partitionColumns"] == ["is_current"]
    merges = [a["commitInfo"] for a in actions if a.get("commitInfo", {}).get("operation") == "MERGE"]
    assert len(merges) == len(waves)
    removed = [a["remove"]["path"] for a in actions if "remove" in a]
    assert removed and all(p.startswith("is_current=true/") for p in removed), "a closed version rewritten"
