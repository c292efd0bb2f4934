"""Freshness objectives (:class:`lakehouse.spec.Freshness`) measured from the data, Spark-free.

The newest event time a table committed is the largest ``max`` statistic Delta keeps for its
``event_time`` column over the live files (the log alone; the column is read only when a file has
no statistics for it); its newest arrival is the time of the last commit that added or changed
rows (OPTIMIZE and VACUUM do not count). The lag is now minus that; the lag behind an upstream is
the upstream's newest event time minus the table's, which tells "my upstream stopped" from "my
flow is stuck". The monitor records every reading in ``ops.freshness`` (the cockpit's history,
the Prometheus gauges) and alerts on a missed objective, and again when it recovers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as datetime_time
from typing import TYPE_CHECKING, Any, Literal

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import TableNotFoundError

from lakehouse.core import times
from lakehouse.monitoring.ops_tables import FRESHNESS_TABLE, append_rows, read_table, rs_table
from lakehouse.spec.durations import parse_duration

if TYPE_CHECKING:
    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.freshness")

State = Literal["met", "missed", "no data"]
SCHEMA = pa.schema(
    [
        ("measured_at", pa.timestamp("us", tz="UTC")),
        ("pipeline", pa.string()),
        ("table_name", pa.string()),
        ("measure", pa.string()),  # event_time or arrival
        ("newest", pa.timestamp("us", tz="UTC")),
        ("lag_s", pa.float64()),
        ("max_lag_s", pa.float64()),
        ("state", pa.string()),
        ("upstream", pa.string()),  # the upstream it is furthest behind, if any
        ("behind_upstream_s", pa.float64()),
    ]
)
# Commits that only rearrange or remove files: they bring no new data.
NOT_ARRIVALS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "CREATE TABLE"})
ROW_METRICS = ("numOutputRows", "num_added_rows", "numTargetRowsInserted", "numTargetRowsUpdated")


@dataclass(frozen=True)
class Reading:
    """One table's freshness against its objective at ``measured_at``."""

    table: str
    measure: str
    newest: datetime | None
    max_lag: timedelta
    measured_at: datetime
    upstream: str | None = None
    behind_upstream: timedelta | None = None

    @property
    def lag(self) -> timedelta | None:
        return None if self.newest is None else max(timedelta(0), self.measured_at - self.newest)

    @property
    def state(self) -> State:
        if self.lag is None:
            return "no data"
        return "missed" if self.lag > self.max_lag else "met"

    @property
    def message(self) -> str:
        """One line: what is late, by how much, against what, and where the delay starts."""
        what = "newest event time" if self.measure == "event_time" else "newest arrival"
        if self.lag is None:
            return f"{self.table}: no data yet (freshness objective: {what} within {_span(self.max_lag)})"
        assert self.newest is not None
        line = (
            f"{self.table}: freshness objective {self.state}: {what} {self.newest:%Y-%m-%d %H:%M:%S} UTC "
            f"is {_span(self.lag)} old (objective {_span(self.max_lag)})"
        )
        if self.upstream is not None and self.behind_upstream is not None:
            line += f"; {_span(self.behind_upstream)} behind its upstream {self.upstream}"
        elif self.state == "missed" and self.measure == "event_time":  # (arrival compares no upstream)
            line += "; its upstreams are no fresher (the delay starts before this table)"
        return line

    def row(self, pipeline: str) -> dict[str, Any]:
        return {
            "measured_at": self.measured_at,
            "pipeline": pipeline,
            "table_name": self.table,
            "measure": self.measure,
            "newest": self.newest,
            "lag_s": None if self.lag is None else self.lag.total_seconds(),
            "max_lag_s": self.max_lag.total_seconds(),
            "state": self.state,
            "upstream": self.upstream,
            "behind_upstream_s": None
            if self.behind_upstream is None
            else self.behind_upstream.total_seconds(),
        }


