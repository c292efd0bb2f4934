"""The rules of ``lakehouse plan``, on hand-written shapes: what restarts on its checkpoint, what
needs a reset and rebuild and why, and what a new output does to a table's columns."""

from __future__ import annotations

from dataclasses import replace

import attrs
import pytest

from lakehouse.plan.compatibility import (
    FlowShape,
    Operator,
    code_version,
    column_changes,
    judge,
    state_changes,
    widens,
)
from lakehouse.spec import Pipeline

WINDOWED = Operator("aggregate", ("window: struct<start:timestamp,end:timestamp>", "device_type: string"),
                    ("count(1) AS events: bigint", "max(signal) AS max_signal: double"))  # fmt: skip
DEDUPE = Operator("deduplicate within watermark", ("event_id: string",))
DEPLOYED = FlowShape(
    code_version="aaaaaaaaaaaa",
    inputs=("silver.device_events",),
    watermark="event_time 10 minutes",
    window="10 minutes sliding by 5 minutes",
    operators=(DEDUPE, WINDOWED),
    columns={"window_start": "timestamp", "device_type": "string", "events": "bigint"},
)
TABLE = dict(DEPLOYED.columns)


def test_the_same_code_is_unchanged_and_new_code_with_the_same_state_is_compatible() -> None:
    same = judge("iot", "gold.t", DEPLOYED, DEPLOYED, checkpoint=True, table=TABLE)
    assert (same.status, same.reasons, same.columns, same.needs) == ("unchanged", (), (), "nothing")
    fixed = judge("iot", "gold.t", DEPLOYED, replace(DEPLOYED, code_version="bbbbbbbbbbbb"),
                  checkpoint=True, table=TABLE)  # fmt: skip
    assert fixed.status == "compatible" and fixed.reasons == ("code changed",)
    assert (fixed.deployed_version, fixed.code_version) == ("aaaaaaaaaaaa", "bbbbbbbbbbbb")
    assert "restart on its checkpoint" in fixed.needs


def test_each_change_of_state_is_incompatible_and_says_which_rule() -> None:
    def reasons(**changed: object) -> list[str]:
        return state_changes(DEPLOYED, replace(DEPLOYED, **changed))

    rekeyed = Operator("aggregate", (*WINDOWED.keys, "device: string"), WINDOWED.values)
    assert reasons(operators=(DEDUPE, rekeyed)) == [
        "aggregate re-keyed: (window: struct<start:timestamp,end:timestamp>, device_type: string) -> "
        "(window: struct<start:timestamp,end:timestamp>, device_type: string, device: string)"
    ]
    more_values = Operator("aggregate", WINDOWED.keys, (*WINDOWED.values, "avg(signal) AS a: double"))
    assert reasons(operators=(DEDUPE, more_values))[0].startswith("aggregate's state changed: ")
    assert reasons(operators=(WINDOWED,)) == [
        "stateful operator replaced: deduplicate within watermark on (event_id: string) -> "
        "aggregate on (window: struct<start:timestamp,end:timestamp>, device_type: string)",
        "stateful operator removed: aggregate on (window: struct<start:timestamp,end:timestamp>, "
        "device_type: string)",
    ]
    assert reasons(operators=(*DEPLOYED.operators, DEDUPE)) == [
        "stateful operator added: deduplicate within watermark on (event_id: string)"
    ]
    assert reasons(watermark="event_time 1 hour") == [
        "watermark changed: event_time 10 minutes -> event_time 1 hour"
    ]
    assert reasons(window="1 hour") == ["window changed: 10 minutes sliding by 5 minutes -> 1 hour"]
    assert reasons(inputs=("kafka:iot.events",)) == [
        "source changed: silver.device_events -> kafka:iot.events"
    ]

    plan = judge("iot", "gold.t", DEPLOYED, replace(DEPLOYED, window="1 hour"), checkpoint=True, table=TABLE)
    assert plan.status == "incompatible" and plan.reasons == (
        "window changed: 10 minutes sliding by 5 minutes -> 1 hour",
    )
    assert "lakehouse reset iot --flow gold.t --downstream" in plan.needs


