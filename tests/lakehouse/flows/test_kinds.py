"""Flow kinds are plugins: one module each under ``lakehouse.flows``, named by the table, and
nothing outside the declaration and the kinds asks which kind a flow is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lakehouse import registry
from lakehouse.flows import Flow, FlowKind, kind_of
from lakehouse.flows.changes import ChangesFlow
from lakehouse.flows.ingest import IngestFlow
from lakehouse.flows.scored import ScoredFlow
from lakehouse.flows.transform import TransformFlow
from lakehouse.flows.view import ViewFlow
from lakehouse.spec import Table

ROOT = Path(__file__).resolve().parents[3] / "include" / "lakehouse"
# The modules that run flows (compute, stream, backfill, coordinate, write, judge, keep state):
# none may ask which kind a flow is. The declaration (``spec``) and the kinds (``flows``) do; the
# source kinds (``sources``) read their own declarations; test-data generators
# (``plan/generators.py``) deliver into a table's source; the operate and serve layers (CLI,
# cockpit, SQL catalog) read a declaration's source and model to show them.
RUNNING = (
    "plan/",
    "run/",
    "writes/",
    "quality/",
    "state/",
    "models/",
    "monitoring/",
    "delta.py",
    "slices.py",
)
NOT_RUNNING = ("plan/generators.py",)
# What tells one kind of flow from another on a table: its origin, its write mode's kind, its
# state, its model.
KIND_FLAGS = {"applies_changes", "recomputes", "state", "model", "source", "sources"}


def kind_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """Lines where a condition (``if``, ``while``, a conditional expression, ``and``/``or``, a
    comprehension's ``if``; not an ``assert``, which states a precondition and branches nowhere)
    reads one of :data:`KIND_FLAGS` of something."""
    stated = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assert) for n in ast.walk(a.test)}
    conditions: list[ast.expr] = []
    for node in ast.walk(tree):
        if id(node) in stated:
            continue
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            conditions.append(node.test)
        elif isinstance(node, ast.BoolOp):
            conditions.extend(node.values)
        elif isinstance(node, ast.comprehension):
            conditions.extend(node.ifs)
    found = set()
    for condition in conditions:
        for node in ast.walk(condition):
            if isinstance(node, ast.Attribute) and node.attr in KIND_FLAGS:
                found.add((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_nothing_outside_the_declaration_and_the_kinds_branches_on_a_flows_kind() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted(ROOT.rglob("*.py"))
        if (relative := path.relative_to(ROOT).as_posix()).startswith(RUNNING) and relative not in NOT_RUNNING
        for line, text in kind_tests(ast.parse(path.read_text()))
        if text.rsplit(".", 1)[0] in TABLES
    ]
    assert found == [], "\n".join(found)  # 38 before flow kinds became plugins (2026-12-06)


# Names a table goes by in the platform's code (a flag of anything else, e.g. a source kind's own
# ``self.source``, a model store's ``version.model``, is not a flow's kind).
TABLES = {"table", "self.table", "spec", "t", "reader", "source", "upstream", "flow.table"}


@pytest.mark.parametrize(
    ("pipeline", "table", "kind"),
    [
        ("iot", "bronze.device_events", IngestFlow),
        ("iot", "silver.device_events", TransformFlow),
        ("ads", "gold.user_activity", TransformFlow),
        ("crm", "silver.customers", ChangesFlow),
        ("crm", "gold.orders_with_customer", ViewFlow),
    ],
)
def test_each_table_of_the_reference_pipelines_runs_as_its_kind(
    pipeline: str, table: str, kind: type
) -> None:
    assert type(kind_of(registry.get("pipelines", pipeline).table(table))) is kind


def test_a_scored_table_runs_as_a_scored_flow() -> None:
    iot = registry.get("pipelines", "iot")
    scored = [t for t in iot.tables if t.model is not None]
    assert scored and all(type(kind_of(t)) is ScoredFlow for t in scored)


def test_a_scored_flows_rows_as_of_a_version_read_its_upstream_at_that_version(spark, lake) -> None:
    """What a backfill of a positioned flow reads: its upstream as its stream read it (``as_of``),
    not the rows committed since. Oracle: the rows of each version, written here."""
    iot = registry.get("pipelines", "iot")
    table = next(t for t in iot.tables if t.model is not None)
    (upstream,) = table.upstreams
    path = lake.table(upstream.table)
    rows = spark.createDataFrame([("e1",)], "event_id STRING")
    rows.write.format("delta").save(path)  # version 0
    spark.createDataFrame([("e2",)], "event_id STRING").write.format("delta").mode("append").save(path)
    flow = Flow(spark, lake, iot, table)
    then = flow.kind.rows(flow, streaming=False, as_of={upstream.table: 0})
    now = flow.kind.rows(flow, streaming=False)
    assert sorted(r["event_id"] for r in then.collect()) == ["e1"]
    assert sorted(r["event_id"] for r in now.collect()) == ["e1", "e2"]


def test_a_kind_of_your_own_is_named_by_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Table.flow`` names a class; a name that is no kind is refused with what it should be."""
    iot = registry.get("pipelines", "iot")
    table = iot.table("silver.device_events")
    monkeypatch.setattr(Table, "flow", property(lambda _: "lakehouse.flows.transform:TransformFlow"))
    assert isinstance(kind_of(table), FlowKind)
    monkeypatch.setattr(Table, "flow", property(lambda _: "lakehouse.flows:Flow"))
    with pytest.raises(TypeError, match=r"not a lakehouse\.flows\.FlowKind subclass"):
        kind_of(table)
