"""Airflow import errors of the lakehouse pipelines that cannot be loaded; no DAG of its own.

A pipeline whose declaration fails to import (a syntax error, a ``SpecError``, a module of its
own raising) shows here, as this file's import error naming the pipeline, its file and the fix;
``lakehouse_pipelines.py`` builds every other pipeline's DAGs as usual. Kept apart because
Airflow marks every DAG of a file that has an import error as not schedulable.
"""

from lakehouse.orchestration.dags import raise_load_failures

raise_load_failures()
