"""Column lineage of a flow, read from Spark's analyzed plan of its rows.

Each output column maps to the input columns its value is computed from (``DIRECT``: an
``IDENTITY`` copy, a ``TRANSFORMATION`` or an ``AGGREGATION``), and the flow as a whole to the
input columns that decide which rows it keeps (``INDIRECT``: ``FILTER``, ``JOIN``, ``GROUP_BY``,
``SORT``, ``WINDOW``), the two halves of OpenLineage's column lineage facet. Read after Spark
resolved every expression, so a user transform in any style (DataFrame API, SQL, a helper
function) is covered alike; an input is recognised by its location (a table's or a source's
path, a Kafka topic), which the caller names.

The plan is walked once through py4j (a few hundred calls for a pipeline's flow): Spark has no
Python API for its nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import DataFrame

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table

# The strongest wins when a column reaches an input by several paths.
DIRECT_ORDER = {"IDENTITY": 0, "TRANSFORMATION": 1, "AGGREGATION": 2}
# Plan nodes whose expressions decide which rows (not which values) come out, and how.
INDIRECT = {
    "Filter": ("condition", "FILTER"),
    "Join": ("condition", "JOIN"),
    "Sort": ("order", "SORT"),
    "Aggregate": ("groupingExpressions", "GROUP_BY"),
    "Deduplicate": ("keys", "FILTER"),
    "DeduplicateWithinWatermark": ("keys", "FILTER"),
    "Window": ("partitionSpec", "WINDOW"),
}

Column = tuple[str, str]  # (input dataset, its column)


@dataclass
class ColumnLineage:
    """``fields``: output column -> input column -> subtype; ``dataset``: input column -> the
    subtypes by which it selects rows."""

    fields: dict[str, dict[Column, str]] = field(default_factory=dict)
    dataset: dict[Column, set[str]] = field(default_factory=dict)


def _seq(scala: Any) -> list[Any]:
    return [] if scala is None else [scala.apply(i) for i in range(scala.size())]


def _option(value: Any) -> Any:
    return value.get() if value is not None and value.isDefined() else None


def leaf_location(node: Any) -> str | None:
    """Where a leaf of the plan reads: a path, or ``kafka://<brokers>/<topics>``; ``None`` if unknown."""
    name = node.nodeName()
    try:
        if name == "StreamingRelation":
            options = node.dataSource().options()
            return _option(options.get("path"))
        if name in ("StreamingRelationV2", "StreamingExecutionRelation"):
            options = node.extraOptions()
            for key in ("subscribe", "subscribePattern", "assign"):
                if options.containsKey(key):
                    return f"kafka://{options.get('kafka.bootstrap.servers')}/{options.get(key)}"
            path = options.get("path")
            return str(path) if path else None
        if name == "LogicalRelation":
            roots = _seq(node.relation().location().rootPaths())
            return str(roots[0].toString()) if roots else None
    except Exception:  # a relation of another shape: no location, no lineage through it
        return None
    return None


def _references(expression: Any) -> list[int]:
    return [a.exprId().id() for a in _seq(expression.references().toSeq())]


def _expressions(node: Any, attribute: str) -> list[Any]:
    value = getattr(node, attribute)()
    kind = value.getClass().getName()
    if kind.startswith("scala.") and ("Option" in kind or "Some" in kind or "None" in kind):
        value = _option(value)
        return [] if value is None else [value]
    if kind.startswith("scala.collection"):
        return _seq(value)
    return [value]


