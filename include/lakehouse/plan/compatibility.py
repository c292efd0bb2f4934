"""What a change to a deployed pipeline will do, before it runs: per flow *new*, *unchanged*,
*compatible* (restarts on its checkpoint with the new code) or *incompatible* with its
checkpoint (which rule, and what it needs), and per table what changes in its columns.

A flow's **shape** is what its checkpoint depends on: the code version (a hash of the table's
declaration and its transform's source), its inputs, its watermark and window, its stateful
operators (kind, key columns, the values their state keeps) and its output columns. A stream
writes the shape of the code that committed its last micro-batch into its checkpoint
(``_lakehouse/flow.json``); ``plan`` builds the new code's shape (analysis only: no data read)
and compares. Spark checks a state store's key and value schema on restart, but not what the
keys mean: a window of another size, or another watermark, would silently mix old and new
state; the shape catches those too.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import types
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import attrs

from lakehouse import registry
from lakehouse.spec.durations import ADDED_LATER
from lakehouse.spec.sources import RESCUED
from lakehouse.state import storage
from lakehouse.state.checkpoints import Checkpoint

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table

SHAPE_FILE = "_lakehouse/flow.json"  # inside the flow's checkpoint: travels with its state
Status = Literal["new", "unchanged", "compatible", "incompatible", "unrecorded"]

# Logical plan nodes that keep state in a stream, by the name ``plan`` reports.
STATEFUL = {
    "Aggregate": "aggregate",
    "Deduplicate": "deduplicate",
    "DeduplicateWithinWatermark": "deduplicate within watermark",
    "Join": "stream-stream join",
    "FlatMapGroupsWithState": "per-key state (flatMapGroupsWithState)",
    "TransformWithState": "per-key state (transformWithState)",
    "GlobalLimit": "streaming limit",
}
EXPRESSION_ID = re.compile(r"#\d+L?|-T\d+ms")

# Type changes a write applies in place: the upcasts Delta's schema evolution merges on its own
# (measured, Delta 4.4). Its type-widening table feature would take more (int -> bigint, float ->
# double, decimals, date -> timestamp_ntz), but delta-rs (1.6), which the cockpit, `lakehouse
# show` and the monitor read tables with, refuses tables that use it; so any other change of
# type rebuilds the table with the new type (a reset).
UPCASTS = {("tinyint", "smallint"), ("tinyint", "int"), ("smallint", "int")}


@dataclass(frozen=True)
class Operator:
    """One stateful operator: its state is keyed by ``keys`` and holds ``values``."""

    kind: str
    keys: tuple[str, ...] = ()
    values: tuple[str, ...] = ()

    def label(self) -> str:
        return f"{self.kind} on ({', '.join(self.keys)})"


@dataclass(frozen=True)
class FlowShape:
    """What a flow's checkpoint depends on (see the module doc)."""

    code_version: str
    inputs: tuple[str, ...]
    watermark: str | None
    window: str | None
    operators: tuple[Operator, ...]
    columns: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FlowShape:
        data = json.loads(text)
        operators = tuple(
            Operator(o["kind"], tuple(o["keys"]), tuple(o["values"])) for o in data.pop("operators")
        )
        return cls(**{**data, "inputs": tuple(data["inputs"])}, operators=operators)


@dataclass(frozen=True)
class FlowPlan:
    """What deploying the new code does to one flow."""

    flow: str
    status: Status
    code_version: str
    deployed_version: str | None
    reasons: tuple[str, ...] = ()  # what changed; for an incompatible flow, the rules it breaks
    columns: tuple[str, ...] = ()  # the table's column changes
    needs: str = ""
    rescued: tuple[str, ...] = ()  # source fields bronze kept in _rescued_data, and what to do

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- code version -------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    """A declaration as plain data, stable across processes (no object addresses)."""
    if attrs.has(type(value)):
        fields = {
            f.name: _canonical(getattr(value, f.name))
            for f in attrs.fields(type(value))
            if not (f.metadata.get(ADDED_LATER) and getattr(value, f.name) == f.default)
        }
        return {"class": type(value).__name__, **fields}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    if hasattr(value, "model_dump"):  # GX expectations (pydantic): without their store id
        return {"class": type(value).__name__, **value.model_dump(mode="json", exclude={"id"})}
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def function_sources(function: Any, seen: set[Any] | None = None) -> list[str]:
    """The source of ``function`` and of the functions of its own module that it calls (so a
    fix in a helper is a new version too)."""
    seen = set() if seen is None else seen
    if function in seen or not isinstance(function, types.FunctionType):
        return []
    seen.add(function)
    try:
        sources = [inspect.getsource(function)]
    except (OSError, TypeError):
        sources = [f"{function.__module__}.{function.__qualname__}"]
    for name in function.__code__.co_names:
        called = function.__globals__.get(name)
        if isinstance(called, types.FunctionType) and called.__module__ == function.__module__:
            sources += function_sources(called, seen)
    return sources


