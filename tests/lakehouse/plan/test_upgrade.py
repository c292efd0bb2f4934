"""A flow release 0.2 deployed restarts on its checkpoint as *unchanged* under this release: what
its checkpoint recorded (``release_0_2/recorded.json``, computed by 0.2's own code on 0.2's README
example, kept verbatim in ``release_0_2/orders``) is what this release computes and reads. A new
declaration field, a kind of flow, a source's location: none may make every deployed flow's code
"new" after an upgrade."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse import registry
from lakehouse.flows import kind_of
from lakehouse.plan.compatibility import FlowShape, Operator, code_version, judge

HERE = Path(__file__).resolve().parent
RECORDED = json.loads((HERE / "release_0_2" / "recorded.json").read_text())


@pytest.fixture
def orders(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(HERE))
    return registry.get("release_0_2", "orders")


def test_the_code_versions_0_2_recorded_are_this_releases(orders) -> None:
    assert {t.name: code_version(orders, t) for t in orders.tables} == RECORDED["code_versions"]


def test_each_flows_inputs_are_named_as_0_2_recorded_them(orders) -> None:
    assert {t.name: list(kind_of(t).inputs(t)) for t in orders.tables} == RECORDED["inputs"]


def test_a_shape_0_2_wrote_into_a_checkpoint_is_read_and_judged_unchanged(orders) -> None:
    deployed = FlowShape.from_json(RECORDED["silver_orders_flow_json"])
    silver = orders.table("silver.orders")
    now = FlowShape(  # what this release's stream of silver.orders records (see test_compatibility)
        code_version=code_version(orders, silver),
        inputs=kind_of(silver).inputs(silver),
        watermark=f"{silver.event_time} {silver.watermark}",
        window=None,
        operators=(Operator("deduplicate within watermark", ("order_id: string",)),),
        columns={"order_id": "string", "customer": "string", "amount": "double", "order_time": "timestamp"},
    )
    plan = judge("orders", silver.name, deployed, now, checkpoint=True, table=now.columns)
    assert plan.status == "unchanged", plan
