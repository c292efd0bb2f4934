"""CRM: customers and their orders, from the change feed of the operational Postgres database.

```
landing/*.json or Kafka -> bronze.customer_changes -+-> silver.customers (current state, type 1)
 (Debezium envelopes)                               +-> silver.customer_history (type 2) -+
                        -> bronze.order_changes ------> silver.orders (current state) ----+
                                                                                          |
       gold.orders_with_customer: each order with the customer as they were when it was placed
       gold.customers_by_segment_daily: customers per segment at the end of each day
```

- bronze: every change event as received (Debezium's envelope: ``op``, ``before``, ``after``,
  ``source``); malformed lines kept with ``_parse_error``.
- silver: the changes applied in the order of their position in the database's log
  (``source.lsn``), whatever order they arrive in, duplicates and replays included: the current
  state of each customer and order (a delete removes the row; an older change arriving after it
  never brings it back), and each customer's history of segment and country (a new version per
  change of either; name changes update the version in place; e-mail addresses are not kept).
  Change events without an operation the platform knows, a key or a sequence go to quarantine.
- gold: recomputed whenever silver changes, so late changes in history reach them.

Quality: the platform's own checks of every change table (rows agree with the change log, one
current version per customer, versions never overlap), and gold's consistency with silver.

Declarations only: no pyspark (nor GX) here: Airflow imports this module when parsing DAGs.
"""

from lakehouse.quality import gxe
from lakehouse.spec import JsonFiles, KafkaTopic, Pipeline, Recompute, Scd1, Scd2, Table
from pipelines.crm.constants import CUSTOMER_CHANGES, CUSTOMER_TOPIC, ORDER_CHANGES, ORDER_TOPIC, SEQUENCE

pipeline = Pipeline(
    name="crm",
    description="Customers and orders from a Debezium change feed: current state, history, as-of joins.",
    generator="generator:generate",
    tables=[
        Table(
            "bronze.customer_changes",
            description="Change events of the customers table, in Debezium's envelope, as received.",
            source=[
                JsonFiles(schema=CUSTOMER_CHANGES),
                KafkaTopic(schema=CUSTOMER_CHANGES, topics=[CUSTOMER_TOPIC]),
            ],
            freshness="10 minutes",
        ),
        Table(
            "bronze.order_changes",
            description="Change events of the orders table, in Debezium's envelope, as received.",
            source=[JsonFiles(schema=ORDER_CHANGES), KafkaTopic(schema=ORDER_CHANGES, topics=[ORDER_TOPIC])],
            freshness="10 minutes",
        ),
        Table(
            "silver.customers",
            description="Every customer as they are now (deleted customers have no row).",
            upstreams=["bronze.customer_changes"],
            write=Scd1(keys=["customer_id"], sequence_by=[SEQUENCE]),
            freshness="10 minutes",
        ),
        Table(
            "silver.customer_history",
            description="Every version of each customer's segment and country, with its validity.",
            upstreams=["bronze.customer_changes"],
            write=Scd2(
                keys=["customer_id"], sequence_by=[SEQUENCE], track=["segment", "country"], ignore=["email"]
            ),
            freshness="10 minutes",
        ),
        Table(
            "silver.orders",
            description="Every order as it is now (cancelled orders, deleted in the database, have no row).",
            upstreams=["bronze.order_changes"],
            write=Scd1(keys=["order_id"], sequence_by=[SEQUENCE]),
            freshness="10 minutes",
        ),
        Table(
            "gold.orders_with_customer",
            description="Each order with the customer's segment and country when it was placed.",
            upstreams=["silver.orders", "silver.customer_history"],
            transform="transforms:orders_with_customer",
            event_time="ordered_at",
            write=Recompute(keys=["order_id"]),
            freshness="15 minutes",
            checks=[
                gxe.ExpectColumnValuesToBeUnique(column="order_id", name="one_row_per_order"),
                gxe.UnexpectedRowsExpectation(
                    unexpected_rows_query="SELECT o.order_id FROM {silver.orders} o "
                    "LEFT ANTI JOIN {batch} g ON o.order_id = g.order_id",
                    description="Every current order has its row",
                    name="every_order_present",
                ),
            ],
        ),
        Table(
            "gold.customers_by_segment_daily",
            description="Customers per segment at the end of each day, from the history.",
            upstreams=["silver.customer_history"],
            transform="transforms:customers_by_segment_daily",
            event_time="day",
            write=Recompute(keys=["day", "segment"]),
            freshness="15 minutes",
            checks=[
                gxe.ExpectCompoundColumnsToBeUnique(
                    column_list=["day", "segment"], name="one_row_per_day_and_segment"
                ),
                gxe.ExpectColumnValuesToBeBetween(
                    column="customers", min_value=0, name="customers_not_negative"
                ),
            ],
        ),
    ],
)
