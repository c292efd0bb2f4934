"""Declaring expectations: reads like GX, imports no GX, and bad declarations fail on load."""

from __future__ import annotations

import subprocess
import sys

import pytest
from attrs import evolve

from lakehouse.quality import gxe
from lakehouse.spec import Pipeline, SpecError, Table

REPO_IMPORT_CHECK = """
import sys
from lakehouse import registry
pipeline = registry.get("pipelines", "iot")
assert any(t.expectations for t in pipeline.tables) and any(t.checks for t in pipeline.tables)
heavy = sorted(m for m in ("great_expectations", "pyspark") if m in sys.modules)
print("heavy:", heavy)
"""


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_pipeline_declarations_import_neither_gx_nor_spark() -> None:
    result = subprocess.run(
        [sys.executable, "-c", REPO_IMPORT_CHECK], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "heavy: []" in result.stdout


def test_a_declaration_records_class_arguments_action_and_a_readable_name() -> None:
    e = gxe.ExpectColumnValuesToBeBetween(column="signal", min_value=0, max_value=100, action="drop")
    assert (e.gx_class, dict(e.kwargs), e.action) == (
        "ExpectColumnValuesToBeBetween",
        {"column": "signal", "min_value": 0, "max_value": 100},
        "drop",
    )
    assert e.label == "expect_column_values_to_be_between(signal)"
    pair = gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="a", column_B="b", action="warn")
    assert pair.label == "expect_column_pair_values_a_to_be_greater_than_b(a, b)"
    assert gxe.ExpectTableRowCountToBeBetween(min_value=1, name="has_rows").label == "has_rows"
    assert gxe.ExpectColumnValuesToNotBeNull(column="x").action == "fail"  # the conservative default
    assert (e.severity, pair.severity) == ("critical", "warning")  # GX's own severity
    with pytest.raises(AttributeError):
        gxe.not_an_expectation  # noqa: B018


def _silver(iot: Pipeline, **changes: object) -> Table:
    return evolve(iot.table("silver.device_events"), **changes)


def test_bad_actions_and_names_fail_when_the_table_is_declared(iot: Pipeline) -> None:
    with pytest.raises(
        SpecError, match=r"'silver.device_events'.*action='skip' is not one of warn, drop, fail"
    ):
        _silver(iot, expectations=[gxe.ExpectColumnValuesToNotBeNull(column="device", action="skip")])
    with pytest.raises(SpecError, match="a table check cannot drop rows"):
        _silver(iot, checks=[gxe.ExpectColumnValuesToBeUnique(column="event_id", action="drop")])
    with pytest.raises(SpecError, match="two expectations are named 'x'"):
        _silver(
            iot,
            expectations=[
                gxe.ExpectColumnValuesToNotBeNull(column="device", name="x"),
                gxe.ExpectColumnValuesToNotBeNull(column="event_id", name="x"),
            ],
        )
    with pytest.raises(SpecError, match=r"declared with lakehouse\.quality\.gxe"):
        _silver(iot, expectations=[{"expectation_type": "expect_column_values_to_not_be_null"}])
    stats = iot.table("gold.device_type_stats")
    with pytest.raises(SpecError, match="cannot quarantine windows of an aggregate table"):
        evolve(
            stats,
            expectations=[gxe.ExpectColumnValuesToBeBetween(column="events", min_value=1, action="drop")],
        )
    evolve(
        stats, expectations=[gxe.ExpectColumnValuesToBeBetween(column="events", min_value=1, action="warn")]
    )
