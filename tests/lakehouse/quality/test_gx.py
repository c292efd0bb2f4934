"""The GX adapter: declarations checked against the real GX classes, and per-row conditions
that count exactly what GX's own validation counts."""

from __future__ import annotations

import pytest
from attrs import evolve

from lakehouse.quality import gxe
from lakehouse.quality.gx import check_pipeline, instantiate, row_conditions
from lakehouse.spec import Pipeline, SpecError

WHERE = "table 'silver.x' expectation"


def test_a_wrong_class_or_argument_is_named_with_its_table_and_expectation() -> None:
    with pytest.raises(SpecError) as wrong_class:
        instantiate(gxe.ExpectColumnValuesToBeBetwen(column="signal"), WHERE)
    assert "'expect_column_values_to_be_betwen(signal)'" in str(wrong_class.value)
    assert "did you mean ExpectColumnValuesToBeBetween" in str(wrong_class.value)
    with pytest.raises(SpecError) as wrong_argument:
        instantiate(gxe.ExpectColumnValuesToBeBetween(colum="signal", min_value=0, name="in_range"), WHERE)
    message = str(wrong_argument.value)
    assert message.startswith("table 'silver.x' expectation: 'in_range'")
    assert "colum" in message and "extra fields not permitted" in message and "min_value" in message


def test_lakehouse_validate_refuses_what_cannot_run_on_each_row(iot: Pipeline) -> None:
    check_pipeline(iot)  # the shipped suite is valid

    def broken(**changes: object) -> Pipeline:
        silver = evolve(iot.table("silver.device_events"), **changes)
        return evolve(iot, tables=[silver if t.name == silver.name else t for t in iot.tables])

    with pytest.raises(SpecError, match=r"measures the table as a whole.*declare it in checks="):
        check_pipeline(broken(expectations=[gxe.ExpectTableRowCountToBeBetween(min_value=1, action="warn")]))
    with pytest.raises(SpecError, match=r"compares rows with each other.*one micro-batch"):
        check_pipeline(
            broken(expectations=[gxe.ExpectColumnValuesToBeUnique(column="event_id", action="drop")])
        )
    with pytest.raises(SpecError, match=r"reads \{silver.nope\}, which pipeline 'iot' does not declare"):
        check_pipeline(
            broken(
                checks=[gxe.UnexpectedRowsExpectation(unexpected_rows_query="SELECT * FROM {silver.nope}")]
            )
        )


ROWS = [
    # id, device, signal, low, high, kind
    (1, "a", 5.0, 0.0, 10.0, "t"),
    (2, None, 50.0, 0.0, 10.0, "t"),
    (3, "c", None, 0.0, 10.0, "p"),
    (4, "d", -1.0, None, None, "p"),
    (5, "a", 11.0, 0.0, 10.0, None),
    (6, "zz", 7.0, 5.0, 10.0, "t"),
]
CASES = [
    gxe.ExpectColumnValuesToBeBetween(column="signal", min_value=0, max_value=10),  # nulls ignored
    gxe.ExpectColumnValuesToNotBeNull(column="device"),
    gxe.ExpectColumnValuesToBeInSet(column="device", value_set=["a", "c", "d"]),
    gxe.ExpectColumnPairValuesAToBeGreaterThanB(  # rows missing either value are ignored
        column_A="signal", column_B="low", or_equal=True, ignore_row_if="either_value_is_missing"
    ),
    gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="high", column_B="signal", name="pair_neither"),
    gxe.ExpectMulticolumnSumToEqual(column_list=["low", "high"], sum_total=10),  # all-missing ignored
    gxe.ExpectColumnValuesToMatchRegex(  # a Spark SQL row condition
        column="device", regex="^[a-c]$", row_condition="signal > 6", condition_parser="spark"
    ),
    gxe.ExpectColumnValuesToBeInSet(  # a GX-syntax row condition
        column="device",
        value_set=["a"],
        row_condition='col("kind")=="t"',
        condition_parser="great_expectations",
        name="gx_row_condition",
    ),
    gxe.ExpectColumnValuesToBeBetween(column="signal", max_value={"$PARAMETER": "5 * 2"}, name="parameter"),
]


def test_row_conditions_count_exactly_what_gx_validation_counts(spark) -> None:
    import great_expectations as gx

    df = spark.createDataFrame(
        ROWS, "id INT, device STRING, signal DOUBLE, low DOUBLE, high DOUBLE, kind STRING"
    )
    conditions = row_conditions(spark, df.schema, CASES, WHERE)
    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_spark("test")
        .add_dataframe_asset("rows")
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": df})
    )
    mine, theirs = {}, {}
    for declaration in CASES:
        expectation = instantiate(declaration, WHERE, parameters={})
        theirs[declaration.label] = batch.validate(expectation).result["unexpected_count"]
        mine[declaration.label] = df.where(conditions[declaration.label]).count()
    assert mine == theirs
    assert sum(mine.values()) >= 8  # the cases do find unexpected rows
