"""The lakehouse platform library: declare a pipeline once; run it as Spark streams and backfills
into Delta tables; check, monitor, serve and orchestrate it from Airflow.

Layers, top to bottom: each module imports only the rows below its own (``make lint`` checks it
with import-linter, whose contract in pyproject.toml lists the same modules, finer grained).

=========  ==============================================================================
operate    ``cli`` (the ``lakehouse`` command), ``cockpit`` (the Airflow UI plugin),
           ``orchestration`` (DAG factory, deploy / monitor / stop, alerts)
serve      ``serving`` (catalog, SQL, JDBC server, Spark-free readers)
run        ``coordination`` (backfills beside running streams), ``stream``, ``batch``,
           ``maintenance``, ``models.training``; ``quality.gate``, ``quality.checks``,
           ``quality.gx``, ``monitoring.listener``, ``models.scoring``
write      ``writes`` (one module per write mode; ``writes.history`` applies change feeds)
delta      ``delta`` (the one place that commits to Delta)
plan       ``flow`` (what a flow computes), ``generators`` (test data into a source),
           ``sources`` (one module per source kind), ``changes`` (change-feed rows),
           ``purity`` (transforms kept pure), ``checkpoints`` (what a stream consumed),
           ``monitoring.upkeep``
state      ``session``, ``storage`` (Spark and its file system); ``control`` (leases, pause
           and stop requests); ``monitoring.status``, ``monitoring.health``,
           ``monitoring.alerts``, ``monitoring.progress``, ``monitoring.ops_tables``;
           ``quality.results``, ``quality.report``; ``models.store`` (Spark-free state)
declare    ``slices``, ``registry`` (pipeline discovery), ``spec`` (the pipeline API: tables,
           write modes, source kinds, expectations, models), ``lake`` (paths), ``config``,
           ``times``, ``errors``, ``processes``
=========  ==============================================================================

Beside them: ``platform``, the development platform behind ``make up`` and ``make stack-up``,
which nothing else imports.
"""
