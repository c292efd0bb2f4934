"""Column lineage from the analyzed plan (``lakehouse.plan.lineage``), against lineage written
down by hand for each query."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import functions as F

from lakehouse.plan.lineage import column_lineage


def tables(spark, tmp_path: Path) -> dict[str, str]:
    orders, customers = str(tmp_path / "orders"), str(tmp_path / "customers")
    spark.createDataFrame(
        [(1, 10, 5.0, "2026-01-01 00:00:00")], "order_id INT, customer_id INT, amount DOUBLE, ts STRING"
    ).write.format("delta").save(orders)
    spark.createDataFrame([(10, "fr")], "customer_id INT, country STRING").write.format("delta").save(
        customers
    )
    return {"orders": orders, "customers": customers}


def test_a_stream_joined_with_a_table_maps_each_column_and_the_rows_selection(spark, tmp_path: Path) -> None:
    where = tables(spark, tmp_path)
    orders = spark.readStream.format("delta").load(where["orders"])
    customers = spark.read.format("delta").load(where["customers"])
    df = (
        orders.where(F.col("amount") > 0)
        .join(customers, "customer_id")
        .select("order_id", F.col("country").alias("nation"), (F.col("amount") * 2).alias("double"), "ts")
    )
    lineage = column_lineage(df, where)
    assert lineage.fields == {
        "order_id": {("orders", "order_id"): "IDENTITY"},
        "nation": {("customers", "country"): "IDENTITY"},
        "double": {("orders", "amount"): "TRANSFORMATION"},
        "ts": {("orders", "ts"): "IDENTITY"},
    }
    assert lineage.dataset == {
        ("orders", "amount"): {"FILTER"},
        ("orders", "customer_id"): {"JOIN"},
        ("customers", "customer_id"): {"JOIN"},
    }


def test_aggregates_unions_and_sql_each_keep_their_inputs(spark, tmp_path: Path) -> None:
    where = tables(spark, tmp_path)
    orders = spark.read.format("delta").load(where["orders"])
    totals = orders.groupBy("customer_id").agg(F.sum("amount").alias("total"), F.count("*").alias("n"))
    lineage = column_lineage(totals, where)
    assert lineage.fields == {
        "customer_id": {("orders", "customer_id"): "IDENTITY"},
        "total": {("orders", "amount"): "AGGREGATION"},
        "n": {},  # a count of rows reads no column
    }
    assert lineage.dataset == {("orders", "customer_id"): {"GROUP_BY"}}

    customers = spark.read.format("delta").load(where["customers"])
    both = orders.select(F.col("customer_id").alias("id")).unionByName(
        customers.select(F.col("customer_id").alias("id"))
    )
    assert column_lineage(both, where).fields == {
        "id": {("orders", "customer_id"): "IDENTITY", ("customers", "customer_id"): "IDENTITY"}
    }

    customers.createOrReplaceTempView("lineage_customers")
    shouted = spark.sql("SELECT upper(country) AS country_code FROM lineage_customers")
    assert column_lineage(shouted, where).fields == {
        "country_code": {("customers", "country"): "TRANSFORMATION"}
    }


def test_an_input_it_was_not_told_about_gives_no_lineage_rather_than_a_wrong_one(
    spark, tmp_path: Path
) -> None:
    where = tables(spark, tmp_path)
    df = spark.read.format("delta").load(where["orders"]).select("order_id")
    assert column_lineage(df, {"customers": where["customers"]}).fields == {"order_id": {}}
    assert column_lineage(spark.range(3), where).fields == {"id": {}}
