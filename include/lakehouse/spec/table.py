"""One Delta table and the flow that produces it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from lakehouse.spec.durations import NAME, SpecError, optional_duration, parse_duration
from lakehouse.spec.expectations import Expectation, gxe, problems
from lakehouse.spec.modes import (
    CHANGE_OPERATIONS,
    WRITE_MODES,
    Aggregate,
    Append,
    ChangeMode,
    OutputMode,
    Recompute,
    Scd2,
    WriteMode,
)
from lakehouse.spec.sources import ARRIVAL_TIME, Source, names, sources

if TYPE_CHECKING:
    from datetime import timedelta

LAYERS: tuple[str, ...] = ("bronze", "silver", "gold")
QUARANTINE_LAYER = "quarantine"
CHANGES_LAYER = "changes"
# The platform's own databases beside the layers (checks may read their tables by name):
# quarantines, change logs, ops tables (lakehouse.monitoring), model versions (lakehouse.models).
PLATFORM_DATABASES: tuple[str, ...] = (QUARANTINE_LAYER, CHANGES_LAYER, "ops", "models")
QUARANTINE_REASONS = "_failed_expectations"  # a quarantine row's column: the expectations it failed
TransformRef = str | Callable[..., Any]

# The columns of a change row (``lakehouse.changes``), beside the row image's columns.
CHANGE_OP, CHANGE_SEQUENCE, CHANGE_TIME, CHANGE_ID = "_op", "_seq", "_ts", "_event_id"
CHANGE_VERSION = "_version"  # the total order of a key's changes


def quarantine_name(table: str) -> str:
    """``silver.device_events`` -> ``quarantine.silver_device_events`` (its Delta table name)."""
    return f"{QUARANTINE_LAYER}.{table.replace('.', '_', 1)}"


def changes_name(table: str) -> str:
    """``silver.customers`` -> ``changes.silver_customers``: the change log of an ``Scd1`` or
    ``Scd2`` table (every change it applied, as change rows)."""
    return f"{CHANGES_LAYER}.{table.replace('.', '_', 1)}"


def change_expectations(table: Table) -> tuple[Expectation, ...]:
    """What every change event must have to be applied (else it goes to the quarantine with
    the name of what it lacks): an operation the platform knows, its keys, its sequence."""
    if not isinstance(table.write, ChangeMode):
        return ()
    return (
        gxe.ExpectColumnValuesToNotBeNull(column=CHANGE_OP, action="drop", name="change_has_operation"),
        gxe.ExpectColumnValuesToBeInSet(
            column=CHANGE_OP, value_set=list(CHANGE_OPERATIONS), action="drop", name="change_operation_known"
        ),
        *(
            gxe.ExpectColumnValuesToNotBeNull(column=key, action="drop", name=f"change_has_key_{key}")
            for key in table.write.keys
        ),
        gxe.ExpectColumnValuesToNotBeNull(column=CHANGE_SEQUENCE, action="drop", name="change_has_sequence"),
    )


def history_checks(table: Table) -> tuple[Expectation, ...]:
    """The checks every ``Scd1``/``Scd2`` table passes at rest: one row (one current version)
    per key, the rows agree with the change log (a key has a row, or a current version, exactly
    when its latest change is not a delete), and versions of a key never overlap."""
    if not isinstance(table.write, ChangeMode):
        return ()
    keys = [f"`{k}`" for k in table.write.keys]
    on = " AND ".join(f"c.{k} <=> t.{k}" for k in keys)
    current = "WHERE is_current" if isinstance(table.write, Scd2) else ""
    rows = "current rows" if isinstance(table.write, Scd2) else "rows"
    listed = ", ".join(keys)
    matches_log = (
        f"SELECT {', '.join(f'coalesce(c.{k}, t.{k}) AS {k}' for k in keys)}, c._last_op, t._rows "
        f"FROM (SELECT {listed}, max_by({CHANGE_OP}, {CHANGE_VERSION}) AS _last_op "
        f"FROM {{{changes_name(table.name)}}} GROUP BY {listed}) c "
        f"FULL OUTER JOIN (SELECT {listed}, count(*) AS _rows FROM {{batch}} {current} GROUP BY {listed}) t "
        f"ON {on} WHERE c._last_op IS NULL OR t._rows > 1 "
        "OR (c._last_op = 'd' AND t._rows IS NOT NULL) OR (c._last_op <> 'd' AND t._rows IS NULL)"
    )
    checks = [
        gxe.UnexpectedRowsExpectation(
            unexpected_rows_query=matches_log,
            description=f"Exactly the keys whose latest change is not a delete have one of the {rows}",
            name="rows_match_change_log",
        )
    ]
    if isinstance(table.write, Scd2):
        by_key = f"PARTITION BY {', '.join(keys)} ORDER BY _start_seq"
        checks.append(
            gxe.UnexpectedRowsExpectation(
                unexpected_rows_query=(
                    f"SELECT * FROM (SELECT *, LAG(_end_seq) OVER ({by_key}) AS _previous_end, "
                    f"ROW_NUMBER() OVER ({by_key}) AS _n FROM {{batch}}) "
                    "WHERE (_n > 1 AND (_previous_end IS NULL OR _previous_end > _start_seq)) "
                    "OR _end_seq <= _start_seq OR valid_to < valid_from"
                ),
                description="Versions of a key never overlap (and no interval ends before it starts)",
                name="versions_do_not_overlap",
            )
        )
    return tuple(checks)


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


def upstreams(value: Sequence[str | Upstream]) -> tuple[Upstream, ...]:
    """Converter of ``Table(upstreams=...)``: table names or :class:`Upstream` declarations."""
    return tuple(u if isinstance(u, Upstream) else Upstream(u) for u in value)


@frozen
class State:
    """The transform keeps its own per-key state with event-time timers (e.g. sessions that close
    after 30 minutes without action, with ``transformWithStateInPandas``).

    Such rows depend on the key's history and some appear only when the watermark passes a timer,
    which a batch query never does: backfills of these flows replay their inputs as a bounded
    stream (see ``lakehouse.batch``), the transform still written once.

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
    """One Delta table and the flow that produces it.

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
    freshness: str = "15 minutes"
    expectations: tuple[Expectation, ...] = field(default=(), converter=tuple)
    checks: tuple[Expectation, ...] = field(default=(), converter=tuple)
    model: str | None = None

    def __attrs_post_init__(self) -> None:
        self._imply(change_expectations(self), history_checks(self))
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
    def source(self) -> Source | None:
        """The source bronze reads: the first alternative (the one the deployment chose)."""
        return self.sources[0] if self.sources else None

    @property
    def changes(self) -> str:
        """The name of the change log of an ``Scd1``/``Scd2`` table (see :func:`changes_name`)."""
        return changes_name(self.name)

    @property
    def applies_changes(self) -> bool:
        """An ``Scd1``/``Scd2`` table: its flow applies a change feed."""
        return isinstance(self.write, ChangeMode)

    @property
    def recomputes(self) -> bool:
        """A ``Recompute`` table: its flow recomputes it from its upstreams' whole contents."""
        return isinstance(self.write, Recompute)

    @property
    def upstream_names(self) -> tuple[str, ...]:
        return tuple(u.table for u in self.upstreams)

    @property
    def keys(self) -> tuple[str, ...]:
        """The key: deduplication key (append), merge key (upsert, change feeds, recompute),
        window start + groups."""
        if isinstance(self.write, Aggregate):
            return (self.event_time or "", *self.write.group_by)
        return self.write.keys

    @property
    def output_mode(self) -> OutputMode:
        """Structured Streaming output mode: aggregates emit updated rows, the rest appends."""
        return self.write.output_mode

    @property
    def dedupes(self) -> bool:
        """Append tables with a key are deduplicated on it (within the watermark in streams); a
        scored table's keys only name its rows (its transform runs per batch, without state)."""
        return (
            isinstance(self.write, Append)
            and bool(self.write.keys)
            and not self.sources
            and self.model is None
        )

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
    def _fail(self, problem: str) -> SpecError:
        return SpecError(f"table {self.name!r}: {problem}")

    def _check(self) -> None:
        parts = self.name.split(".")
        if len(parts) != 2 or parts[0] not in LAYERS or not NAME.match(parts[1]):
            raise SpecError(
                f"table name {self.name!r} must be '<layer>.<name>' with layer one of "
                f"{', '.join(LAYERS)} and a lower_snake_case name, e.g. 'silver.device_events'"
            )
        if not isinstance(self.write, WRITE_MODES):
            raise self._fail(
                f"write={self.write!r} is not a write mode: declare Append(), Append(keys=[...]), "
                "Upsert(keys=[...], sequence_by=[...]), Aggregate(Window(...), group_by=[...]), "
                "Scd1(...), Scd2(...) or Recompute(...) (from lakehouse.spec)"
            )
        self._check_origin()
        if self.applies_changes:
            self._check_changes()
        if self.recomputes:
            self._check_recompute()
        if self.model is not None:
            self._check_model()
        if self.watermark:
            parse_duration(self.watermark, f"table {self.name!r} watermark")
        for up in self.upstreams:
            for name in ("watermark", "lookback", "lookahead"):
                if getattr(up, name):
                    parse_duration(getattr(up, name), f"table {self.name!r} upstream {up.table!r} {name}")
        parse_duration(self.freshness, f"table {self.name!r} freshness")
        if isinstance(self.write, Aggregate) and not self.event_time:
            raise self._fail(
                "Aggregate needs an event-time column: set event_time= to the window-start column "
                "of the output (backfills slice on it)"
            )
        if self.state is not None:
            self._check_state()
        if self.dedupes:
            for up in self.upstreams:
                if not self.watermark_for(up):
                    raise self._fail(
                        f"deduplicates on keys {list(self.keys)}, which needs a watermark to bound "
                        "its state; set watermark='10 minutes' or similar"
                    )
        for problem in problems(self.expectations, self.checks, aggregate=isinstance(self.write, Aggregate)):
            raise self._fail(problem)

    def _check_origin(self) -> None:
        if not self.sources and not self.upstreams:
            raise self._fail("declares neither a source (bronze ingestion) nor upstreams")
        if self.sources and self.upstreams:
            raise self._fail("declares both a source and upstreams; a table has one origin")
        if not self.sources and self.transform is None and not self.applies_changes:
            raise self._fail("reads upstreams but declares no transform")
        if not self.sources:
            return
        kinds = [s.kind for s in self.sources]
        if len(set(kinds)) != len(kinds):
            raise self._fail(f"declares two sources of one kind ({', '.join(kinds)}); name one per kind")
        columns = [tuple((c.name, c.type.upper()) for c in s.columns) for s in self.sources]
        if len(set(columns)) > 1:
            raise self._fail(
                "its alternative sources declare different schemas; alternatives must give the same "
                "columns so that downstream tables do not depend on the deployment"
            )
        declared = [c.name for c in self.sources[0].columns]
        if self.event_time and self.event_time not in declared:
            raise self._fail(
                f"event_time {self.event_time!r} is not a column of the source schema ({', '.join(declared)})"
            )

    def _check_changes(self) -> None:
        assert isinstance(self.write, ChangeMode)
        mode = type(self.write).__name__
        if self.sources or len(self.upstreams) != 1:
            raise self._fail(
                f"{mode} applies the change feed of one upstream table: declare "
                "upstreams=['bronze.<changes>'], the bronze table of Debezium change events"
            )
        for name in ("event_time", "watermark", "state"):
            if getattr(self, name):
                raise self._fail(
                    f"{mode} cannot declare {name}=: changes are applied in sequence order, per key, "
                    "whenever they arrive (no watermark drops them), and a backfill recomputes the "
                    "keys changed in its slice; leave it out"
                )
        if isinstance(self.write, Scd2) and set(self.partition_by) & set(self.write.track or ()):
            raise self._fail("Scd2 cannot be partitioned by a tracked column: rows move between versions")

    def _check_recompute(self) -> None:
        if not self.upstreams:
            raise self._fail("Recompute needs upstreams: it recomputes the transform over them")
        if self.state is not None or self.watermark or any(u.watermark for u in self.upstreams):
            raise self._fail(
                "Recompute reads its upstreams whole, as batches, each time they change: it takes "
                "no watermark= or state=; leave them out"
            )

    def _check_model(self) -> None:
        if not NAME.match(self.model or ""):
            raise self._fail(
                f"model={self.model!r} must name a model of the pipeline, e.g. model='iot_anomaly'"
            )
        if self.sources or len(self.upstreams) != 1 or self.transform is None:
            raise self._fail(
                "a table scored by a model reads one upstream with a transform(rows, *lookups, model): "
                "the transform runs on each micro-batch with the model version in force"
            )
        if not isinstance(self.write, Append) or not self.write.keys or self.state is not None:
            raise self._fail(
                "a table scored by a model is written with Append(keys=[...]) (keys of its upstream's "
                "rows): its transform runs per micro-batch, without state, and a backfill finds the "
                "version each row was scored with by its key"
            )

    def _check_state(self) -> None:
        if not self.upstreams:
            raise self._fail("state= needs upstreams: per-key state is kept over upstream rows")
        if not self.event_time:
            raise self._fail(
                "state= needs event_time=: the output's event-time column, which backfills slice "
                "on (e.g. the time of each status change)"
            )
        if isinstance(self.write, Aggregate):
            raise self._fail(
                "state= works with Append or Upsert, not 'aggregate': the transform's own state "
                "already decides what to emit"
            )
        if isinstance(self.write, Append) and self.write.keys:
            raise self._fail(
                "state= with Append cannot declare keys: the platform would deduplicate after the "
                "transform's own state; deduplicate in the transform or use Upsert(...)"
            )
        for up in self.upstreams:
            if not self.watermark_for(up):
                raise self._fail(
                    f"state= needs a watermark on upstream {up.table!r}: event-time timers fire "
                    "as the watermark passes them; set watermark= on the table or the Upstream"
                )
