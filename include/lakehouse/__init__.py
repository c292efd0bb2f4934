"""The lakehouse platform library: declare a pipeline once; run it as Spark streams and backfills
into Delta tables; check, monitor, serve and orchestrate it from Airflow.

Layers, top to bottom (each imports only the ones below it; ``make lint`` enforces it):

=========  ==========================================================================
operate    ``cli``, ``orchestration`` (DAG factory, deploy/monitor/stop), ``cockpit``
serve      ``serving`` (catalog, SQL, JDBC server, Spark-free readers)
run        ``stream``, ``batch``, ``maintenance``, ``quality.gate`` / ``checks`` / ``gx``
write      ``writes`` (append once, upsert, windowed aggregate, quarantine)
delta      ``delta`` (the one place that commits to Delta)
plan       ``flow``, ``sources`` (what a flow computes, for streams and batches alike)
declare    ``spec``, ``quality.declare``, ``registry``, ``slices``, ``config``, ``lake``
=========  ==========================================================================

Beside them: ``monitoring`` and ``control`` (Spark-free progress, health, alerts, leases),
``session`` and ``storage`` (Spark and its file system), ``generators`` (test data), and the
development platform ``platform`` (``make up``, ``make stack-up``), which nothing else imports.
"""
