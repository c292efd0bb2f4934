"""Pipelines for benchmarks only: a package the platform discovers when configured
(``LAKEHOUSE_PIPELINES_PACKAGE=benchpipelines`` with ``bench/`` on the path), never in the
production DAGs (which discover ``pipelines``)."""
