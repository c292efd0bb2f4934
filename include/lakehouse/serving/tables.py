"""Spark-free access to the lake's tables by name, with delta-rs (the ``deltalake`` package).

For analysts' notebooks and scripts (no JVM, no cluster) and for ``lakehouse history`` /
``lakehouse describe``::

    from lakehouse.serving.tables import read_polars
    stats = read_polars("gold.device_type_stats")             # the latest version
    before = read_polars("gold.device_type_stats", version=3)  # time travel

Any Delta reader works on the same files (they follow the open Delta protocol):
``deltalake.DeltaTable(path).to_pandas()``, ``polars.read_delta(path)``, DuckDB's
``delta_scan(path)``; :func:`table_path` gives the path of a name.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from lakehouse.core.config import settings as default_settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import exists, rs_table
from lakehouse.monitoring.status import CODE_HISTORY, code_versions, table_stats
from lakehouse.serving.statements import Result

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd
    from deltalake import DeltaTable

    from lakehouse.spec import Pipeline, Table


class NoSuchTable(ValueError):
    """No Delta table of that name under the lake root."""


def _lake(lake: Lake | None) -> Lake:
    return lake or Lake.from_settings(default_settings())


def table_path(name: str, lake: Lake | None = None) -> str:
    """Where the table ``layer.table`` lives (``<root>/tables/<layer>/<table>``)."""
    if name.count(".") != 1:
        raise NoSuchTable(f"{name!r} is not a table name; write '<layer>.<table>', e.g. gold.device_status")
    return _lake(lake).table(name)


def open_table(
    name: str, *, version: int | None = None, as_of: datetime | str | None = None, lake: Lake | None = None
) -> DeltaTable:
    """The Delta table ``name``: its latest version, ``version``, or the one current at ``as_of``."""

    path = table_path(name, lake)
    if not exists(path):
        raise NoSuchTable(f"no Delta table {name!r} under {_lake(lake).root} (has its flow run yet?)")
    table = rs_table(path, version=version)
    if as_of is not None:
        moment = datetime.fromisoformat(as_of) if isinstance(as_of, str) else as_of
        table.load_as_version(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    return table


def read_polars(
    name: str, *, version: int | None = None, as_of: datetime | str | None = None, lake: Lake | None = None
) -> pl.DataFrame:

    return pl.from_arrow(open_table(name, version=version, as_of=as_of, lake=lake).to_pyarrow_table())


def read_pandas(
    name: str, *, version: int | None = None, as_of: datetime | str | None = None, lake: Lake | None = None
) -> pd.DataFrame:
    return open_table(name, version=version, as_of=as_of, lake=lake).to_pandas()


# --------------------------------------------------------------------------- history


_ADDED = ("numOutputRows", "numTargetRowsInserted", "num_added_rows")
_UPDATED = ("numTargetRowsUpdated", "numUpdatedRows", "num_updated_rows")
_DELETED = ("numTargetRowsDeleted", "numDeletedRows", "num_deleted_rows")


def history(name: str, limit: int | None = None, lake: Lake | None = None) -> Result:
    """The table's commits, newest first: version, time, operation, rows it added, updated and
    deleted, and its parameters (``DESCRIBE HISTORY`` in SQL gives every metric)."""

    rows = []
    for commit in open_table(name, lake=lake).history(limit):
        metrics = commit.get("operationMetrics") or {}
        rows.append(
            (
                commit["version"],
                datetime.fromtimestamp(commit["timestamp"] / 1000, tz=UTC),
                commit.get("operation"),
                *(_metric(metrics, keys) for keys in (_ADDED, _UPDATED, _DELETED)),
                _parameters(commit.get("operationParameters")),
            )
        )
    return Result(
        ["version", "timestamp", "operation", "rows_added", "rows_updated", "rows_deleted", "parameters"],
        [True, False, False, True, True, True, False],
        rows,
    )


def _metric(metrics: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    found = [int(metrics[k]) for k in keys if metrics.get(k) not in (None, "")]
    return found[0] if found else None


def _parameters(values: Mapping[str, Any] | None) -> str:
    """``k=v`` pairs without empty values, and without Spark's expression ids (``col#123``)."""
    pairs = []
    for key, value in sorted((values or {}).items()):
        text = re.sub(r"#\d+", "", str(value))
        if text not in ("", "[]", "{}", "None") and not key.endswith("Predicates"):
            pairs.append(f"{key}={text}")
    return ", ".join(pairs)


# --------------------------------------------------------------------------- describe


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool


