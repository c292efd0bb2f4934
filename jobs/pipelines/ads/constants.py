"""What the ads declaration, transforms and generator share: one place for each value."""

from lakehouse.spec import Window

IMPRESSIONS_LATE = "2 hours"  # how late an impression may arrive
CLICKS_LATE = "3 hours"  # how late a click may arrive
ATTRIBUTION = "1 hour"  # a click counts for an impression at most this long after it
IDLE_AFTER = "5 minutes"  # without action, a user is idle ...
OFFLINE_AFTER = "30 minutes"  # ... then offline, which closes the session
CTR_WINDOW = Window(size="1 hour")
