"""One Delta table and the flow that produces it."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from lakehouse.spec.durations import ADDED_LATER, NAME, SpecError, optional_duration, parse_duration
from lakehouse.spec.expectations import Expectation, problems
from lakehouse.spec.freshness import DEFAULT_FRESHNESS, Freshness
from lakehouse.spec.modes import Append, OutputMode, WriteMode
from lakehouse.spec.sources import ARRIVAL_TIME, INGESTED_AT, PARSE_ERROR, Source, names, sources

if TYPE_CHECKING:
    from datetime import timedelta

    from lakehouse.spec.sinks import KafkaSink

LAYERS: tuple[str, ...] = ("bronze", "silver", "gold")
QUARANTINE_LAYER = "quarantine"
CHANGES_LAYER = "changes"
# The platform's own databases beside the layers (checks may read their tables by name):
# quarantines, change logs, ops tables (lakehouse.monitoring), model versions (lakehouse.models).
PLATFORM_DATABASES: tuple[str, ...] = (QUARANTINE_LAYER, CHANGES_LAYER, "ops", "models")
QUARANTINE_REASONS = "_failed_expectations"  # a quarantine row's column: the expectations it failed
TransformRef = str | Callable[..., Any]
# A table's kind: the constructor that declared it (lakehouse.spec.kinds), and what it requires.
KINDS: dict[str, str] = {
    "ingest": "Ingest",
    "streaming": "StreamingTable",
    "changes": "ApplyChanges",
    "view": "MaterializedView",
    "realtime": "RealtimeFlow",
}

# The kind of flow that runs each kind of table (``lakehouse.flows``; ``"module:Class"``, imported
# when the table is first run); a streaming table scored by a model runs as a ``scored`` flow.
FLOWS: dict[str, str] = {
    "ingest": "lakehouse.flows.ingest:IngestFlow",
    "streaming": "lakehouse.flows.transform:TransformFlow",
    "scored": "lakehouse.flows.scored:ScoredFlow",
    "changes": "lakehouse.flows.changes:ChangesFlow",
    "view": "lakehouse.flows.view:ViewFlow",
    "realtime": "lakehouse.flows.realtime:RealtimeFlowKind",
}


def quarantine_name(table: str) -> str:
    """``silver.device_events`` -> ``quarantine.silver_device_events`` (its Delta table name)."""
    return f"{QUARANTINE_LAYER}.{table.replace('.', '_', 1)}"


def changes_name(table: str) -> str:
    """``silver.customers`` -> ``changes.silver_customers``: the change log of an ``Scd1`` or
    ``Scd2`` table (every change it applied, as change rows)."""
    return f"{CHANGES_LAYER}.{table.replace('.', '_', 1)}"


def latest_changes_name(table: str) -> str:
    """``silver.customers`` -> ``changes.silver_customers.latest``: each key's latest change, beside
    the change log (a name no declared table can have, which the catalog leaves out)."""
    return f"{changes_name(table)}.latest"


def kind_for(write: object, *, has_source: bool = False) -> str:
    """The kind (a key of :data:`KINDS`) a table with this write mode and origin is."""
    if has_source:
        return "ingest"
    if getattr(write, "applies_changes", False):
        return "changes"
    if getattr(write, "recomputes", False):
        return "view"
    return "streaming"


@frozen
class Upstream:
    """An upstream table read as a stream, with its own watermark delay if it differs.

    ``lookback`` / ``lookahead``: how far before / after an output row's event time the rows of
    this upstream that row depends on can lie. A time-range join declares them: clicks count up
    to 1 hour after their impression, so a table of impressions with their clicks reads clicks
    with ``lookahead="1 hour"``. Backfills of ``[start, end)`` read this upstream over
    ``[start - lookback, end + lookahead)``; a change to it reaches the same distance downstream.
    """

    table: str
    watermark: str | None = None
    lookback: str | None = None
    lookahead: str | None = None

    @property
    def lookback_delta(self) -> timedelta:
        return optional_duration(self.lookback, "Upstream.lookback")

    @property
    def lookahead_delta(self) -> timedelta:
        return optional_duration(self.lookahead, "Upstream.lookahead")


def optional_names(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """Converter of an optional name list (``None``: not declared)."""
    return None if value is None else names(value)


def upstreams(value: Sequence[str | Upstream]) -> tuple[Upstream, ...]:
    """Converter of ``upstreams=`` of a table: table names or :class:`Upstream` declarations."""
    return tuple(u if isinstance(u, Upstream) else Upstream(u) for u in value)


@frozen
class State:
    """The transform keeps its own per-key state with event-time timers (e.g. sessions that close
    after 30 minutes without action, with ``transformWithStateInPandas``).

    Such rows depend on the key's history and some appear only when the watermark passes a timer,
    which a batch query never does: backfills of these flows replay their inputs as a bounded
    stream (see ``lakehouse.run.batch``), the transform still written once.

    - ``timeout``: the longest event-time delay of a timer after the input that set it; a
      backfill reads this much (plus the watermark delay) past its slice so all timers fire.
    - ``history``: how far back a key's state reaches; backfills read that much before their
      slice. ``None`` (default): state can reach back indefinitely, so backfills replay each
      upstream from its beginning (exact, costlier).
    """

    timeout: str
    history: str | None = None

    def __attrs_post_init__(self) -> None:  # a mistake shows on declaration, not in a backfill
        parse_duration(self.timeout, "State.timeout")
        if self.history:
            parse_duration(self.history, "State.history")

    @property
    def timeout_delta(self) -> timedelta:
        return parse_duration(self.timeout, "State.timeout")

    @property
    def history_delta(self) -> timedelta | None:
        return parse_duration(self.history, "State.history") if self.history else None


@frozen
class Table:
    """One Delta table and the flow that produces it: the model every runner reads.

    Declare tables with their kind's constructor (``Ingest``, ``StreamingTable``,
    ``ApplyChanges``, ``MaterializedView`` in :mod:`lakehouse.spec.kinds`); ``kind`` names it.
    Fields:

    - ``name``: ``"<layer>.<table>"``, unique across all pipelines (``silver.device_events``).
    - ``source`` (bronze) or ``upstreams`` (silver, gold): where rows come from. A bronze table
      may name alternative sources (``[JsonFiles(...), KafkaTopic(...)]``, the first is the
      default); the deployment picks one (``LAKEHOUSE_INGEST``, see ``Pipeline.configured``).
    - ``transform``: pure ``(*upstreams, *lookups) -> DataFrame``, as ``"module:function"``
      relative to the pipeline package, or a callable.
    - ``event_time``: output timestamp column; backfills slice the table on it.
    - ``watermark``: how late upstream rows may arrive (applied to each upstream's event_time).
    - ``write``: :class:`Append` (default), :class:`Upsert`, :class:`Aggregate`, :class:`Scd1`,
      :class:`Scd2` or :class:`Recompute` (see ``lakehouse.spec.modes``).
    - ``state``: the transform keeps per-key state with event-time timers (:class:`State`).
    - ``expectations``: GX expectations every written row must meet, each with an action
      (``warn`` / ``drop`` to quarantine / ``fail``); ``checks``: GX expectations on the whole
      table, run by Airflow after updates (see ``lakehouse.quality``).
    - ``model``: the name of a model of the pipeline (``Pipeline(models=[...])``) the rows are
      scored with: the transform receives the model in force as its last argument, and runs on
      each micro-batch with the version promoted at its start (see ``lakehouse.spec.models``).
    - ``stats_columns``: the columns Delta keeps data-skipping statistics on (min, max, null
      count per file; nested fields as ``a.b``), set when the table is created. Default: for
      bronze, its times and parse error (:attr:`skipping_stats`: its streams read it whole and
      backfills slice it on an expression statistics cannot serve, so statistics on every
      column of a raw copy cost its writes a tenth of their time for nothing); elsewhere Delta's
      default, the first 32 columns.
    """

    name: str
    transform: TransformRef | None = None
    sources: tuple[Source, ...] = field(default=(), converter=sources, alias="source")
    upstreams: tuple[Upstream, ...] = field(default=(), converter=upstreams)
    lookups: tuple[str, ...] = field(default=(), converter=names)
    event_time: str | None = None
    watermark: str | None = None
    write: WriteMode = field(factory=Append)
    state: State | None = None
    partition_by: tuple[str, ...] = field(default=(), converter=names)
    description: str = ""
    freshness: str | Freshness = DEFAULT_FRESHNESS
    expectations: tuple[Expectation, ...] = field(default=(), converter=tuple)
    checks: tuple[Expectation, ...] = field(default=(), converter=tuple)
    model: str | None = None
    kind: str | None = None
    stats_columns: tuple[str, ...] | None = field(default=None, converter=optional_names)
    # a kind of flow of one's own (``"module:Class"``, a ``lakehouse.flows.FlowKind``); a field
    # added after tables were deployed: in their code version only when declared
    flow_kind: str | None = field(default=None, metadata={ADDED_LATER: True})
    # a real-time flow's Kafka sink and the SQL condition its records go out on (RealtimeFlow)
    sink: KafkaSink | None = field(default=None, metadata={ADDED_LATER: True})
    where: str | None = field(default=None, metadata={ADDED_LATER: True})

    def __attrs_post_init__(self) -> None:
        self._check_kind()
        if isinstance(self.write, WriteMode):  # else _check says what to declare
            self._imply(self.write.implied_expectations(self), self.write.implied_checks(self))
        self._check()

    def _imply(self, expectations: tuple[Expectation, ...], checks: tuple[Expectation, ...]) -> None:
        """Add what the write mode implies to the declared expectations and checks (once: a
        table rebuilt by ``attrs.evolve`` already holds them)."""
        for name, implied in (("expectations", expectations), ("checks", checks)):
            declared = getattr(self, name)
            missing = tuple(e for e in implied if e not in declared)
            if missing:
                combined = (*missing, *declared) if name == "expectations" else (*declared, *missing)
                object.__setattr__(self, name, combined)

    # -- derived -------------------------------------------------------------------
    @property
    def layer(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def short_name(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def quarantine(self) -> str:
        """The name of the table holding this table's rows that failed an expectation."""
        return quarantine_name(self.name)

    @property
    def heartbeat_limit(self) -> str:
        """How long its driver may go without recording progress before it is stale."""
        return self.freshness.heartbeat if isinstance(self.freshness, Freshness) else self.freshness

    @property
    def freshness_objective(self) -> Freshness | None:
        """The objective on its data, if it declares one (see :mod:`lakehouse.spec.freshness`)."""
        return self.freshness if isinstance(self.freshness, Freshness) else None

    @property
    def replays_quarantine(self) -> bool:
        """Whether its quarantined rows can be written again on their own (``lakehouse replay``):
        appended or upserted rows, not rows its flow computes (windows, change feeds, views,
        scores), which a backfill recomputes."""
        return self.write.replays_rows and self.model is None

    @property
    def source(self) -> Source | None:
        """The source bronze reads: the first alternative (the one the deployment chose)."""
        return self.sources[0] if self.sources else None

    @property
    def changes(self) -> str:
        """The name of the change log of an ``Scd1``/``Scd2`` table (see :func:`changes_name`)."""
        return changes_name(self.name)

    @property
    def latest_changes(self) -> str:
        """Each key's latest change, beside the change log (see :func:`latest_changes_name`)."""
        return latest_changes_name(self.name)

    @property
    def applies_changes(self) -> bool:
        """An ``Scd1``/``Scd2`` table: its flow applies a change feed."""
        return self.write.applies_changes

    @property
    def recomputes(self) -> bool:
        """A ``Recompute`` table: its flow recomputes it from its upstreams' whole contents."""
        return self.write.recomputes

    @property
    def flow(self) -> str:
        """The class of the kind of flow that runs it (``lakehouse.flows``: ``"module:Class"``)."""
        if self.flow_kind is not None:
            return self.flow_kind
        return FLOWS["scored" if self.model is not None else str(self.kind)]

    @property
    def keeps_unparsed(self) -> bool:
        """Whether it keeps rows that could not be parsed, with ``_parse_error`` (bronze: every
        line lands), which its readers leave out and its at-rest checks skip."""
        return bool(self.sources)

    @property
    def logs(self) -> tuple[str, ...]:
        """The tables its writes keep beside it (a change feed's change log and latest changes),
        which move, compact and are checked with it."""
        return (self.changes, self.latest_changes) if self.write.applies_changes else ()

    @property
    def upstream_names(self) -> tuple[str, ...]:
        return tuple(u.table for u in self.upstreams)

    @property
    def keys(self) -> tuple[str, ...]:
        """The key: deduplication key (append), merge key (upsert, change feeds, recompute),
        window start + groups."""
        return self.write.keys_for(self)

    @property
    def output_mode(self) -> OutputMode:
        """Structured Streaming output mode: aggregates emit updated rows, the rest appends."""
        return self.write.output_mode

    @property
    def dedupes(self) -> bool:
        """The platform deduplicates the flow's rows on the keys (``Append(keys)``, within the
        watermark in streams)."""
        return self.write.dedupes(self)

    @property
    def skipping_stats(self) -> tuple[str, ...] | None:
        """The columns Delta keeps statistics on (``None``: Delta's default), see ``stats_columns``."""
        if self.stats_columns is not None:
            return self.stats_columns
        if self.sources:
            return tuple(c for c in (self.event_time, ARRIVAL_TIME, INGESTED_AT, PARSE_ERROR) if c)
        return None

    @property
    def time_expression(self) -> str | None:
        """The SQL expression backfills slice this table on: its event time; for bronze, the
        arrival time of lines whose event time could not be read (of every line, when bronze
        declares no event time), so every line is in a slice."""
        if self.sources:
            if not self.event_time:
                return f"`{ARRIVAL_TIME}`"
            return f"coalesce(`{self.event_time}`, `{ARRIVAL_TIME}`)"
        if not self.event_time:
            return None
        return f"`{self.event_time}`"

    def watermark_for(self, upstream: Upstream) -> str | None:
        return upstream.watermark or self.watermark

    # -- validation ----------------------------------------------------------------
    def fail(self, problem: str) -> SpecError:
        """The error of a declaration mistake in this table (what its write mode checks use)."""
        return SpecError(f"table {self.name!r}: {problem}")

    def _check(self) -> None:
        parts = self.name.split(".")
        if len(parts) != 2 or parts[0] not in LAYERS or not NAME.match(parts[1]):
            raise SpecError(
                f"table name {self.name!r} must be '<layer>.<name>' with layer one of "
                f"{', '.join(LAYERS)} and a lower_snake_case name, e.g. 'silver.device_events'"
            )
        if not isinstance(self.write, WriteMode):
            raise self.fail(
                f"write={self.write!r} is not a write mode: declare Append(), Append(keys=[...]), "
                "Upsert(keys=[...], sequence_by=[...]), Aggregate(Window(...), group_by=[...]), "
                "Scd1(...), Scd2(...) or Recompute(...) (from lakehouse.spec)"
            )
        self._check_origin()
        self.write.check(self)
        if self.model is not None:
            self._check_model()
        if self.watermark:
            parse_duration(self.watermark, f"table {self.name!r} watermark")
        for up in self.upstreams:
            for name in ("watermark", "lookback", "lookahead"):
                if getattr(up, name):
                    parse_duration(getattr(up, name), f"table {self.name!r} upstream {up.table!r} {name}")
        parse_duration(self.heartbeat_limit, f"table {self.name!r} freshness")
        objective = self.freshness_objective
        if objective is not None and objective.of == "event_time" and not self.event_time:
            raise self.fail(
                f"freshness={objective!r} measures the event_time column, and the table declares none: "
                "declare event_time=..., or measure Freshness(..., of='arrival')"
            )
        if self.state is not None:
            self._check_state()
        for problem in problems(self.expectations, self.checks, aggregate=self.write.updates_rows):
            raise self.fail(problem)

    def _check_kind(self) -> None:
        """The old form, ``Table(...)`` (release 0.1), still loads as the kind its origin and
        write mode call for, with a deprecation warning naming that constructor (removal: not
        before the release after one that warned, see docs/releases.md); a kind's constructor
        gets the write modes it takes."""
        if self.kind is None:
            if isinstance(self.write, WriteMode):
                object.__setattr__(self, "kind", kind_for(self.write, has_source=bool(self.sources)))
            warnings.warn(
                f"table {self.name!r}: Table(...) is deprecated since lakehouse 0.2: declare it with "
                f"{self._fitting_kind()}(...) from lakehouse.spec, which takes only what that kind of "
                "table can have (Ingest, StreamingTable, ApplyChanges, MaterializedView; "
                "see CHANGELOG.md and docs/concepts.md)",
                DeprecationWarning,
                stacklevel=4,  # the declaration: _check_kind < __attrs_post_init__ < __init__ < it
            )
            return
        if self.kind not in KINDS:
            raise self.fail(f"kind={self.kind!r} is not a kind of table: one of {', '.join(KINDS)}")
        if not isinstance(self.write, WriteMode):
            return  # _check says what to declare
        mode = type(self.write).__name__
        if self.kind == "realtime":
            self._check_realtime()
            return
        if self.sink is not None or self.where is not None:
            raise self.fail("sink= and where= belong to a real-time flow: declare it with RealtimeFlow(...)")
        if self.kind == "ingest" and (self.write.applies_changes or self.write.recomputes):
            raise self.fail(
                f"Ingest writes what it reads as it arrives, it cannot be written with {mode}: "
                "ingest change events with Ingest(...) and apply them with ApplyChanges(...)"
            )
        fitting = self._fitting_kind()
        if self.kind != "ingest" and fitting != KINDS[self.kind]:
            raise self.fail(
                f"a {KINDS[self.kind]} cannot be written with {mode}: declare it with "
                f"{fitting}(..., write={mode}(...))"
            )

    def _check_realtime(self) -> None:
        """What Spark's Real-time Mode cannot run is refused here, where it is declared."""
        from lakehouse.spec.sinks import KafkaSink

        if not isinstance(self.sink, KafkaSink):
            raise self.fail(f"sink={self.sink!r}: a real-time flow writes to KafkaSink(topic=...)")
        if [s.kind for s in self.sources] != ["kafka"]:
            raise self.fail(
                "a real-time flow reads one KafkaTopic(...) source: Real-time Mode reads Kafka only "
                "(for files or Delta tables, declare an Ingest or StreamingTable, which run in micro-batches)"
            )
        refused = {
            "upstreams": "it reads its Kafka source, not tables (a table's changes: StreamingTable)",
            "lookups": "lookups are not supported on the real-time lane yet (join them in a StreamingTable)",
            "state": "Real-time Mode in Spark 4.2 runs stateless queries only (per-key state: StreamingTable(state=...))",
            "watermark": "Real-time Mode in Spark 4.2 runs stateless queries only: no watermark",
            "model": "scoring with a model version runs per micro-batch (StreamingTable(model=...))",
        }
        for name, reason in refused.items():
            if getattr(self, name):
                raise self.fail(f"a real-time flow cannot declare {name}=: {reason}")
        if type(self.write) is not Append or self.write.keys:
            raise self.fail(
                "a real-time flow sends each record as it comes (at-least-once) and its Delta twin "
                "appends the same records: write=Append() only (deduplication needs state, which "
                "Real-time Mode cannot keep in Spark 4.2)"
            )

    def unavailable(self) -> str | None:
        """Why a deployment cannot run this table as configured (None: it can). A real-time flow
        needs Kafka brokers for its source and its sink; a deployment without them (the embedded
        default) sets it aside and says so, rather than failing the others' start."""
        if self.sink is None:
            return None
        servers = getattr(self.sources[0], "bootstrap_servers", None) if self.sources else None
        if servers and self.sink.bootstrap_servers:
            return None
        return (
            "a real-time flow needs Kafka, and this deployment names no brokers: set "
            "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS (the stack platform does) or bootstrap_servers= on its "
            "KafkaTopic and KafkaSink"
        )

    def _fitting_kind(self) -> str:
        """The constructor this table's origin and write mode call for."""
        return KINDS[kind_for(self.write, has_source=bool(self.sources))]

    def _check_origin(self) -> None:
        if not self.sources and not self.upstreams:
            raise self.fail("declares neither a source (bronze ingestion) nor upstreams")
        if self.sources and self.upstreams:
            raise self.fail("declares both a source and upstreams; a table has one origin")
        if not self.sources and self.transform is None and not self.applies_changes and not self.flow_kind:
            raise self.fail("reads upstreams but declares no transform")
        if not self.sources:
            return
        kinds = [s.kind for s in self.sources]
        if len(set(kinds)) != len(kinds):
            raise self.fail(f"declares two sources of one kind ({', '.join(kinds)}); name one per kind")
        columns = [tuple((c.name, c.type.upper()) for c in s.columns) for s in self.sources]
        if len(set(columns)) > 1:
            raise self.fail(
                "its alternative sources declare different schemas; alternatives must give the same "
                "columns so that downstream tables do not depend on the deployment"
            )
        declared = [c.name for c in self.sources[0].columns]
        if self.event_time and self.event_time not in declared:
            raise self.fail(
                f"event_time {self.event_time!r} is not a column of the source schema ({', '.join(declared)})"
            )

    def _check_model(self) -> None:
        if not NAME.match(self.model or ""):
            raise self.fail(
                f"model={self.model!r} must name a model of the pipeline, e.g. model='iot_anomaly'"
            )
        if self.sources or len(self.upstreams) != 1 or self.transform is None:
            raise self.fail(
                "a table scored by a model reads one upstream with a transform(rows, *lookups, model): "
                "the transform runs on each micro-batch with the model version in force"
            )
        if not self.write.keyed_insert or self.state is not None:
            raise self.fail(
                "a table scored by a model is written with Append(keys=[...]) (keys of its upstream's "
                "rows): its transform runs per micro-batch, without state, and a backfill finds the "
                "version each row was scored with by its key"
            )

    def _check_state(self) -> None:
        if not self.upstreams:
            raise self.fail("state= needs upstreams: per-key state is kept over upstream rows")
        if not self.event_time:
            raise self.fail(
                "state= needs event_time=: the output's event-time column, which backfills slice "
                "on (e.g. the time of each status change)"
            )
        for up in self.upstreams:
            if not self.watermark_for(up):
                raise self.fail(
                    f"state= needs a watermark on upstream {up.table!r}: event-time timers fire "
                    "as the watermark passes them; set watermark= on the table or the Upstream"
                )
