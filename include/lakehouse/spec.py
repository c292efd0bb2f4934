"""The pipeline declaration API: tables, their sources and upstreams, and how they are written.

A pipeline is declared once, in plain Python with no Spark import, so that Airflow can read it
at DAG-parse time. Transforms are named by reference (``"transforms:clean_events"``, relative
to the pipeline's package) and resolved only by the runners, which import pyspark.

Everything is validated when the objects are built: a mistake is reported on load with what is
wrong, where, and how to fix it, never halfway through a stream.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any, Literal

from lakehouse.quality.declare import Expectation
from lakehouse.quality.declare import problems as quality_problems

Layer = Literal["bronze", "silver", "gold"]
WriteMode = Literal["append", "upsert", "aggregate"]
LAYERS: tuple[str, ...] = ("bronze", "silver", "gold")
WRITE_MODES: tuple[str, ...] = ("append", "upsert", "aggregate")
TransformRef = str | Callable[..., Any]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_DURATION = re.compile(r"^\s*(\d+)\s*(second|minute|hour|day|week)s?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


class SpecError(ValueError):
    """A pipeline declaration is invalid; the message says what, where and how to fix it."""


def parse_duration(text: str, where: str) -> timedelta:
    """``"10 minutes"`` -> ``timedelta(minutes=10)``; the same syntax Spark's watermarks take."""
    match = _DURATION.match(text or "")
    if not match:
        raise SpecError(
            f"{where}: {text!r} is not a duration; write e.g. '30 seconds', '10 minutes', '2 hours'"
        )
    return timedelta(seconds=int(match[1]) * _UNIT_SECONDS[match[2].lower()])


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    required: bool


def ddl_columns(ddl: str) -> tuple[Column, ...]:
    """Top-level columns of a Spark DDL schema string (``NOT NULL`` marks a required field)."""
    parts, depth, current = [], 0, []
    for char in ddl:
        depth += char in "<("
        depth -= char in ">)"
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    columns = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        tokens = part.split(None, 1)
        if len(tokens) != 2:
            raise SpecError(f"schema column {part!r} needs a name and a type, e.g. 'signal DOUBLE'")
        name, rest = tokens[0].strip("`"), tokens[1].strip()
        required = bool(re.search(r"\bNOT\s+NULL\s*$", rest, re.IGNORECASE))
        type_ = re.sub(r"\s+NOT\s+NULL\s*$", "", rest, flags=re.IGNORECASE)
        columns.append(Column(name, type_, required))
    return tuple(columns)


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class JsonFiles:
    """Bronze source: JSON-lines files dropped in ``<root>/landing/<pipeline>/<path>/``.

    ``schema`` is a Spark DDL string; ``NOT NULL`` fields are required, and a line missing one,
    with a value of the wrong type, or that is not JSON, lands in bronze with a parse error.
    """

    schema: str
    path: str | None = None
    max_files_per_trigger: int = 100

    def __post_init__(self) -> None:
        if not ddl_columns(self.schema):
            raise SpecError("JsonFiles.schema is empty; give a DDL string like 'id STRING NOT NULL'")

    @property
    def columns(self) -> tuple[Column, ...]:
        return ddl_columns(self.schema)