def _span(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 600:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def newest_event_time(path: str, column: str) -> datetime | None:
    """The largest ``column`` value among the Delta table's live rows (None: no rows, or no table)."""
    try:
        table = rs_table(path)
    except TableNotFoundError:
        return None
    actions = pa.table(table.get_add_actions(flatten=True))  # an Arrow table of delta-rs's own
    if actions.num_rows == 0:
        return None
    stat = f"max.{column}"
    if stat in actions.column_names and actions.column(stat).null_count == 0:
        newest = pc.max(actions.column(stat)).as_py()
    else:  # some file keeps no statistics on it (stats_columns): read the column itself
        newest = pc.max(table.to_pyarrow_dataset().to_table(columns=[column]).column(column)).as_py()
    if newest is None:
        return None
    if not isinstance(newest, datetime):  # a DATE column: the day's start
        newest = datetime.combine(newest, datetime_time.min)
    return newest if newest.tzinfo else newest.replace(tzinfo=UTC)


def newest_arrival(path: str, commits: int = 100) -> datetime | None:
    """When the last of the table's recent commits that brought rows was made; when none of the
    last ``commits`` did, the oldest of them (rows arrived before it, if ever: an upper bound)."""
    try:
        history = rs_table(path).history(commits)
    except TableNotFoundError:
        return None
    for commit in history:  # newest first
        if commit.get("operation") in NOT_ARRIVALS:
            continue
        metrics = commit.get("operationMetrics") or {}
        if any(int(metrics.get(name) or 0) > 0 for name in ROW_METRICS):
            return datetime.fromtimestamp(commit["timestamp"] / 1000, tz=UTC)
    return datetime.fromtimestamp(history[-1]["timestamp"] / 1000, tz=UTC) if history else None


def newest(lake: Lake, table: Table, measure: str) -> datetime | None:
    path = lake.table(table.name)
    if measure == "event_time":
        assert table.event_time is not None  # the spec refuses an event-time objective without one
        return newest_event_time(path, table.event_time)
    return newest_arrival(path)


def measure(lake: Lake, pipeline: Pipeline, now: datetime | None = None) -> list[Reading]:
    """A reading for every table of ``pipeline`` that declares a freshness objective."""
    now = now or times.now()
    readings = []
    by_name = {table.name: table for table in pipeline.tables}
    for table in pipeline.tables:
        objective = table.freshness_objective
        if objective is None:
            continue
        mine = newest(lake, table, objective.of)
        upstream, behind = None, None
        if objective.of == "event_time" and mine is not None:
            for name in table.upstream_names:
                other = by_name.get(name)
                if other is None or not other.event_time:
                    continue
                theirs = newest_event_time(lake.table(name), other.event_time)
                if theirs is not None and theirs > mine and (behind is None or theirs - mine > behind):
                    upstream, behind = name, theirs - mine
        readings.append(
            Reading(
                table.name,
                objective.of,
                mine,
                parse_duration(objective.max_lag, f"{table.name} freshness max_lag"),
                now,
                upstream,
                behind,
            )
        )
    return readings


class FreshnessLog:
    """``ops.freshness``: every reading the monitor took (history, cockpit, Prometheus)."""

    def __init__(self, lake: Lake) -> None:
        self.path = lake.table(FRESHNESS_TABLE)

    def record(self, pipeline: str, readings: list[Reading]) -> None:
        if readings:
            append_rows(self.path, SCHEMA, [r.row(pipeline) for r in readings])

    def read(self, since: datetime | None = None) -> pl.DataFrame:
        where = (
            None
            if since is None
            else pc.field("measured_at") >= pa.scalar(since, SCHEMA.field("measured_at").type)
        )
        return read_table(self.path, SCHEMA, where)

    def latest(self, pipeline: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
        """The last reading of each (pipeline, table)."""
        frame = self.read()
        if pipeline is not None:
            frame = frame.filter(pl.col("pipeline") == pipeline)
        if frame.is_empty():
            return {}
        last = frame.sort("measured_at").group_by("pipeline", "table_name").last()
        return {(r["pipeline"], r["table_name"]): r for r in last.iter_rows(named=True)}


def recovered(
    previous: dict[tuple[str, str], dict[str, Any]], pipeline: str, readings: list[Reading]
) -> list[Reading]:
    """The readings that meet their objective again: the table's previous reading missed it."""
    return [
        r
        for r in readings
        if r.state == "met" and (previous.get((pipeline, r.table)) or {}).get("state") == "missed"
    ]
