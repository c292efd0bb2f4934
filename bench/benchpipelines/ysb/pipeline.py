"""Yahoo Streaming Benchmark: ad events -> views joined to their campaign -> counts per campaign
in 10-second event-time windows. Declarations only."""

from lakehouse.spec import Aggregate, Ingest, JsonFiles, Lookup, Pipeline, StreamingTable, Window

pipeline = Pipeline(
    name="ysb",
    description="Yahoo Streaming Benchmark: views per campaign in 10-second windows.",
    lookups=[Lookup("campaigns", schema="ad_id STRING, campaign_id STRING")],
    tables=[
        Ingest(
            "bronze.ad_events",
            description="Ad events as received.",
            source=JsonFiles(
                schema="user_id STRING, page_id STRING, ad_id STRING NOT NULL, ad_type STRING, "
                "event_type STRING NOT NULL, event_time TIMESTAMP NOT NULL, ip_address STRING",
                max_files_per_trigger=1,
            ),
            event_time="event_time",
        ),
        StreamingTable(
            "silver.ad_views",
            description="Views with their campaign.",
            upstreams=["bronze.ad_events"],
            lookups=["campaigns"],
            transform="transforms:views_with_campaign",
            event_time="event_time",
            watermark="10 seconds",
        ),
        StreamingTable(
            "gold.campaign_windows",
            description="Views per campaign in 10-second windows.",
            upstreams=["silver.ad_views"],
            transform="transforms:views_per_campaign",
            event_time="window_start",
            watermark="10 seconds",
            write=Aggregate(Window(size="10 seconds"), group_by=["campaign_id"]),
        ),
    ],
)