def code_version(pipeline: Pipeline, table: Table) -> str:
    """A hash of ``table``'s declaration and its transform's source: 12 hex digits."""
    parts = [json.dumps(_canonical(table), sort_keys=True, default=repr)]
    if table.transform is not None:
        parts += function_sources(registry.resolve(pipeline, table.transform))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


# -- shapes ---------------------------------------------------------------------------


def _expressions(sequence: Any) -> tuple[str, ...]:
    """``name: type`` of each expression of a Scala sequence, without Spark's expression ids."""
    found = []
    for i in range(sequence.size()):
        expression = sequence.apply(i)
        text = EXPRESSION_ID.sub("", expression.sql())
        found.append(f"{text}: {expression.dataType().simpleString()}")
    return tuple(found)


def operators_of(df: DataFrame) -> tuple[Operator, ...]:
    """The stateful operators of a streaming DataFrame's analyzed plan, input side first."""
    found: list[Operator] = []

    def walk(node: Any) -> None:
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))
        kind = STATEFUL.get(node.nodeName())
        if kind is None or not node.isStreaming():
            return
        if kind == "stream-stream join" and not all(
            children.apply(i).isStreaming() for i in range(children.size())
        ):
            return  # a stream joined with a table keeps no state
        if kind == "aggregate":
            found.append(
                Operator(
                    kind, _expressions(node.groupingExpressions()), _expressions(node.aggregateExpressions())
                )
            )
        elif kind.startswith("deduplicate"):
            found.append(Operator(kind, _expressions(node.keys())))
        elif kind == "stream-stream join":
            condition = node.condition()
            on = EXPRESSION_ID.sub("", condition.get().sql()) if condition.isDefined() else ""
            found.append(Operator(kind, (node.joinType().toString(), on)))
        else:
            found.append(Operator(kind, (), (node.schema().simpleString(),)))

    walk(df._jdf.queryExecution().analyzed())  # noqa: SLF001 (no Python API for the plan's nodes)
    return tuple(found)


def shape_of(
    pipeline: Pipeline, table: Table, df: DataFrame, *, inputs: tuple[str, ...], as_written: bool = True
) -> FlowShape:
    """The shape of ``table``'s flow computing ``df`` (its streaming DataFrame) from ``inputs``
    (what it reads, as its kind names them). Its columns are the table's where the table is
    created ``as_written`` from the flow's rows (not for change feeds, whose table is their
    history, nor for scored tables, whose model adds columns)."""
    return FlowShape(
        code_version=code_version(pipeline, table),
        inputs=inputs,
        watermark=f"{table.event_time} {table.watermark}" if table.watermark else None,
        window=getattr(table.write, "window_label", None),
        operators=operators_of(df) if df.isStreaming else (),
        columns={f.name: f.dataType.simpleString() for f in df.schema.fields} if as_written else {},
    )


def record(spark: SparkSession, checkpoint: str, shape: FlowShape) -> None:
    """Write ``shape`` into the checkpoint (once the code committed a micro-batch there)."""
    storage.write_text(spark, f"{checkpoint}/{SHAPE_FILE}", shape.to_json())


def recorded(spark: SparkSession, checkpoint: str) -> FlowShape | None:
    text = storage.read_text(spark, f"{checkpoint}/{SHAPE_FILE}")
    return FlowShape.from_json(text) if text else None


# -- rules ----------------------------------------------------------------------------


