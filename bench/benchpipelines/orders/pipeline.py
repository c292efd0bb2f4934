"""Orders of a web shop: a wide bronze schema with nested fields, a silver table keyed by order
(duplicates dropped), and two gold tables of windowed sums. Declarations only."""

from lakehouse.spec import Aggregate, Append, Ingest, JsonFiles, Pipeline, StreamingTable, Window

ADDRESS = "STRUCT<street: STRING, city: STRING, zip: STRING, country: STRING>"
SCHEMA = (
    "order_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, status STRING, channel STRING, "
    "coupon STRING, currency STRING, session_id STRING, referrer STRING, campaign STRING, notes STRING, "
    f"customer STRUCT<id: STRING, name: STRING, email: STRING, tier: STRING, address: {ADDRESS}>, "
    "items ARRAY<STRUCT<sku: STRING, qty: INT, price_cents: INT>>, "
    "payment STRUCT<method: STRING, installments: INT, card: STRUCT<brand: STRING, country: STRING>>, "
    "shipping STRUCT<carrier: STRING, speed: STRING, cost_cents: INT>, "
    "device STRUCT<os: STRING, browser: STRING, ip: STRING>"
)
WATERMARK = "1 minute"

pipeline = Pipeline(
    name="orders",
    description="Web shop orders: revenue per country and hour, orders per payment method.",
    tables=[
        Ingest(
            "bronze.orders",
            description="Orders as received (nested JSON).",
            source=JsonFiles(schema=SCHEMA, max_files_per_trigger=1),
            event_time="event_time",
        ),
        StreamingTable(
            "silver.orders",
            description="One row per order: its customer's country, payment method and amount.",
            upstreams=["bronze.orders"],
            transform="transforms:flat_orders",
            event_time="event_time",
            watermark=WATERMARK,
            write=Append(keys=["order_id"]),
        ),
        StreamingTable(
            "gold.revenue_by_country",
            description="Orders and revenue per customer country in 1-hour windows.",
            upstreams=["silver.orders"],
            transform="transforms:revenue_by_country",
            event_time="window_start",
            watermark=WATERMARK,
            write=Aggregate(Window(size="1 hour"), group_by=["country"]),
        ),
        StreamingTable(
            "gold.orders_by_payment",
            description="Orders and amount per payment method in 10-minute windows.",
            upstreams=["silver.orders"],
            transform="transforms:orders_by_payment",
            event_time="window_start",
            watermark=WATERMARK,
            write=Aggregate(Window(size="10 minutes"), group_by=["payment_method"]),
        ),
    ],
)
