"""SQL of the IoT table checks (``UnexpectedRowsExpectation`` queries), derived from the
pipeline's window and watermark so that changing them changes the checks too.

``{batch}`` is the checked table; ``{silver.device_events}`` another table of the lake.
"""

from lakehouse.spec import parse_duration
from pipelines.iot.constants import WATERMARK, WINDOW

_SIZE, _SLIDE = WINDOW.size, WINDOW.slide or WINDOW.size
# Windows older than the window size plus the watermark no longer change: consistency is
# checked on those only.
_SETTLED_SECONDS = int((WINDOW.size_delta + parse_duration(WATERMARK, "WATERMARK")).total_seconds())
_FINAL_WINDOWS = f"window_start + INTERVAL {_SETTLED_SECONDS} SECONDS <= (SELECT max(event_time) FROM {{silver.device_events}})"

GOLD_WINDOWS_MATCH_SILVER = f"""
WITH silver AS (
    SELECT w.start AS window_start, device_type, count(*) AS events
    FROM (SELECT window(event_time, '{_SIZE}', '{_SLIDE}') AS w, device_type
          FROM {{silver.device_events}})
    GROUP BY w.start, device_type
), compared AS (
    SELECT coalesce(g.window_start, s.window_start) AS window_start,
           coalesce(g.device_type, s.device_type) AS device_type,
           g.events AS gold_events, s.events AS silver_events
    FROM {{batch}} g FULL OUTER JOIN silver s
      ON g.window_start = s.window_start AND g.device_type <=> s.device_type
)
SELECT * FROM compared
WHERE gold_events IS DISTINCT FROM silver_events AND {_FINAL_WINDOWS}
"""

GOLD_WINDOWS_COMPLETE = f"""
WITH span AS (
    SELECT device_type,
           explode(sequence(min(window_start), max(window_start), INTERVAL {int(WINDOW.slide_delta.total_seconds())} SECONDS))
           AS window_start
    FROM {{batch}} GROUP BY device_type
)
SELECT span.* FROM span LEFT ANTI JOIN {{batch}} g
  ON g.window_start = span.window_start AND g.device_type <=> span.device_type
"""

STATUS_MATCHES_SILVER = """
WITH latest AS (
    SELECT device, max(event_time) AS event_time FROM {silver.device_events} GROUP BY device
)
SELECT coalesce(s.device, l.device) AS device, s.event_time AS status_time, l.event_time AS latest_event
FROM {batch} s FULL OUTER JOIN latest l ON s.device = l.device
WHERE s.event_time IS DISTINCT FROM l.event_time
"""
