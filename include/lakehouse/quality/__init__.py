"""Data quality with Great Expectations Core: expectations per table, enforced on every row in
streams and backfills (warn / drop to quarantine / fail), table checks run as GX checkpoints
from Airflow, results kept in ``ops.quality_results`` and rendered as GX Data Docs.

This package's ``__init__`` and :mod:`~lakehouse.quality.declare` never import GX or pyspark
(pipeline declarations and DAG files import them); the modules that run checks do.

=====================  ====================================================================
``declare``            ``gxe.<GX class>(..., action=...)`` declarations (no GX import)
``gx``                 the GX adapter: instantiate, row conditions, suites, checkpoints
``enforce``            ``QualityGate``: one enforcement path for micro-batches and backfills
``results``            ``ops.quality_results``: every validation result, Spark-free
``checks``             table-level checks (GX checkpoints) and Data Docs
``cli`` / ``dag``      ``lakehouse quality`` and the ``<pipeline>_quality`` Airflow DAG
``docs_plugin``        Airflow plugin serving the Data Docs under ``/quality-docs/``
=====================  ====================================================================
"""

import logging

from lakehouse.quality.declare import Action, Expectation, gxe

# GX logs every object it builds at INFO; keep driver and task logs readable.
logging.getLogger("great_expectations").setLevel(logging.WARNING)

__all__ = ["Action", "Expectation", "gxe"]
