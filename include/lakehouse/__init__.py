"""The lakehouse platform library: declare a pipeline once; run it as Spark streams and backfills
into Delta tables; check, monitor, serve and orchestrate it from Airflow.

Layers, top to bottom: each module imports only the rows below its own (``make lint`` checks it
with import-linter, whose contract in pyproject.toml lists the same modules, finer grained).

=========  ==============================================================================
operate    ``cli`` (the ``lakehouse`` command), ``cockpit`` (the Airflow UI plugin),
           ``orchestration`` (DAG factory, deploy / monitor / stop, alerts)
serve      ``serving`` (catalog, SQL, JDBC server, Spark-free readers)
run        ``run`` (``run.coordination``: backfills beside running streams; ``run.stream``,
           ``run.batch``, ``run.maintenance``, ``run.replay``, ``run.rescue``), ``models.training``;
           ``flows`` (one module per kind of flow: how it streams, backfills, positions) and
           ``run.publish`` (gate, write, settle: the one way rows reach a table); ``quality.gate``,
           ``quality.checks``, ``quality.gx``, ``monitoring.listener``, ``models.scoring``,
           ``run.codegen`` (small micro-batches run interpreted)
write      ``writes`` (one module per write mode; ``writes.history`` applies change feeds)
delta      ``delta`` (the one place that commits to Delta)
plan       ``plan`` (``plan.flow``: the pieces a flow computes with; ``plan.generators``: test data into
           a source; ``plan.changes``: change-feed rows; ``plan.purity``: transforms kept pure;
           ``plan.compatibility``: what a change does to a running flow),
           ``sources`` (one module per source kind), ``monitoring.upkeep``
state      ``state`` (``state.checkpoints``: what a stream consumed; ``state.session``,
           ``state.storage``: Spark and its file system; ``state.control``: leases, pause and
           stop requests); ``monitoring.status``, ``monitoring.health``, ``monitoring.alerts``,
           ``monitoring.progress``, ``monitoring.ops_tables``; ``quality.results``,
           ``quality.report``; ``models.store`` (Spark-free state)
declare    ``slices``, ``registry`` (pipeline discovery), ``spec`` (the pipeline API: kinds of
           table, write modes, source kinds, expectations, models), ``core`` (``core.lake``:
           paths; ``core.config``, ``core.times``, ``core.errors``, ``core.processes``)
=========  ==============================================================================

Beside them: ``platform``, the development platform behind ``make up`` and ``make stack-up``,
which nothing else imports.
"""

__version__ = "0.3.0"
"""This release (``lakehouse --version``, the package metadata, the cockpit's footer); what each
release changed is in CHANGELOG.md, the compatibility policy in docs/releases.md."""
