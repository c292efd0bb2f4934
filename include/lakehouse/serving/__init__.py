"""Serving: analysts query the lake by table name, over JDBC, and without Spark.

Jobs address tables by path; only the serving side keeps a catalog, and it is derived from the
pipeline specs, never edited by hand:

- :mod:`~lakehouse.serving.catalog` registers every declared table as ``<layer>.<table>`` (and
  the platform's own ``ops.*`` tables) in the Spark catalog of the serving process, and keeps it
  in step with the specs. In-memory by default (no metastore, no Derby); a shared Hive metastore
  when ``LAKEHOUSE_METASTORE_URI`` is set.
- :mod:`~lakehouse.serving.engine` runs SQL in an embedded Spark session or through a running
  server, and :mod:`~lakehouse.serving.output` prints results as a table, CSV or JSON.
- :mod:`~lakehouse.serving.server` is ``lakehouse serve``: the Spark Thrift (JDBC/ODBC) server,
  started in-process on the catalog above and re-synced periodically.
- :mod:`~lakehouse.serving.tables` reads tables, their history and description with delta-rs:
  no JVM, no Spark.
"""