@dataclass(frozen=True)
class Description:
    """What an analyst asks about a table: its shape and freshness from the Delta log, and what
    the pipeline spec says about it (origin, keys, upstreams, expectations)."""

    name: str
    location: str
    exists: bool
    pipeline: str | None = None
    description: str = ""
    version: int | None = None
    last_update: datetime | None = None
    last_operation: str | None = None
    rows: int | None = None
    files: int | None = None
    size_bytes: int | None = None
    partitioning: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    write: str | None = None
    kind: str | None = None  # what the write mode makes of the table, in words
    change_log: str | None = None  # Scd1/Scd2: the table of every change applied
    keys: tuple[str, ...] = ()
    event_time: str | None = None
    watermark: str | None = None
    window: str | None = None
    freshness: str | None = None
    source: str | None = None
    upstreams: tuple[str, ...] = ()
    downstreams: tuple[str, ...] = ()
    expectations: tuple[str, ...] = ()
    # the code versions that wrote its last commits, latest first: "<version> (commits a-b)"
    code_versions: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["last_update"] = self.last_update.isoformat() if self.last_update else None
        return data


def describe(name: str, pipelines: Mapping[str, Pipeline], lake: Lake | None = None) -> Description:
    """Describe ``name``: declared (even if not written yet) or a platform table like ``ops.*``."""
    lake = _lake(lake)
    path = table_path(name, lake)
    owner = next((p for p in pipelines.values() if name in p.table_names), None)
    found = exists(path)
    if owner is None and not found:
        declared = sorted(t for p in pipelines.values() for t in p.table_names)
        raise NoSuchTable(
            f"no table {name!r}: it is neither declared nor under {lake.root}; "
            f"declared tables: {', '.join(declared) or 'none'}"
        )
    info: dict[str, Any] = {"name": name, "location": path, "exists": found}
    if owner is not None:
        info.update(_from_spec(owner, owner.table(name)))
    if found:
        stats = table_stats(lake, name)
        table = open_table(name, lake=lake)
        info.update(
            version=stats.version,
            last_update=stats.last_update,
            last_operation=stats.last_operation,
            rows=stats.rows,
            files=stats.files,
            size_bytes=stats.size_bytes,
            partitioning=tuple(table.metadata().partition_columns),
            columns=tuple(Column(f.name, sql_type(f.type), f.nullable) for f in table.schema().fields),
            code_versions=tuple(
                f"{code} (commits {first}-{last})"
                for code, first, last in code_versions(table.history(CODE_HISTORY))
            ),
        )
    return Description(**info)


def _from_spec(pipeline: Pipeline, table: Table) -> dict[str, Any]:
    return {
        "pipeline": pipeline.name,
        "description": table.description,
        "write": table.write.kind,
        "kind": table.write.describe(),
        "change_log": table.changes if table.applies_changes else None,
        "keys": tuple(table.keys),
        "event_time": table.event_time,
        "watermark": table.watermark,
        "window": table.write.window_label,
        "freshness": str(table.freshness_objective or table.heartbeat_limit),
        "source": table.source.kind if table.source else None,
        "upstreams": table.upstream_names,
        "downstreams": tuple(t.name for t in pipeline.downstream(table.name)),
        "expectations": tuple(_expectation(e) for e in table.expectations),
        "partitioning": tuple(table.partition_by),
    }


_SQL_NAMES = {
    "long": "BIGINT",
    "integer": "INT",
    "short": "SMALLINT",
    "byte": "TINYINT",
    "timestamp": "TIMESTAMP",
    "timestamp_ntz": "TIMESTAMP_NTZ",
}


def sql_type(delta_type: Any) -> str:
    """A delta-rs schema type as Spark SQL spells it (``BIGINT``, ``ARRAY<STRING>``, ...)."""
    kind = type(delta_type).__name__
    if kind == "ArrayType":
        return f"ARRAY<{sql_type(delta_type.element_type)}>"
    if kind == "MapType":
        return f"MAP<{sql_type(delta_type.key_type)}, {sql_type(delta_type.value_type)}>"
    if kind == "StructType":
        return "STRUCT<" + ", ".join(f"{f.name}: {sql_type(f.type)}" for f in delta_type.fields) + ">"
    name = str(getattr(delta_type, "type", delta_type))
    return _SQL_NAMES.get(name, name.upper())


def _expectation(expectation: object) -> str:
    """One line per expectation: its own description, or its fields (declarations of other types)."""
    describe = getattr(expectation, "describe", None)
    if callable(describe):
        return describe()
    kind, shown = type(expectation), repr(expectation)  # dataclass/attrs reprs name the class
    return (
        kind.__name__ + shown.removeprefix(kind.__qualname__)
        if shown.startswith(kind.__qualname__)
        else shown
    )