@pytest.mark.parametrize(
    ("old", "new", "widened"),
    [
        ("tinyint", "smallint", True), ("tinyint", "int", True), ("smallint", "int", True),
        # what Delta's type widening would take, but delta-rs cannot read such tables (measured:
        # each of these appends fails with DELTA_FAILED_TO_MERGE_FIELDS without the feature)
        ("int", "bigint", False), ("float", "double", False), ("int", "double", False),
        ("date", "timestamp_ntz", False), ("decimal(10,2)", "decimal(12,2)", False), ("int", "decimal(12,2)", False),
        ("bigint", "int", False), ("double", "float", False), ("string", "int", False), ("timestamp", "date", False),
    ],
)  # fmt: skip
def test_in_place_type_changes_are_the_upcasts_delta_merges_itself(old: str, new: str, widened: bool) -> None:
    assert widens(old, new) is widened


def test_column_changes_say_added_widened_dropped_and_refuse_a_retype() -> None:
    output = {"window_start": "timestamp", "device_type": "string", "events": "double", "device": "string"}
    changes, breaking = column_changes(
        {**TABLE, "events": "smallint", "note": "string"}, {**output, "events": "int"}
    )
    assert changes == ["widened events: smallint -> int", "added device: string",
                       "dropped note: the table keeps it, new rows leave it null"]  # fmt: skip
    assert breaking == []
    _, breaking = column_changes(TABLE, {**TABLE, "device_type": "int"})
    assert breaking == [
        "retyped device_type: string -> int (a write changes only tinyint and smallint to a wider integer "
        "in place: the table is rebuilt with the new type)"
    ]
    plan = judge("iot", "gold.t", DEPLOYED, replace(DEPLOYED, columns={**TABLE, "device_type": "int"}),
                 checkpoint=True, table=TABLE)  # fmt: skip
    assert plan.status == "incompatible" and plan.reasons == tuple(breaking)
    added = judge("iot", "gold.t", DEPLOYED, replace(DEPLOYED, columns={**TABLE, "device": "string"}),
                  checkpoint=True, table=TABLE)  # fmt: skip
    assert added.status == "compatible" and added.columns == ("added device: string",)


def test_a_flow_without_a_checkpoint_is_new_and_one_without_a_record_says_so() -> None:
    assert judge("iot", "gold.t", None, DEPLOYED, checkpoint=False, table=None).status == "new"
    unrecorded = judge("iot", "gold.t", None, DEPLOYED, checkpoint=True, table=TABLE)
    assert unrecorded.status == "unrecorded" and "restart records" in unrecorded.needs


def test_shapes_round_trip_through_their_record() -> None:
    assert FlowShape.from_json(DEPLOYED.to_json()) == DEPLOYED


def helper(value: int) -> int:
    return value + 1


def transform(df: object) -> object:
    return helper(1) and df


def test_the_code_version_follows_the_declaration_and_the_transform_with_its_helpers(iot: Pipeline) -> None:
    stats = iot.table("gold.device_type_stats")
    version = code_version(iot, stats)
    assert len(version) == 12 and version == code_version(iot, attrs.evolve(stats))  # stable
    assert code_version(iot, attrs.evolve(stats, description="another")) != version
    assert code_version(iot, attrs.evolve(stats, transform=transform)) != version
    changed_helper = code_version(iot, attrs.evolve(stats, transform=transform))
    global helper
    original = helper

    def helper(value: int) -> int:  # a fix in what the transform calls is a new version too
        return value + 2

    helper.__module__ = original.__module__
    try:
        assert code_version(iot, attrs.evolve(stats, transform=transform)) != changed_helper
    finally:
        helper = original