def state_changes(old: FlowShape, new: FlowShape) -> list[str]:
    """The reasons the new shape cannot restart on the old one's checkpoint (empty: it can)."""
    reasons = []
    if old.inputs != new.inputs:
        reasons.append(f"source changed: {', '.join(old.inputs)} -> {', '.join(new.inputs)}")
    if old.watermark != new.watermark:
        reasons.append(f"watermark changed: {old.watermark or 'none'} -> {new.watermark or 'none'}")
    if old.window != new.window:
        reasons.append(f"window changed: {old.window or 'none'} -> {new.window or 'none'}")
    before, after = list(old.operators), list(new.operators)
    for a, b in zip(before, after, strict=False):
        if a.kind != b.kind:
            reasons.append(f"stateful operator replaced: {a.label()} -> {b.label()}")
        elif a.keys != b.keys:
            reasons.append(f"{a.kind} re-keyed: ({', '.join(a.keys)}) -> ({', '.join(b.keys)})")
        elif a.values != b.values:
            reasons.append(f"{a.kind}'s state changed: ({', '.join(a.values)}) -> ({', '.join(b.values)})")
    reasons += [f"stateful operator removed: {o.label()}" for o in before[len(after) :]]
    reasons += [f"stateful operator added: {o.label()}" for o in after[len(before) :]]
    return reasons


def widens(old: str, new: str) -> bool:
    """Whether a write turns a column of type ``old`` into ``new`` in place (:data:`UPCASTS`)."""
    return (old, new) in UPCASTS


def column_changes(table: dict[str, str], output: dict[str, str]) -> tuple[list[str], list[str]]:
    """What the new output does to the table's columns: (changes, breaking changes)."""
    changes, breaking = [], []
    for name, kind in output.items():
        if name not in table:
            changes.append(f"added {name}: {kind}")
        elif table[name] != kind:
            if widens(table[name], kind):
                changes.append(f"widened {name}: {table[name]} -> {kind}")
            else:
                breaking.append(
                    f"retyped {name}: {table[name]} -> {kind} (a write changes only tinyint and smallint "
                    "to a wider integer in place: the table is rebuilt with the new type)"
                )
    for name in table:
        if name not in output:
            changes.append(f"dropped {name}: the table keeps it, new rows leave it null")
    return changes, breaking


def judge(
    pipeline: str,
    flow: str,
    old: FlowShape | None,
    new: FlowShape,
    *,
    checkpoint: bool,
    table: dict[str, str] | None,
) -> FlowPlan:
    """One flow's plan from its recorded and new shapes (pure: the rules, testable by hand)."""
    changes, breaking = column_changes(table, new.columns) if table else ([], [])
    columns = (*changes, *breaking)
    if not checkpoint:
        return FlowPlan(flow, "new", new.code_version, None, columns=columns,
                        needs="first start (a backfill computes its history once)")  # fmt: skip
    if old is None:
        return FlowPlan(flow, "unrecorded", new.code_version, None, columns=columns,
                        needs="its checkpoint predates recorded shapes: Spark checks its state on "
                              "restart, and the restart records the shape")  # fmt: skip
    reasons = state_changes(old, new) + breaking
    if reasons:
        return FlowPlan(flow, "incompatible", new.code_version, old.code_version, tuple(reasons), columns,
                        needs=rebuild(pipeline, flow))  # fmt: skip
    if old.code_version == new.code_version and not columns:
        return FlowPlan(flow, "unchanged", new.code_version, old.code_version, needs="nothing")
    what = ("code changed",) if old.code_version != new.code_version else ()
    return FlowPlan(flow, "compatible", new.code_version, old.code_version, what, columns,
                    needs="restart on its checkpoint with the new code")  # fmt: skip


def rebuild(pipeline: str, flow: str) -> str:
    """What an incompatible flow needs."""
    return (
        f"reset and rebuild over all of its input: `lakehouse reset {pipeline} --flow {flow} --downstream` "
        "stops it and what reads it, archives their checkpoints and tables, computes them once with "
        "the new code on new checkpoints, and deploys them again"
    )


def table_columns(spark: SparkSession, lake: Lake, name: str) -> dict[str, str] | None:
    """The columns of the Delta table ``name`` (``None``: no table yet)."""
    path = lake.table(name)
    if not storage.exists(spark, f"{path}/_delta_log"):
        return None
    schema = spark.read.format("delta").load(path).schema
    return {f.name: f.dataType.simpleString() for f in schema.fields}


