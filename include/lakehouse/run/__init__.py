"""The run layer: what runs flows. ``stream`` (continuous queries), ``batch`` (backfills),
``coordination`` (backfills beside running streams), ``maintenance`` (OPTIMIZE, VACUUM)."""
