from lakehouse.spec import Aggregate, Append, Ingest, JsonFiles, Pipeline, StreamingTable, Window

pipeline = Pipeline(
    name="orders",
    tables=[
        Ingest(
            "bronze.orders",
            source=JsonFiles(
                schema="order_id STRING NOT NULL, customer STRING, amount DOUBLE NOT NULL, "
                "order_time TIMESTAMP NOT NULL"
            ),
            event_time="order_time",
        ),
        StreamingTable(
            "silver.orders",
            upstreams=["bronze.orders"],
            transform="transforms:clean_orders",
            event_time="order_time",
            watermark="30 minutes",
            write=Append(keys=["order_id"]),  # one row per order, deduplicated within the watermark
        ),
        StreamingTable(
            "gold.hourly_revenue",
            upstreams=["silver.orders"],
            transform="transforms:hourly_revenue",
            event_time="hour",
            watermark="30 minutes",
            write=Aggregate(Window("1 hour")),  # windows updated in place as late orders arrive
        ),
    ],
)
