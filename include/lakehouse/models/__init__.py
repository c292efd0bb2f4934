"""Models in continuous applications: trained in batch from a table (``training``), versions and
aliases kept in the lake (``store``, Spark-free), scoring a table's rows with the version in force
in streams and backfills alike (``scoring``). Declared with ``lakehouse.spec.Model``."""
