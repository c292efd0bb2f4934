"""The state layer: what flows run against. ``session`` (the Spark session), ``storage`` (its
file system), ``checkpoints`` (what a stream consumed), ``control`` (leases, pause and stop
requests)."""
