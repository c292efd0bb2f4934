"""Airflow plugin serving the GX Data Docs from the Airflow API server, under ``/quality-docs/``,
with a "Data Docs" entry in the UI's navigation.

Registered through the ``airflow.plugins`` entry point of this package (pyproject.toml), so
any Airflow that has the project installed (``make up`` included) loads it. The directory is
the one ``lakehouse quality`` and the ``<pipeline>_quality`` DAG build into (see
``lakehouse.quality.checks.docs_dir``); pages appear as soon as a first check has run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from lakehouse.config import settings
from lakehouse.orchestration.dags.quality import DOCS_URL_PREFIX
from lakehouse.quality.report import docs_dir, quality_home

if TYPE_CHECKING:
    from pathlib import Path


def docs_app(directory: Path) -> FastAPI:
    """A FastAPI app serving ``directory`` (``index.html`` at its root)."""
    app = FastAPI(title="Lakehouse data quality: Great Expectations Data Docs")
    app.mount("/", StaticFiles(directory=directory, html=True, check_dir=False), name="data-docs")
    return app


class QualityDocsPlugin(AirflowPlugin):
    name = "lakehouse_quality_docs"
    fastapi_apps = [  # noqa: RUF012 (Airflow's plugin interface is class attributes)
        {
            "app": docs_app(docs_dir(quality_home(settings()))),
            "url_prefix": DOCS_URL_PREFIX,
            "name": "Great Expectations Data Docs",
        }
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Data Docs",
            "href": f"{DOCS_URL_PREFIX}/index.html",
            "url_route": "quality-docs",
            "destination": "nav",
            "category": "browse",
        }
    ]
