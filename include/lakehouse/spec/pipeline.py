"""A pipeline: a named graph of tables, its lookups and its operational defaults."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrs import evolve, field, frozen

from lakehouse.spec.durations import NAME, SpecError, parse_duration
from lakehouse.spec.sources import Lookup, deployed
from lakehouse.spec.sources.base import KAFKA_SERVERS

if TYPE_CHECKING:
    from collections.abc import Iterable

    from lakehouse.spec.models import Model
    from lakehouse.spec.table import Table


@frozen
class Pipeline:
    """A named set of tables forming a DAG, plus its lookups, models and operational defaults
    (``generator``: its test-data generator, ``"module:function"``, with ``generator_options``,
    the keyword arguments ``lakehouse generate`` and ``make up``'s live feed give it unless told
    otherwise with ``--set``)."""

    name: str
    tables: tuple[Table, ...] = field(converter=tuple)
    lookups: tuple[Lookup, ...] = field(default=(), converter=tuple)
    models: tuple[Model, ...] = field(default=(), converter=tuple)
    description: str = ""
    owner: str = "data-engineering"
    generator: str | None = None
    generator_options: dict[str, Any] = field(factory=dict, converter=dict)
    incremental_schedule: str = "*/15 * * * *"
    backfill_schedule: str = "@daily"
    monitor_interval: str = "2 minutes"
    start_date: str = "2026-01-01"
    restart_budget: int = 3
    package: str | None = None
    # (table, why): declared tables a deployment cannot run (see ``configured``), said, not run
    set_aside: tuple[tuple[str, str], ...] = field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not NAME.match(self.name):
            raise SpecError(f"pipeline name {self.name!r} must be lower_snake_case")
        parse_duration(self.monitor_interval, f"pipeline {self.name!r} monitor_interval")
        self._check_graph()

    def with_package(self, package: str) -> Pipeline:
        return evolve(self, package=package)

    def configured(self, ingest: str, kafka_servers: str | None = None, **deployment: str) -> Pipeline:
        """This pipeline as one deployment runs it: each bronze table reads its ``ingest`` kind of
        source (its ``kind``: ``files``, ``kafka``, ...) when it declares one, else its default,
        configured with the deployment's settings (``kafka_servers``: the brokers of Kafka sources
        without their own; ``deployment``: other settings by name, for kinds of one's own).
        A table the deployment cannot run (:meth:`Table.unavailable`, e.g. a real-time flow
        without Kafka) is left out and listed in ``set_aside`` with the reason.
        Declarations stay deployment-free."""
        settings = {**deployment, **({KAFKA_SERVERS: kafka_servers} if kafka_servers else {})}

        def choose(table: Table) -> Table:
            if table.sink is not None:
                table = evolve(table, sink=table.sink.configured(settings))
            if not table.sources:
                return table
            return evolve(table, source=deployed(table.sources, ingest, settings))

        chosen = [choose(t) for t in self.tables]
        aside = tuple((t.name, why) for t in chosen if (why := t.unavailable()))
        for name, why in aside:
            if needed := [t.name for t in self.downstream(name)]:
                raise SpecError(f"pipeline {self.name!r}: {name} feeds {', '.join(needed)}, but {why}")
        names = {name for name, _ in aside}
        kept = tuple(t for t in chosen if t.name not in names)
        return evolve(self, tables=kept, set_aside=self.set_aside + aside)

    # -- lookups ------------------------------------------------------------------
    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        for aside, why in self.set_aside:
            if aside == name:
                raise SpecError(f"pipeline {self.name!r}: {name} is not run by this deployment: {why}")
        raise SpecError(
            f"pipeline {self.name!r} has no table {name!r}; its tables are: "
            f"{', '.join(t.name for t in self.tables)}"
        )

    def model(self, name: str) -> Model:
        for model in self.models:
            if model.name == name:
                return model
        raise SpecError(f"pipeline {self.name!r} has no model {name!r}")

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

    def with_downstream(self, names: Iterable[str]) -> tuple[Table, ...]:
        """The named tables and every table that reads one of them, in dependency order."""
        named = [t.name for t in self.select(list(names))] if names else []
        wanted = set(named).union(t.name for n in named for t in self.downstream(n))
        return tuple(t for t in self.ordered() if t.name in wanted)

    def select(self, names: Iterable[str] | None) -> tuple[Table, ...]:
        """The named tables (all if none) in dependency order; unknown names fail clearly."""
        if not names:
            return self.ordered()
        wanted = {self.table(n).name for n in names}
        return tuple(t for t in self.ordered() if t.name in wanted)

    def checked_tables(self) -> tuple[Table, ...]:
        """Tables with something to check at rest (expectations or checks), in dependency order."""
        return tuple(t for t in self.ordered() if t.checks or t.expectations)

    def replayable_tables(self) -> tuple[Table, ...]:
        """Tables whose quarantined rows ``lakehouse replay`` can send through again: they have a
        quarantine (an expectation with ``action='drop'``) and rows that stand on their own."""
        return tuple(
            t
            for t in self.ordered()
            if t.replays_quarantine and any(e.action == "drop" for e in t.expectations)
        )

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
        self._check_models(seen, lookups)
        cycle = self._find_cycle()
        if cycle:
            raise SpecError(
                f"pipeline {self.name!r} has a cycle: {' -> '.join(cycle)}; "
                "a table cannot (transitively) read itself"
            )
        by_name = {t.name: t for t in self.tables}
        for table in self.tables:
            for up in table.upstreams:
                upstream = by_name[up.table]
                if (upstream.applies_changes or upstream.recomputes) and not table.recomputes:
                    raise SpecError(
                        f"table {table.name!r} reads {upstream.name!r}, whose writes change rows it "
                        f"already holds ({upstream.write.describe()}): a stream of its appends would "
                        "miss them. Declare write=Recompute(keys=[...]) on "
                        f"{table.name!r}: it is recomputed whenever {upstream.name!r} changes"
                    )
                if (up.lookback or up.lookahead) and not upstream.event_time:
                    raise SpecError(
                        f"table {table.name!r} reads upstream {upstream.name!r} with a lookback or "
                        "lookahead, which is measured on event time; declare event_time= on it"
                    )
                if table.watermark_for(up) and not upstream.event_time:
                    raise SpecError(
                        f"table {table.name!r} sets a watermark on upstream {upstream.name!r}, "
                        "which declares no event_time column; declare event_time= on it"
                    )
                table.write.check_upstream(table, upstream, table.watermark_for(up))

    def _check_models(self, tables: set[str], lookups: set[str]) -> None:
        names = {m.name for m in self.models}
        if len(names) != len(self.models):
            raise SpecError(f"pipeline {self.name!r} declares a model twice")
        for model in self.models:
            if model.trained_on not in tables:
                raise SpecError(
                    f"model {model.name!r} is trained on {model.trained_on!r}, which pipeline "
                    f"{self.name!r} does not declare"
                )
            if model.labels is not None and model.labels not in lookups:
                raise SpecError(
                    f"model {model.name!r} takes its labels from lookup {model.labels!r}, which pipeline "
                    f"{self.name!r} does not declare; add Lookup({model.labels!r}, schema=...)"
                )
        for table in self.tables:
            if table.model is not None and table.model not in names:
                raise SpecError(
                    f"table {table.name!r} is scored by model {table.model!r}, which pipeline "
                    f"{self.name!r} does not declare; add Model({table.model!r}, ...) to models="
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
