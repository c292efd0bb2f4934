"""Declaration API: each mistake gives its own specific message, on load."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import attrs
import pytest

from lakehouse.spec import (
    Aggregate,
    Append,
    ApplyChanges,
    Ingest,
    JsonFiles,
    KafkaTopic,
    Lookup,
    MaterializedView,
    Pipeline,
    Recompute,
    Scd1,
    Scd2,
    SpecError,
    StreamingTable,
    Table,
    Upsert,
    Upstream,
    Window,
    ddl_columns,
    debezium_schema,
    parse_duration,
)

SOURCE = JsonFiles(schema="id STRING NOT NULL, ts TIMESTAMP NOT NULL, v DOUBLE")


def bronze(name: str = "bronze.raw") -> Table:
    return Ingest(name, source=SOURCE, event_time="ts")


def silver(name: str = "silver.clean", upstream: str = "bronze.raw", **kw: object) -> Table:
    return Table(name, kind="streaming", upstreams=[upstream], transform="t:f", event_time="ts", **kw)  # type: ignore[arg-type]


def test_a_valid_pipeline_orders_tables_upstream_first() -> None:
    gold = StreamingTable(
        "gold.stats",
        upstreams=["silver.clean"],
        transform="t:g",
        event_time="window_start",
        watermark="10 minutes",
        write=Aggregate(Window("10 minutes")),
    )
    pipeline = Pipeline("p", tables=[gold, silver(), bronze()])
    assert [t.name for t in pipeline.ordered()] == ["bronze.raw", "silver.clean", "gold.stats"]
    assert [t.name for t in pipeline.downstream("bronze.raw")] == ["silver.clean", "gold.stats"]
    assert gold.output_mode == "update" and silver().output_mode == "append"
    assert gold.keys == ("window_start",)


def test_unknown_upstream_is_named_with_the_declared_tables() -> None:
    with pytest.raises(
        SpecError, match=r"'silver.clean' reads upstream 'bronze.missing'.*declared: bronze.raw"
    ):
        Pipeline("p", tables=[bronze(), silver(upstream="bronze.missing")])


def test_cycle_is_reported_as_a_path() -> None:
    a = StreamingTable("silver.a", upstreams=["silver.b"], transform="t:f")
    b = StreamingTable("silver.b", upstreams=["silver.a"], transform="t:f")
    with pytest.raises(SpecError, match=r"cycle: silver\.a -> silver\.b -> silver\.a"):
        Pipeline("p", tables=[a, b])


def test_duplicate_table_name() -> None:
    with pytest.raises(SpecError, match=r"declares table 'bronze.raw' twice"):
        Pipeline("p", tables=[bronze(), bronze()])


def test_windowed_aggregate_without_event_time_column() -> None:
    with pytest.raises(SpecError, match=r"Aggregate needs an event-time column"):
        StreamingTable(
            "gold.stats",
            upstreams=["silver.clean"],
            transform="t:g",
            write=Aggregate(Window("10 minutes"), group_by=["k"]),
        )


def test_windowed_aggregate_over_an_upstream_without_event_time() -> None:
    plain = StreamingTable("silver.plain", upstreams=["bronze.raw"], transform="t:f")
    gold = StreamingTable(
        "gold.stats",
        upstreams=["silver.plain"],
        transform="t:g",
        event_time="window_start",
        write=Aggregate(Window("10 minutes")),
    )
    with pytest.raises(
        SpecError, match=r"upstream 'silver.plain' needs an event_time column and a watermark"
    ):
        Pipeline("p", tables=[bronze(), plain, gold])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"write": "merge"}, r"write='merge' is not a write mode: declare Append\(\), .*Upsert"),
        ({"write": "upsert"}, r"write='upsert' is not a write mode"),
        ({"watermark": "ten minutes"}, r"'ten minutes' is not a duration"),
    ],
)
def test_table_level_mistakes(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"upstreams": ["bronze.raw"], "transform": "t:f"}
    with pytest.raises(SpecError, match=message):
        Table("silver.x", kind="streaming", **{**base, **kwargs})  # type: ignore[arg-type]


def test_write_modes_carry_what_they_need_and_say_what_is_missing() -> None:
    with pytest.raises(SpecError, match=r"Upsert needs keys"):
        Upsert(keys=[], sequence_by=["ts"])
    with pytest.raises(SpecError, match=r"Upsert needs sequence_by=\(\.\.\.\): the column\(s\) that order"):
        Upsert(keys=["id"], sequence_by=[])
    with pytest.raises(TypeError):
        Aggregate()  # type: ignore[call-arg]  # a window is required
    upsert = StreamingTable("silver.u", upstreams=["bronze.raw"], transform="t:f", write=Upsert("id", "ts"))
    assert upsert.keys == ("id",) and upsert.write.sequence_by == ("ts",) and not upsert.dedupes
    assert Append(keys="id").keys == ("id",)
    stats = StreamingTable(
        "gold.s", upstreams=["silver.clean"], transform="t:g", event_time="start",
        write=Aggregate(Window("1 hour", "30 minutes"), group_by=["type"]),
    )  # fmt: skip
    assert stats.keys == ("start", "type")
    assert stats.write.describe() == "aggregate in 1 hour windows sliding by 30 minutes per type"


def test_a_bronze_table_names_alternative_sources_and_the_deployment_picks_one() -> None:
    files = JsonFiles(schema="id STRING NOT NULL, ts TIMESTAMP NOT NULL")
    kafka = KafkaTopic(schema="id STRING NOT NULL, ts TIMESTAMP NOT NULL", topics="events")
    table = Ingest("bronze.events", source=[files, kafka], event_time="ts")
    assert table.source == files and table.sources == (files, kafka)  # the first is the default
    pipeline = Pipeline("p", tables=[table])
    chosen = pipeline.configured("kafka", "broker:9092").table("bronze.events").source
    assert isinstance(chosen, KafkaTopic) and chosen.bootstrap_servers == "broker:9092"
    assert pipeline.configured("files", "broker:9092").table("bronze.events").source == files
    assert pipeline.table("bronze.events").source == files  # the declaration itself is unchanged
    only_files = Pipeline("q", tables=[Ingest("bronze.f", source=files)])
    assert only_files.configured("kafka").table("bronze.f").source == files  # offers files only
    other = KafkaTopic(schema="id STRING NOT NULL", topics="events")
    with pytest.raises(SpecError, match=r"alternative sources declare different schemas"):
        Ingest("bronze.x", source=[files, other])
    with pytest.raises(SpecError, match=r"two sources of one kind"):
        Ingest("bronze.x", source=[files, files])


def test_bronze_keeps_statistics_on_its_times_and_parse_error_unless_declared_otherwise() -> None:
    assert Ingest("bronze.e", source=SOURCE, event_time="ts").skipping_stats == (
        "ts", "_arrival_time", "_ingested_at", "_parse_error",
    )  # fmt: skip
    assert Ingest("bronze.e", source=SOURCE).skipping_stats == (
        "_arrival_time",
        "_ingested_at",
        "_parse_error",
    )
    assert Ingest("bronze.e", source=SOURCE, stats_columns="id").skipping_stats == ("id",)
    assert Ingest("bronze.e", source=SOURCE, stats_columns=[]).skipping_stats == ()  # none at all
    silver = StreamingTable("silver.e", upstreams=["bronze.e"], transform="t:f")
    assert silver.skipping_stats is None  # Delta's default: the first 32 columns
    assert attrs.evolve(silver, stats_columns=["ts", "v"]).skipping_stats == ("ts", "v")


def test_names_layers_and_origins() -> None:
    with pytest.raises(SpecError, match=r"must be '<layer>.<name>'"):
        Ingest("platinum.x", source=SOURCE)
    with pytest.raises(SpecError, match=r"neither a source"):
        StreamingTable("silver.x", upstreams=[], transform="t:f")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'upstreams'"):
        Ingest("bronze.x", source=SOURCE, upstreams=["bronze.y"])  # type: ignore[call-arg]
    with pytest.raises(SpecError, match=r"reads upstreams but declares no transform"):
        StreamingTable("silver.x", upstreams=["bronze.raw"])
    with pytest.raises(SpecError, match=r"both a source and upstreams"):  # the model still checks
        Table("bronze.x", kind="ingest", source=SOURCE, upstreams=["bronze.y"])
    with pytest.raises(SpecError, match=r"event_time 'when' is not a column of the source schema"):
        Ingest("bronze.x", source=SOURCE, event_time="when")


def test_dedupe_needs_a_watermark_and_lookups_must_be_declared() -> None:
    with pytest.raises(SpecError, match=r"deduplicates on keys \['id'\].*needs a watermark"):
        Pipeline("p", tables=[bronze(), silver(write=Append(keys=["id"]))])
    with pytest.raises(SpecError, match=r"uses lookup 'devices'.*does not declare"):
        Pipeline("p", tables=[bronze(), silver(lookups=["devices"])])
    ok = Pipeline(
        "p",
        lookups=[Lookup("devices", schema="d STRING")],
        tables=[bronze(), silver(lookups=["devices"], write=Append(keys=["id"]), watermark="5 minutes")],
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

    up = Upstream("silver.clean", watermark="3 hours", lookahead="1 hour")
    assert up.lookahead_delta == timedelta(hours=1) and up.lookback_delta == timedelta(0)
    with pytest.raises(SpecError, match=r"upstream 'bronze.raw' lookahead: 'an hour' is not a duration"):
        StreamingTable("silver.x", upstreams=[Upstream("bronze.raw", lookahead="an hour")], transform="t:f")
    plain = StreamingTable("silver.plain", upstreams=["bronze.raw"], transform="t:f")
    joined = StreamingTable(
        "gold.j", upstreams=[Upstream("silver.plain", lookback="1 hour")], transform="t:g"
    )
    with pytest.raises(SpecError, match=r"reads upstream 'silver.plain' with a lookback.*declare event_time"):
        Pipeline("p", tables=[bronze(), plain, joined])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"state= needs event_time="),
        ({"event_time": "ts", "write": Aggregate(Window("1 hour"))}, r"not 'aggregate'"),
        ({"event_time": "ts", "write": Append(keys=["id"])}, r"cannot declare keys"),
        ({"event_time": "ts"}, r"needs a watermark on upstream 'bronze.raw'"),
    ],
)
def test_state_needs_event_time_watermarks_and_a_fitting_write_mode(
    kwargs: dict[str, object], message: str
) -> None:
    from lakehouse.spec import State

    with pytest.raises(SpecError, match=message):
        Table(
            "gold.s",
            kind="streaming",
            upstreams=["bronze.raw"],
            transform="t:f",
            state=State("30 minutes"),
            **kwargs,
        )  # type: ignore[arg-type]


def test_state_durations_are_checked_on_declaration() -> None:
    from lakehouse.spec import State

    assert State("30 minutes").history_delta is None
    assert State("30 minutes", history="1 day").history_delta == timedelta(days=1)
    with pytest.raises(SpecError, match=r"'half an hour' is not a duration"):
        State("half an hour")
    table = StreamingTable(
        "gold.s", upstreams=["bronze.raw"], transform="t:f", event_time="ts", watermark="1 hour",
        state=State("30 minutes"),
    )  # fmt: skip
    assert table.output_mode == "append" and not table.dedupes


def changes_table(**kwargs: object) -> Table:
    base: dict[str, object] = {
        "upstreams": ["bronze.changes"],
        "write": Scd2(keys=["id"], sequence_by=["source.lsn"]),
    }
    return Table("silver.history", kind="changes", **{**base, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: Scd1(keys=[], sequence_by=["source.lsn"]), r"Scd1 needs keys"),
        (lambda: Scd1(keys=["id"], sequence_by=[]), r"needs sequence_by=\(\.\.\.\): expressions ordering"),
        (
            lambda: changes_table(event_time="ts"),
            r"Scd2 cannot declare event_time=: changes are applied in sequence",
        ),
        (lambda: changes_table(watermark="1 hour"), r"cannot declare watermark="),
        (
            lambda: changes_table(upstreams=["bronze.a", "bronze.b"]),
            r"applies the change feed of one upstream table",
        ),
        (lambda: Scd2(keys=["id"], sequence_by=["source.lsn"], track=["id"]), r"cannot be tracked"),
        (
            lambda: Scd2(keys=["id"], sequence_by=["lsn"], track=["x"], ignore=["x"]),
            r"both tracked and ignored",
        ),
        (lambda: Scd1(keys=["id"], sequence_by=["lsn"], ignore=["id"]), r"cannot be ignored"),
    ],
)
def test_change_feed_mistakes(declare, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        declare()


def test_change_tables_imply_their_contract_and_are_read_by_recomputed_tables() -> None:
    changes = Ingest(
        "bronze.changes", source=JsonFiles(schema=debezium_schema("id BIGINT NOT NULL, seg STRING"))
    )
    history = ApplyChanges(
        "silver.history", upstream="bronze.changes", write=Scd2(keys="id", sequence_by="source.lsn")
    )
    assert history.keys == ("id",) and history.applies_changes and history.changes == "changes.silver_history"
    assert [e.action for e in history.expectations] == ["drop"] * 4
    assert [c.label for c in history.checks] == ["rows_match_change_log", "versions_do_not_overlap"]
    assert "{changes.silver_history}" in history.checks[0].kwargs["unexpected_rows_query"]
    assert history.write.describe() == "SCD type 2 (history) on id, in order of source.lsn"
    reader = StreamingTable("gold.counts", upstreams=["silver.history"], transform="t:f")
    with pytest.raises(
        SpecError, match=r"reads 'silver.history', whose writes change rows .* write=Recompute"
    ):
        Pipeline("p", tables=[changes, history, reader])
    counts = MaterializedView(
        "gold.counts", upstreams=["silver.history"], transform="t:f", write=Recompute(keys=["seg"])
    )
    assert Pipeline("p", tables=[changes, history, counts]).table("gold.counts").recomputes
    with pytest.raises(SpecError, match=r"Recompute reads its upstreams whole"):
        MaterializedView(
            "gold.counts", upstreams=[Upstream("silver.history", watermark="1 hour")], transform="t:f"
        )
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'watermark'"):
        MaterializedView("gold.counts", upstreams=["silver.history"], transform="t:f", watermark="1 hour")  # type: ignore[call-arg]
    assert attrs.evolve(history).expectations == history.expectations, "implied once, not per rebuild"


@pytest.mark.parametrize(
    ("declaration", "constructor"),
    [
        ({"name": "bronze.x", "source": SOURCE}, "Ingest"),
        ({"name": "silver.x", "upstreams": ["bronze.x"], "transform": "t:f"}, "StreamingTable"),
        (
            {"name": "silver.x", "upstreams": ["bronze.x"], "write": Scd1(keys=["id"], sequence_by=["s"])},
            "ApplyChanges",
        ),
        (
            {"name": "gold.x", "upstreams": ["silver.x"], "transform": "t:f", "write": Recompute()},
            "MaterializedView",
        ),
    ],
)
def test_the_old_form_loads_as_its_kind_and_names_the_constructor_to_use(
    declaration: dict[str, object], constructor: str
) -> None:
    with pytest.warns(
        DeprecationWarning, match=rf"Table\(\.\.\.\) is deprecated .* declare it with {constructor}\("
    ) as warned:
        old = Table(**declaration)  # type: ignore[arg-type]
    assert [Path(w.filename).name for w in warned] == [Path(__file__).name], (
        "the warning points at the declaration"
    )
    kinds = {
        "Ingest": "ingest",
        "StreamingTable": "streaming",
        "ApplyChanges": "changes",
        "MaterializedView": "view",
    }
    assert old.kind == kinds[constructor]


def test_each_kind_takes_only_its_write_modes() -> None:
    scd = Scd2(keys=["id"], sequence_by=["s"])
    with pytest.raises(
        SpecError, match=r"a StreamingTable cannot be written with Scd2: declare it with ApplyChanges"
    ):
        StreamingTable("silver.x", upstreams=["bronze.raw"], transform="t:f", write=scd)
    with pytest.raises(
        SpecError, match=r"a StreamingTable cannot be written with Recompute: .*MaterializedView"
    ):
        StreamingTable("gold.x", upstreams=["silver.x"], transform="t:f", write=Recompute())
    with pytest.raises(
        SpecError, match=r"Ingest writes what it reads as it arrives, it cannot be written with Scd2"
    ):
        Ingest("bronze.x", source=SOURCE, write=scd)
    with pytest.raises(SpecError, match=r"kind='lake' is not a kind of table"):
        Table("bronze.x", kind="lake", source=SOURCE)
    changes = ApplyChanges("silver.h", upstream="bronze.changes", write=scd)
    view = MaterializedView("gold.v", upstreams=["silver.h"], transform="t:f")
    assert (changes.kind, changes.upstream_names, view.kind, view.write) == (
        "changes",
        ("bronze.changes",),
        "view",
        Recompute(),
    )
    assert [bronze().kind, silver().kind] == ["ingest", "streaming"]


def test_with_downstream_adds_every_reader_in_dependency_order(iot) -> None:
    silver_and_readers = [t.name for t in iot.with_downstream(["silver.device_events"])]
    assert silver_and_readers == [
        "silver.device_events", "gold.device_type_stats", "gold.device_status", "gold.device_anomaly_scores",
    ]  # fmt: skip
    assert [t.name for t in iot.with_downstream(["gold.device_status"])] == ["gold.device_status"]
    assert iot.with_downstream([]) == ()


def test_a_source_is_configured_by_the_deployments_settings_and_the_old_form_still_runs() -> None:
    """``Source.configured(deployment)``: the settings by name; a kind of one's own written for
    the previous release (``configured(self, *, kafka_servers)``) runs with a warning naming the
    new form."""
    import attrs

    from lakehouse.spec import Source

    @attrs.frozen
    class Old(Source):
        kind = "old"
        reader = "lakehouse.sources.protocol:SourceReader"
        schema: str = "a INT"
        brokers: str | None = None

        @property
        def location(self) -> str:
            return "somewhere"

        def configured(self, *, kafka_servers: str | None) -> Old:  # type: ignore[override]
            return attrs.evolve(self, brokers=kafka_servers)

    pipeline = Pipeline(name="old", tables=[Ingest("bronze.old", source=Old())])
    with pytest.warns(DeprecationWarning, match=r"configured\(self, deployment\)"):
        configured = pipeline.configured("old", "broker:9092")
    assert configured.table("bronze.old").source == Old(brokers="broker:9092")
    kafka = KafkaTopic(schema="a INT", topics=["t"])
    mine = Pipeline(name="k", tables=[Ingest("bronze.k", source=kafka)]).configured("kafka", "b:1")
    assert mine.table("bronze.k").source.bootstrap_servers == "b:1"