def plan(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    flows: Collection[str],
    *,
    shape: Callable[[Table], FlowShape],
    rescued: Callable[[Table, Mapping[str, str]], tuple[str, ...]],
) -> list[FlowPlan]:
    """What deploying ``pipeline``'s current code does to each of its flows (those named in
    ``flows``, default all), in dependency order, each flow's new ``shape`` and what its table
    ``rescued`` given by its kind (``lakehouse.flows.plan``). A flow reading a table that is
    rebuilt is rebuilt too: its checkpoint points into the old one."""
    plans: dict[str, FlowPlan] = {}
    schemas: dict[str, dict[str, str] | None] = {}  # each table's schema read once

    def columns_of(name: str) -> dict[str, str] | None:
        if name not in schemas:
            schemas[name] = table_columns(spark, lake, name)
        return schemas[name]

    for table in pipeline.select(flows):
        checkpoint = lake.checkpoint(pipeline.name, table.name)
        exists = Checkpoint(spark, checkpoint).exists
        columns = columns_of(table.name)
        upstreams_ready = all(columns_of(u) is not None for u in table.upstream_names)
        if not upstreams_ready:  # nothing to analyze against yet: a first deploy
            version = code_version(pipeline, table)
            plans[table.name] = FlowPlan(table.name, "new", version, None,
                                         needs="first start (its upstreams start first)")  # fmt: skip
            continue
        found = judge(pipeline.name, table.name, recorded(spark, checkpoint), shape(table),
                      checkpoint=exists, table=columns)  # fmt: skip
        rebuilt = [u for u in table.upstream_names if u in plans and plans[u].status == "incompatible"]
        if rebuilt and found.status != "new":
            reasons = (*found.reasons, *(f"reads {u}, which is rebuilt" for u in rebuilt))
            found = FlowPlan(table.name, "incompatible", found.code_version, found.deployed_version,
                             reasons, found.columns, rebuild(pipeline.name, table.name))  # fmt: skip
        if columns is not None and (kept := rescued(table, columns)):
            found = replace(found, rescued=kept)
        plans[table.name] = found
    return list(plans.values())


def rescued_fields(
    spark: SparkSession, lake: Lake, table: Table, declared: Collection[str]
) -> tuple[str, ...]:
    """The fields outside the ``declared`` columns that ``table`` (a bronze table) kept in
    ``_rescued_data``, with their row counts and what to do: add a new one to the source's
    schema; fill a declared one for the rows that kept it with ``lakehouse rescue``. A declared
    column that has a value beside it holds it with less precision than the source sent (a
    Parquet ``timestamp[ns]`` in microseconds): ``_rescued_data`` keeps the exact value."""
    from pyspark.sql import functions as F

    bronze = spark.read.format("delta").load(lake.table(table.name))
    rows = bronze.where(F.col(RESCUED).isNotNull())
    keys = rows.select(F.explode(F.json_object_keys(RESCUED)).alias("field")).groupBy("field").count()
    counted = sorted(keys.collect())
    held = [r["field"] for r in counted if r["field"] in declared and r["field"] in bronze.columns]
    exact: dict[str, int] = {}
    if held:
        kept = F.from_json(RESCUED, "map<string,string>")
        first = rows.select(*[
            F.count_if(kept.getItem(name).isNotNull() & F.col(f"`{name}`").isNotNull()).alias(f"x{i}")
            for i, name in enumerate(held)
        ]).first()  # fmt: skip
        exact = {name: int(first[f"x{i}"]) for i, name in enumerate(held)}
    said = []
    for row in counted:
        field, count = row["field"], row["count"]
        if field not in declared:
            said.append(
                f"new source field {field} ({count:,} rows kept it in {RESCUED}): add it to the source's columns to read it"
            )
            continue
        if count > exact.get(field, 0):
            said.append(
                f"{field} ({count - exact.get(field, 0):,} rows kept it in {RESCUED}): declared now, "
                f"`lakehouse rescue {table.name}` fills the column for them"
            )
        if exact.get(field):
            said.append(
                f"{field} ({exact[field]:,} rows kept its exact value in {RESCUED}): the column holds it "
                "with less precision"
            )
    return tuple(said)
