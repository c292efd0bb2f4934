"""Data quality with Great Expectations Core: expectations per table, enforced on every row in
streams and backfills (warn / drop to quarantine / fail), table checks run as GX checkpoints
from Airflow, results kept in ``ops.quality_results`` and rendered as GX Data Docs.

Expectations are declared with ``gxe`` (re-exported here from
:mod:`lakehouse.spec.expectations`, which imports neither GX nor pyspark: pipeline declarations
and DAG files use it); the modules that run checks import them.

=====================  ====================================================================
``gx``                 the GX adapter: instantiate, row conditions, suites, checkpoints
``gate``               ``QualityGate``: one judgement of rows for micro-batches and backfills
``checks``             table-level checks (GX checkpoints) and Data Docs
``report``             their reports, rebuilt Spark-free by the ``<pipeline>_quality`` DAG
``results``            ``ops.quality_results``: every validation result, Spark-free
=====================  ====================================================================

The ``lakehouse quality`` command is in ``lakehouse.cli.quality``, the DAG in
``lakehouse.orchestration.dags.quality``, the Data Docs pages in ``lakehouse.cockpit``.
"""

import logging

from lakehouse.spec.expectations import Action, Expectation, gxe

# GX logs every object it builds at INFO; keep driver and task logs readable.
logging.getLogger("great_expectations").setLevel(logging.WARNING)

__all__ = ["Action", "Expectation", "gxe"]