@dataclass(frozen=True)
class KafkaTopic:
    """Bronze source: JSON documents in the values of Kafka topic(s), read with Spark's
    Structured Streaming Kafka source.

    Bronze keeps each record's Kafka coordinates (``_kafka_key``, ``_kafka_value``,
    ``_kafka_topic``, ``_kafka_partition``, ``_kafka_offset``, ``_kafka_timestamp``) next to the
    parsed ``schema`` columns (parsed like :class:`JsonFiles` lines: a bad value stays in bronze
    with ``_parse_error``). Offsets live in the flow's checkpoint and every micro-batch is
    committed once (txnAppId/txnVersion), so a crash never loses or duplicates a record.

    - ``topics``: one or more topic names.
    - ``starting_offsets``: where a new checkpoint starts: ``earliest``, ``latest``, or Spark's
      JSON per-partition form. A running flow resumes from its checkpoint, whatever this says.
    - ``max_offsets_per_trigger``: at most this many records per micro-batch (all topics).
    - ``bootstrap_servers``: default ``LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS`` (deployment, not
      declaration); ``options``: more ``kafka.*`` consumer options (security, ...).
    """

    schema: str
    topics: Sequence[str]
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = 10000
    bootstrap_servers: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            object.__setattr__(self, "topics", (self.topics,))
        object.__setattr__(self, "topics", tuple(self.topics))
        if not ddl_columns(self.schema):
            raise SpecError("KafkaTopic.schema is empty; give a DDL string like 'id STRING NOT NULL'")
        if not self.topics or not all(re.match(r"^[A-Za-z0-9._-]+$", t) for t in self.topics):
            raise SpecError(
                f"KafkaTopic.topics {list(self.topics)!r}: give one or more topic names "
                "(letters, digits, '.', '_', '-')"
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise SpecError("KafkaTopic.max_offsets_per_trigger must be a positive number of records")
        for key in self.options:
            if not key.startswith("kafka."):
                raise SpecError(f"KafkaTopic.options key {key!r}: Kafka client options start with 'kafka.'")

    @property
    def columns(self) -> tuple[Column, ...]:
        return ddl_columns(self.schema)


Source = JsonFiles | KafkaTopic


@dataclass(frozen=True)
class Lookup:
    """Static reference data joined to streams (stream-static join), read fresh by every run.

    Lives in ``<root>/reference/<pipeline>/<path>`` (default ``<name>.csv``).
    """

    name: str
    schema: str
    format: Literal["csv", "json", "parquet", "delta"] = "csv"
    path: str | None = None
    options: Mapping[str, str] = field(default_factory=lambda: {"header": "true"})

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise SpecError(f"lookup name {self.name!r} must be lower_snake_case")
        ddl_columns(self.schema)

    @property
    def file(self) -> str:
        return self.path or f"{self.name}.{self.format}"


@dataclass(frozen=True)
class Window:
    """Event-time window of an aggregate table: ``size`` long, starting every ``slide``."""

    size: str
    slide: str | None = None

    @property
    def size_delta(self) -> timedelta:
        return parse_duration(self.size, "Window.size")

    @property
    def slide_delta(self) -> timedelta:
        return parse_duration(self.slide, "Window.slide") if self.slide else self.size_delta

    def __post_init__(self) -> None:
        if self.slide_delta > self.size_delta:
            raise SpecError(f"Window slide {self.slide!r} is longer than its size {self.size!r}")


@dataclass(frozen=True)
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
        return parse_duration(self.lookback, "Upstream.lookback") if self.lookback else timedelta(0)

    @property
    def lookahead_delta(self) -> timedelta:
        return parse_duration(self.lookahead, "Upstream.lookahead") if self.lookahead else timedelta(0)


@dataclass(frozen=True)
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

    @property
    def timeout_delta(self) -> timedelta:
        return parse_duration(self.timeout, "State.timeout")

    @property
    def history_delta(self) -> timedelta | None:
        return parse_duration(self.history, "State.history") if self.history else None

    def __post_init__(self) -> None:  # a mistake shows on declaration, not in a backfill
        parse_duration(self.timeout, "State.timeout")
        if self.history:
            parse_duration(self.history, "State.history")


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Table:
    """One Delta table and the flow that produces it.

    - ``name``: ``"<layer>.<table>"``, unique across all pipelines (``silver.device_events``).
    - ``source`` (bronze) or ``upstreams`` (silver, gold): where rows come from.
    - ``transform``: pure ``(*upstreams, *lookups) -> DataFrame``, as ``"module:function"``
      relative to the pipeline package, or a callable.
    - ``event_time``: output timestamp column; backfills slice the table on it.
    - ``watermark``: how late upstream rows may arrive (applied to each upstream's event_time).
    - ``keys``: unique key. For ``append`` tables, rows are deduplicated on it within the
      watermark; for ``upsert`` it is the merge key; for ``aggregate`` the group key.
    - ``write``: ``append`` (insert once), ``upsert`` (keep the row with the greatest
      ``sequence_by`` per key), ``aggregate`` (event-time windows updated in place as late rows
      arrive; needs ``window`` and ``event_time`` = the window-start column).
    - ``state``: the transform keeps per-key state with event-time timers (:class:`State`).
    - ``expectations``: GX expectations every written row must meet, each with an action
      (``warn`` / ``drop`` to quarantine / ``fail``); ``checks``: GX expectations on the whole
      table, run by Airflow after updates (see ``lakehouse.quality``).
    """

    name: str
    transform: TransformRef | None = None
    source: Source | None = None
    upstreams: Sequence[str | Upstream] = ()
    lookups: Sequence[str] = ()
    event_time: str | None = None
    watermark: str | None = None
    keys: Sequence[str] = ()
    sequence_by: Sequence[str] = ()
    write: WriteMode = "append"
    window: Window | None = None
    state: State | None = None
    partition_by: Sequence[str] = ()
    description: str = ""
    freshness: str = "15 minutes"
    expectations: Sequence[Expectation] = ()
    checks: Sequence[Expectation] = ()

    def __post_init__(self) -> None:
        for name in ("keys", "sequence_by", "lookups", "partition_by", "expectations", "checks"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        ups = tuple(u if isinstance(u, Upstream) else Upstream(u) for u in self.upstreams)
        object.__setattr__(self, "upstreams", ups)
        self._check()

    # -- derived -------------------------------------------------------------------
    @property
    def layer(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def short_name(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def upstream_names(self) -> tuple[str, ...]:
        return tuple(u.table for u in self.upstreams)  # type: ignore[union-attr]

    @property
    def output_mode(self) -> str:
        """Structured Streaming output mode: aggregates emit updated rows, the rest appends."""
        return "update" if self.write == "aggregate" else "append"

    @property
    def dedupes(self) -> bool:
        """Append tables with a key are deduplicated on it (within the watermark in streams)."""
        return self.write == "append" and bool(self.keys) and self.source is None

    def watermark_for(self, upstream: Upstream) -> str | None:
        return upstream.watermark or self.watermark

    # -- validation ----------------------------------------------------------------
    def _fail(self, problem: str) -> SpecError:
        return SpecError(f"table {self.name!r}: {problem}")

    def _check(self) -> None:
        parts = self.name.split(".")
        if len(parts) != 2 or parts[0] not in LAYERS or not _NAME.match(parts[1]):
            raise SpecError(
                f"table name {self.name!r} must be '<layer>.<name>' with layer one of "
                f"{', '.join(LAYERS)} and a lower_snake_case name, e.g. 'silver.device_events'"
            )
        if self.write not in WRITE_MODES:
            raise self._fail(f"write={self.write!r} is not one of {', '.join(WRITE_MODES)}")
        if self.source is None and not self.upstreams:
            raise self._fail("declares neither a source (bronze ingestion) nor upstreams")
        if self.source is not None and self.upstreams:
            raise self._fail("declares both a source and upstreams; a table has one origin")
        if self.source is None and self.transform is None:
            raise self._fail("reads upstreams but declares no transform")
        if self.watermark:
            parse_duration(self.watermark, f"table {self.name!r} watermark")
        for up in self.upstreams:
            for name in ("watermark", "lookback", "lookahead"):
                if getattr(up, name):
                    parse_duration(getattr(up, name), f"table {self.name!r} upstream {up.table!r} {name}")
        if self.state is not None:
            self._check_state()
        parse_duration(self.freshness, f"table {self.name!r} freshness")
        if self.write == "upsert":
            if not self.keys:
                raise self._fail("write='upsert' needs keys=(...) to merge on")
            if not self.sequence_by:
                raise self._fail(
                    "write='upsert' needs sequence_by=(...): the column(s) that order versions "
                    "of a key, so the latest wins whatever order rows arrive in"
                )
        if self.write == "aggregate":
            if not self.event_time:
                raise self._fail(
                    "write='aggregate' needs an event-time column: set event_time= to the "
                    "window-start column of the output (backfills slice on it)"
                )
            if self.window is None:
                raise self._fail("write='aggregate' needs window=Window(size=..., slide=...)")
            if not self.keys:
                raise self._fail("write='aggregate' needs keys=(...): window start + group columns")
            if self.event_time not in self.keys:
                raise self._fail(f"keys must include the window-start column {self.event_time!r}")
        for problem in quality_problems(self):
            raise self._fail(problem)
        if self.source is not None:
            names = [c.name for c in self.source.columns]
            if self.event_time and self.event_time not in names:
                raise self._fail(
                    f"event_time {self.event_time!r} is not a column of the source schema "
                    f"({', '.join(names)})"
                )

    def _check_state(self) -> None:
        if not self.upstreams:
            raise self._fail("state= needs upstreams: per-key state is kept over upstream rows")
        if not self.event_time:
            raise self._fail(
                "state= needs event_time=: the output's event-time column, which backfills slice "
                "on (e.g. the time of each status change)"
            )
        if self.write not in ("append", "upsert"):
            raise self._fail(
                f"state= works with write='append' or 'upsert', not {self.write!r}: the transform's "
                "own state already decides what to emit"
            )
        if self.write == "append" and self.keys:
            raise self._fail(
                "state= with write='append' cannot declare keys: the platform would deduplicate "
                "after the transform's own state; deduplicate in the transform or use write='upsert'"
            )
        for up in self.upstreams:
            if not self.watermark_for(up):  # type: ignore[arg-type]
                raise self._fail(
                    f"state= needs a watermark on upstream {up.table!r}: event-time timers fire "  # type: ignore[union-attr]
                    "as the watermark passes them; set watermark= on the table or the Upstream"
                )


# --------------------------------------------------------------------------- pipelines


@dataclass(frozen=True)
class Pipeline:
    """A named set of tables forming a DAG, plus its lookups and operational defaults."""

    name: str
    tables: Sequence[Table]
    lookups: Sequence[Lookup] = ()
    description: str = ""
    owner: str = "data-engineering"
    generator: str | None = None
    incremental_schedule: str = "*/15 * * * *"
    backfill_schedule: str = "@daily"
    monitor_interval: str = "2 minutes"
    start_date: str = "2026-01-01"
    restart_budget: int = 3
    package: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "lookups", tuple(self.lookups))
        if not _NAME.match(self.name):
            raise SpecError(f"pipeline name {self.name!r} must be lower_snake_case")
        parse_duration(self.monitor_interval, f"pipeline {self.name!r} monitor_interval")
        self._check_graph()

    def with_package(self, package: str) -> Pipeline:
        return replace(self, package=package)

    # -- lookups ------------------------------------------------------------------
    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise SpecError(
            f"pipeline {self.name!r} has no table {name!r}; its tables are: "
            f"{', '.join(t.name for t in self.tables)}"
        )

    def lookup(self, name: str) -> Lookup:
        for lookup in self.lookups:
            if lookup.name == name:
                return lookup
        raise SpecError(f"pipeline {self.name!r} has no lookup {name!r}")

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)

    def ordered(self) -> tuple[Table, ...]:
        """Tables in dependency order (upstreams first), stable within a level."""
        done: list[str] = []
        pending = list(self.tables)
        while pending:
            ready = [t for t in pending if all(u in done for u in t.upstream_names)]
            done.extend(t.name for t in ready)
            pending = [t for t in pending if t not in ready]
        return tuple(self.table(n) for n in done)

    def downstream(self, name: str) -> tuple[Table, ...]:
        """Tables that read ``name`` directly or transitively, in dependency order."""
        reached = {name}
        for table in self.ordered():
            if reached.intersection(table.upstream_names):
                reached.add(table.name)
        return tuple(t for t in self.ordered() if t.name in reached and t.name != name)

    def select(self, names: Iterable[str] | None) -> tuple[Table, ...]:
        """The named tables (all if none) in dependency order; unknown names fail clearly."""
        if not names:
            return self.ordered()
        wanted = {self.table(n).name for n in names}
        return tuple(t for t in self.ordered() if t.name in wanted)

    # -- validation ----------------------------------------------------------------
    def _check_graph(self) -> None:
        seen: set[str] = set()
        for table in self.tables:
            if table.name in seen:
                raise SpecError(
                    f"pipeline {self.name!r} declares table {table.name!r} twice; table names must be unique"
                )
            seen.add(table.name)
        lookups = {lk.name for lk in self.lookups}
        if len(lookups) != len(self.lookups):
            raise SpecError(f"pipeline {self.name!r} declares a lookup twice")
        for table in self.tables:
            for up in table.upstream_names:
                if up not in seen:
                    raise SpecError(
                        f"table {table.name!r} reads upstream {up!r}, which pipeline "
                        f"{self.name!r} does not declare (declared: {', '.join(sorted(seen))})"
                    )
            for lookup in table.lookups:
                if lookup not in lookups:
                    raise SpecError(
                        f"table {table.name!r} uses lookup {lookup!r}, which pipeline "
                        f"{self.name!r} does not declare; add Lookup({lookup!r}, schema=...)"
                    )
        cycle = self._find_cycle()
        if cycle:
            raise SpecError(
                f"pipeline {self.name!r} has a cycle: {' -> '.join(cycle)}; "
                "a table cannot (transitively) read itself"
            )
        by_name = {t.name: t for t in self.tables}
        for table in self.tables:
            for up in table.upstreams:
                upstream = by_name[up.table]  # type: ignore[union-attr]
                if (up.lookback or up.lookahead) and not upstream.event_time:  # type: ignore[union-attr]
                    raise SpecError(
                        f"table {table.name!r} reads upstream {upstream.name!r} with a lookback or "
                        "lookahead, which is measured on event time; declare event_time= on it"
                    )
                if table.watermark_for(up) and not upstream.event_time:  # type: ignore[arg-type]
                    raise SpecError(
                        f"table {table.name!r} sets a watermark on upstream {upstream.name!r}, "
                        "which declares no event_time column; declare event_time= on it"
                    )
                if table.write == "aggregate" and not (
                    upstream.event_time and table.watermark_for(up)  # type: ignore[arg-type]
                ):
                    raise SpecError(
                        f"table {table.name!r} is a windowed aggregate, so upstream "
                        f"{upstream.name!r} needs an event_time column and a watermark to bound "
                        "the aggregate's state; declare event_time= on the upstream and "
                        f"watermark= on {table.name!r}"
                    )
                if table.dedupes and not table.watermark_for(up):  # type: ignore[arg-type]
                    raise SpecError(
                        f"table {table.name!r} deduplicates on keys {list(table.keys)}, which "
                        "needs a watermark to bound its state; set watermark='10 minutes' or similar"
                    )

    def _find_cycle(self) -> list[str] | None:
        graph = {t.name: list(t.upstream_names) for t in self.tables}
        state: dict[str, int] = {}
        path: list[str] = []

        def visit(node: str) -> list[str] | None:
            state[node] = 1
            path.append(node)
            for up in graph[node]:
                if state.get(up) == 1:
                    return [*path[path.index(up) :], up]
                if up not in state and (found := visit(up)):
                    return found
            state[node] = 2
            path.pop()
            return None

        for node in graph:
            if node not in state and (found := visit(node)):
                return found
        return None


def describe_fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict (for ``lakehouse describe`` and DAG docs)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}
