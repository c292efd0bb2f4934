"""The platform's Airflow plugin: the streams cockpit (:mod:`lakehouse.cockpit.app`) under
``/lakehouse/`` with a "Lakehouse" entry in the UI's navigation and a "Lakehouse" view on every
DAG's page (opening that DAG's pipeline), and the Great Expectations Data Docs under
``/quality-docs/`` with a "Data Docs" entry; all behind Airflow's own login.

Registered through the ``airflow.plugins`` entry point of this package (pyproject.toml), so any
Airflow that has the project installed (``make up`` included) loads it. FastAPI plugin apps are
not protected by Airflow unless they ask for its user: every page here does (``GetUserDep``: the
``_token`` cookie the UI set at login, or a Bearer token), so anonymous requests get 401. Before a
first quality run has built the docs, the index says how to build them instead of failing.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

from lakehouse.cockpit.app import cockpit_app
from lakehouse.core.config import settings
from lakehouse.orchestration.dags.quality import DOCS_URL_PREFIX
from lakehouse.quality.report import docs_dir, quality_home

NOT_BUILT = """<!doctype html><html><head><title>Data Docs</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>No Data Docs yet</h1>
<p>The Great Expectations Data Docs are built by the first quality run of a pipeline: trigger a
<code>&lt;pipeline&gt;_quality</code> DAG (it also runs after every table update), or run
<code>lakehouse quality &lt;pipeline&gt;</code>. Then reload this page.</p>
</body></html>"""


def docs_app(directory: Path) -> FastAPI:
    """A FastAPI app serving ``directory`` (``index.html`` at its root) to logged-in users."""
    app = FastAPI(  # no /docs or /openapi.json: they would answer anonymous requests
        title="Lakehouse data quality: Great Expectations Data Docs",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    root = directory.resolve()

    @app.get("/{path:path}", response_model=None)
    def page(path: str, user: GetUserDep) -> FileResponse | HTMLResponse:
        target = (root / (path or "index.html")).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.is_relative_to(root):
            raise HTTPException(status_code=404, detail="Not Found")
        if not target.is_file():
            if target == root / "index.html":
                return HTMLResponse(NOT_BUILT)
            raise HTTPException(status_code=404, detail="Not Found")
        return FileResponse(target, media_type=mimetypes.guess_type(target.name)[0])

    return app


COCKPIT_URL_PREFIX = "/lakehouse"


class LakehousePlugin(AirflowPlugin):
    name = "lakehouse"
    fastapi_apps = [  # noqa: RUF012 (Airflow's plugin interface is class attributes)
        {"app": cockpit_app(), "url_prefix": COCKPIT_URL_PREFIX, "name": "Lakehouse cockpit"},
        {
            "app": docs_app(docs_dir(quality_home(settings()))),
            "url_prefix": DOCS_URL_PREFIX,
            "name": "Great Expectations Data Docs",
        },
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Lakehouse",
            "href": f"{COCKPIT_URL_PREFIX}/",
            "url_route": "lakehouse",
            "destination": "nav",
            "nav_top_level": True,
        },
        {  # a tab on each DAG's page: the DAG's pipeline in the cockpit
            "name": "Lakehouse",
            "href": f"{COCKPIT_URL_PREFIX}/?dag={{DAG_ID}}",
            "url_route": "lakehouse-pipeline",
            "destination": "dag",
        },
        {
            "name": "Data Docs",
            "href": f"{DOCS_URL_PREFIX}/index.html",
            "url_route": "quality-docs",
            "destination": "nav",
            "category": "browse",
        },
    ]
