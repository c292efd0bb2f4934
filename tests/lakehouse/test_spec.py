"""Declaration API: each mistake gives its own specific message, on load."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakehouse.spec import JsonFiles, Lookup, Pipeline, SpecError, Table, Window, ddl_columns, parse_duration

SOURCE = JsonFiles(schema="id STRING NOT NULL, ts TIMESTAMP NOT NULL, v DOUBLE")


def bronze(name: str = "bronze.raw") -> Table:
    return Table(name, source=SOURCE, event_time="ts")


def silver(name: str = "silver.clean", upstream: str = "bronze.raw", **kw: object) -> Table:
    return Table(name, upstreams=[upstream], transform="t:f", event_time="ts", **kw)  # type: ignore[arg-type]


def test_a_valid_pipeline_orders_tables_upstream_first() -> None:
    gold = Table(
        "gold.stats",
        upstreams=["silver.clean"],
        transform="t:g",
        event_time="window_start",
        watermark="10 minutes",
        keys=["window_start"],
        write="aggregate",
        window=Window("10 minutes"),
    )
    pipeline = Pipeline("p", tables=[gold, silver(), bronze()])
    assert [t.name for t in pipeline.ordered()] == ["bronze.raw", "silver.clean", "gold.stats"]
    assert [t.name for t in pipeline.downstream("bronze.raw")] == ["silver.clean", "gold.stats"]
    assert gold.output_mode == "update" and silver().output_mode == "append"


def test_unknown_upstream_is_named_with_the_declared_tables() -> None:
    with pytest.raises(
        SpecError, match=r"'silver.clean' reads upstream 'bronze.missing'.*declared: bronze.raw"
    ):
        Pipeline("p", tables=[bronze(), silver(upstream="bronze.missing")])


def test_cycle_is_reported_as_a_path() -> None:
    a = Table("silver.a", upstreams=["silver.b"], transform="t:f")
    b = Table("silver.b", upstreams=["silver.a"], transform="t:f")
    with pytest.raises(SpecError, match=r"cycle: silver\.a -> silver\.b -> silver\.a"):
        Pipeline("p", tables=[a, b])


def test_duplicate_table_name() -> None:
    with pytest.raises(SpecError, match=r"declares table 'bronze.raw' twice"):
        Pipeline("p", tables=[bronze(), bronze()])


def test_windowed_aggregate_without_event_time_column() -> None:
    with pytest.raises(SpecError, match=r"write='aggregate' needs an event-time column"):
        Table(
            "gold.stats",
            upstreams=["silver.clean"],
            transform="t:g",
            keys=["k"],
            write="aggregate",
            window=Window("10 minutes"),
        )


def test_windowed_aggregate_over_an_upstream_without_event_time() -> None:
    plain = Table("silver.plain", upstreams=["bronze.raw"], transform="t:f")
    gold = Table(
        "gold.stats",
        upstreams=["silver.plain"],
        transform="t:g",
        event_time="window_start",
        keys=["window_start"],
        write="aggregate",
        window=Window("10 minutes"),
    )
    with pytest.raises(
        SpecError, match=r"upstream 'silver.plain' needs an event_time column and a watermark"
    ):
        Pipeline("p", tables=[bronze(), plain, gold])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"write": "upsert"}, r"write='upsert' needs keys"),
        ({"write": "upsert", "keys": ["id"]}, r"needs sequence_by"),
        ({"write": "merge"}, r"write='merge' is not one of append, upsert, aggregate"),
        ({"watermark": "ten minutes"}, r"'ten minutes' is not a duration"),
        ({"event_time": "ts", "keys": ["ts"], "write": "aggregate"}, r"needs window=Window"),
    ],
)
def test_table_level_mistakes(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"upstreams": ["bronze.raw"], "transform": "t:f"}
    with pytest.raises(SpecError, match=message):
        Table("silver.x", **{**base, **kwargs})  # type: ignore[arg-type]


def test_names_layers_and_origins() -> None:
    with pytest.raises(SpecError, match=r"must be '<layer>.<name>'"):
        Table("platinum.x", source=SOURCE)
    with pytest.raises(SpecError, match=r"neither a source"):
        Table("silver.x", transform="t:f")
    with pytest.raises(SpecError, match=r"both a source and upstreams"):
        Table("bronze.x", source=SOURCE, upstreams=["bronze.y"])
    with pytest.raises(SpecError, match=r"declares no transform"):
        Table("silver.x", upstreams=["bronze.raw"])
    with pytest.raises(SpecError, match=r"event_time 'when' is not a column of the source schema"):
        Table("bronze.x", source=SOURCE, event_time="when")


def test_dedupe_needs_a_watermark_and_lookups_must_be_declared() -> None:
    with pytest.raises(SpecError, match=r"deduplicates on keys \['id'\].*needs a watermark"):
        Pipeline("p", tables=[bronze(), silver(keys=["id"])])
    with pytest.raises(SpecError, match=r"uses lookup 'devices'.*does not declare"):
        Pipeline("p", tables=[bronze(), silver(lookups=["devices"])])
    ok = Pipeline(
        "p",
        lookups=[Lookup("devices", schema="d STRING")],
        tables=[bronze(), silver(lookups=["devices"], keys=["id"], watermark="5 minutes")],
    )
    assert ok.table("silver.clean").dedupes


def test_durations_and_ddl() -> None:
    assert parse_duration("10 minutes", "x") == timedelta(minutes=10)
    assert parse_duration("1 hour", "x") == timedelta(hours=1)
    cols = ddl_columns("id STRING NOT NULL, tags ARRAY<STRING>, m MAP<STRING, INT>, ts TIMESTAMP")
    assert [(c.name, c.type, c.required) for c in cols] == [
        ("id", "STRING", True),
        ("tags", "ARRAY<STRING>", False),
        ("m", "MAP<STRING, INT>", False),
        ("ts", "TIMESTAMP", False),
    ]
    with pytest.raises(SpecError, match="slide"):
        Window("5 minutes", "10 minutes")


# --------------------------------------------------------------------------- joins and state


def test_upstream_lookback_and_lookahead_are_durations_on_event_time() -> None:
    from lakehouse.spec import Upstream

    up = Upstream("silver.clean", watermark="3 hours", lookahead="1 hour")
    assert up.lookahead_delta == timedelta(hours=1) and up.lookback_delta == timedelta(0)
    with pytest.raises(SpecError, match=r"upstream 'bronze.raw' lookahead: 'an hour' is not a duration"):
        Table("silver.x", upstreams=[Upstream("bronze.raw", lookahead="an hour")], transform="t:f")
    plain = Table("silver.plain", upstreams=["bronze.raw"], transform="t:f")
    joined = Table("gold.j", upstreams=[Upstream("silver.plain", lookback="1 hour")], transform="t:g")
    with pytest.raises(SpecError, match=r"reads upstream 'silver.plain' with a lookback.*declare event_time"):
        Pipeline("p", tables=[bronze(), plain, joined])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"state= needs event_time="),
        (
            {"event_time": "ts", "write": "aggregate", "keys": ["ts"], "window": Window("1 hour")},
            r"not 'aggregate'",
        ),
        ({"event_time": "ts", "keys": ["id"]}, r"cannot declare keys"),
        ({"event_time": "ts"}, r"needs a watermark on upstream 'bronze.raw'"),
    ],
)
def test_state_needs_event_time_watermarks_and_a_fitting_write_mode(
    kwargs: dict[str, object], message: str
) -> None:
    from lakehouse.spec import State

    with pytest.raises(SpecError, match=message):
        Table("gold.s", upstreams=["bronze.raw"], transform="t:f", state=State("30 minutes"), **kwargs)  # type: ignore[arg-type]


def test_state_durations_are_checked_on_declaration() -> None:
    from lakehouse.spec import State

    assert State("30 minutes").history_delta is None
    assert State("30 minutes", history="1 day").history_delta == timedelta(days=1)
    with pytest.raises(SpecError, match=r"'half an hour' is not a duration"):
        State("half an hour")
    table = Table(
        "gold.s", upstreams=["bronze.raw"], transform="t:f", event_time="ts", watermark="1 hour",
        state=State("30 minutes"),
    )  # fmt: skip
    assert table.output_mode == "append" and not table.dedupes
