"""Airflow DAGs of every registered lakehouse pipeline.

Declarations only: ``lakehouse.orchestration.dags`` builds each pipeline's DAGs (deploy,
monitor, stop, incremental, backfill) from its spec in ``jobs/pipelines/<name>/pipeline.py``.
Adding a pipeline adds its DAGs; this file does not change.
"""

from lakehouse.orchestration.dags import build_all

globals().update(build_all())