def column_lineage(df: DataFrame, locations: Mapping[str, str]) -> ColumnLineage:
    """The column lineage of ``df``'s analyzed plan; ``locations``: input dataset -> where it
    is read from (a leaf reading there, or below there, is that dataset)."""
    known = {_normal(place): dataset for place, dataset in ((v, k) for k, v in locations.items())}
    sources: dict[int, dict[Column, str]] = {}  # attribute id -> its input columns
    selects: dict[Column, set[str]] = {}

    def merge(into: dict[Column, str], found: Mapping[Column, str], floor: str | None = None) -> None:
        for column, subtype in found.items():
            if floor is not None and DIRECT_ORDER[floor] > DIRECT_ORDER[subtype]:
                subtype = floor
            if column not in into or DIRECT_ORDER[subtype] > DIRECT_ORDER[into[column]]:
                into[column] = subtype

    def of(ids: list[int], floor: str | None = None) -> dict[Column, str]:
        found: dict[Column, str] = {}
        for i in ids:
            merge(found, sources.get(i, {}), floor)
        return found

    def walk(node: Any) -> None:
        children = _seq(node.children())
        for child in children:
            walk(child)
        outputs = _seq(node.output())
        inputs = [_seq(child.output()) for child in children]  # each child's columns, once
        if not children:
            dataset = _dataset(leaf_location(node), known)
            if dataset is not None:
                for attribute in outputs:
                    sources[attribute.exprId().id()] = {(dataset, attribute.name()): "IDENTITY"}
            return
        name = node.nodeName()
        if name in INDIRECT:
            attribute, subtype = INDIRECT[name]
            try:
                for expression in _expressions(node, attribute):
                    for column in of(_references(expression)):
                        selects.setdefault(column, set()).add(subtype)
            except Exception:  # a node of another version's shape: its row selection unknown
                pass
        aliases = {}
        for expression in _seq(node.expressions()):
            if expression.nodeName() == "Alias":
                aliases[expression.exprId().id()] = expression
        for position, attribute in enumerate(outputs):
            key = attribute.exprId().id()
            if key in aliases:
                alias = aliases[key]
                if name == "Aggregate" and not _grouped(node, alias):
                    floor: str | None = "AGGREGATION"
                else:  # a rename keeps its input's subtype; anything else transforms it
                    floor = None if alias.child().nodeName() == "AttributeReference" else "TRANSFORMATION"
                sources[key] = of(_references(alias), floor)
            elif name == "Expand":  # a row per projection: each column's value in each
                found = {}
                for projection in _seq(node.projections()):
                    merge(found, of(_references(_seq(projection)[position]), "TRANSFORMATION"))
                sources[key] = found
            elif name == "Union":  # the first child's ids; the others' columns by position
                found = dict(sources.get(key, {}))
                for columns in inputs[1:]:
                    merge(found, sources.get(columns[position].exprId().id(), {}))
                sources[key] = found
            elif key not in sources:  # made by the node itself (a generator, a pandas function)
                read = _references(node) or [a.exprId().id() for columns in inputs for a in columns]
                sources[key] = of(read, "TRANSFORMATION")

    plan = df._jdf.queryExecution().analyzed()  # noqa: SLF001 (no Python API for the plan's nodes)
    walk(plan)
    lineage = ColumnLineage(dataset=selects)
    for attribute in _seq(plan.output()):
        lineage.fields[attribute.name()] = sources.get(attribute.exprId().id(), {})
    return lineage


def _grouped(node: Any, alias: Any) -> bool:
    """Whether ``alias`` of an Aggregate only renames one of its grouping expressions."""
    grouping = {str(e.semanticHash()) for e in _seq(node.groupingExpressions())}
    return str(alias.child().semanticHash()) in grouping


def _normal(place: str) -> str:
    place = place.rstrip("/")
    return place.removeprefix("file://").removeprefix("file:")


def _dataset(location: str | None, known: Mapping[str, str]) -> str | None:
    if location is None:
        return None
    place = _normal(location)
    for root, dataset in sorted(known.items(), key=lambda kv: -len(kv[0])):
        if place == root or place.startswith(root + "/"):
            return dataset
    return None


def inputs_of(lake: Lake, pipeline: Pipeline, table: Table) -> dict[str, str]:
    """What ``table``'s flow reads: dataset label -> location (the labels column lineage uses)."""
    found: dict[str, str] = {}
    for source in table.sources[:1]:  # the one this deployment reads (none: it reads tables)
        folder = source.landing_folder(table.short_name)
        landing = lake.landing(pipeline.name, folder) if folder is not None else None
        found.update(source.lineage_inputs(source.label(pipeline.name, table.short_name), landing))
    for upstream in table.upstream_names:
        found[upstream] = lake.table(upstream)
    for name in table.lookups:
        found[f"reference/{name}"] = lake.reference(pipeline.name, pipeline.lookup(name).file)
    return found


def outputs_of(lake: Lake, table: Table) -> dict[str, str]:
    """What ``table``'s flow writes: the table, its quarantine when rows can be dropped, and the
    tables its writes keep beside it (a change feed's change log)."""
    found = {table.name: lake.table(table.name)}
    if any(e.action == "drop" for e in table.expectations):
        found[table.quarantine] = lake.table(table.quarantine)
    for name in table.logs:
        found[name] = lake.table(name)
    return found


def described(df: DataFrame, lake: Lake, pipeline: Pipeline, table: Table) -> dict[str, Any]:
    """The column lineage and schema of ``table``'s flow computing ``df``, as
    ``lakehouse.monitoring.lineage.flow_event`` takes them."""
    return {
        "columns": column_lineage(df, inputs_of(lake, pipeline, table)),
        "schema": {f.name: f.dataType.simpleString() for f in df.schema.fields},
    }
