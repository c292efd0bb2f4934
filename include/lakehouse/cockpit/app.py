"""The cockpit's web app, mounted in Airflow's API server under ``/lakehouse`` (see
:mod:`lakehouse.cockpit.plugin`): one page (``page.html``: overview and pipeline pages) and the
JSON and Prometheus answers it and scrapers read.

Same login as Airflow: every route needs the user Airflow's UI logged in (its ``_token`` cookie)
or a Bearer token from ``/auth/token``; the metrics also accept the token of
``LAKEHOUSE_METRICS_TOKEN_FILE``. Actions are not here: the page triggers the factory's DAGs
through Airflow's own REST API as the logged-in user, so Airflow checks the user's rights and its
audit log shows who did what. The answers say whether the user may trigger each pipeline's DAGs,
so the page shows a viewer the buttons disabled.

A user sees a pipeline (overview, page, metrics) only if Airflow lets them read every one of its
DAGs: per-DAG permissions of the auth manager in use hide the pipelines of other teams; an
unreadable pipeline's page answers 404, as an unknown one does.

The figures are computed once for every reader and refreshed in the background
(:mod:`lakehouse.cockpit.answers`): a request is answered from the latest computation, so the
page answers at once on a busy machine; ``generated_at`` says when its figures were read.
"""

from __future__ import annotations

import hmac
import time
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, resolve_user_from_token
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from lakehouse import registry
from lakehouse.cockpit import metrics, views
from lakehouse.cockpit.answers import SharedAnswers
from lakehouse.core.config import Settings, settings
from lakehouse.spec import Pipeline

PAGE = Path(__file__).with_name("page.html")


def _authorized(user: Any, dag_ids: list[str], method: str, access_entity: Any = None) -> bool:
    """Whether Airflow's auth manager lets ``user`` do ``method`` on every one of ``dag_ids``: a
    pipeline's page shows or acts on all its DAGs at once, so one refused DAG refuses it."""
    manager = get_auth_manager()
    return all(
        manager.is_authorized_dag(
            method=method, access_entity=access_entity, details=DagDetails(id=dag_id), user=user
        )
        for dag_id in dag_ids
    )


def _visible(pipelines: dict[str, Pipeline], user: Any) -> dict[str, Pipeline]:
    """The pipelines whose every DAG ``user`` may read."""
    return {
        name: p for name, p in pipelines.items() if _authorized(user, list(views.dag_ids(p).values()), "GET")
    }


def _with_rights(answer: dict[str, Any], user: Any) -> dict[str, Any]:
    for pipeline in answer.get("pipelines", [answer]):
        pipeline["can_act"] = _authorized(user, list(pipeline["dags"].values()), "POST", DagAccessEntity.RUN)
    answer["user"] = user.get_name()
    return answer


def _timed(compute: Any) -> dict[str, Any]:
    """``compute()``'s answer with ``read_ms``: how long reading its figures took."""
    started = time.perf_counter()
    answer: dict[str, Any] = compute()
    answer["read_ms"] = round((time.perf_counter() - started) * 1000)
    return answer


def _overview(conf: Settings) -> dict[str, Any]:
    """The overview of the pipelines that load, with a card for each one that does not."""
    found = registry.load(conf.pipelines_package)
    return views.overview(conf, found.pipelines, failures=found.failures.values())


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


async def _user(request: Request) -> Any:
    """The request's Airflow user, as ``GetUserDep`` finds it (Bearer token, else the UI's cookie)."""
    return await resolve_user_from_token(_bearer(request) or request.cookies.get(COOKIE_NAME_JWT_TOKEN))


async def _metrics_reader(request: Request, conf: Settings) -> Any:
    """The metrics token of ``LAKEHOUSE_METRICS_TOKEN_FILE`` (``None``: the scraper), or an
    Airflow login: its user (else 401/403)."""
    bearer = _bearer(request)
    if bearer and conf.metrics_token_file and conf.metrics_token_file.is_file():
        expected = conf.metrics_token_file.read_text().strip()
        if expected and hmac.compare_digest(bearer.encode(), expected.encode()):
            return None
    return await _user(request)


def cockpit_app() -> FastAPI:
    app = FastAPI(  # no /docs or /openapi.json: they would answer anonymous requests
        title="Lakehouse cockpit: streams, tables and quality of every pipeline",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    shared = SharedAnswers()

    def overview_of_all(conf: Settings) -> dict[str, Any]:
        """Every pipeline's overview (each request keeps the ones its user may read)."""
        return shared.get(  # type: ignore[no-any-return]
            "overview",
            lambda: _timed(lambda: _overview(conf)),
        )

    @app.get("/", response_model=None)
    async def page(request: Request, dag: str | None = None) -> HTMLResponse | RedirectResponse:
        """The page; ``?dag=<dag_id>`` (the view on a DAG's page) opens that DAG's pipeline. A
        browser that is not logged in is sent to Airflow's login, and back here after it."""
        try:
            await _user(request)
        except HTTPException as exc:
            if exc.status_code != 401:
                raise
            return RedirectResponse(
                get_auth_manager().get_url_login(next_url=str(request.url)), status_code=307
            )
        if dag is not None:
            name = views.pipeline_of_dag(registry.deployed(settings()), dag)
            return RedirectResponse(f"./#/pipeline/{name}" if name else "./", status_code=307)
        return HTMLResponse(PAGE.read_text())

    @app.get("/api/overview")
    def overview(user: GetUserDep) -> dict[str, Any]:
        conf = settings()
        visible = _visible(registry.deployed(conf), user)
        answer = overview_of_all(conf)
        mine = [dict(p) for p in answer["pipelines"] if p["name"] in visible]
        return _with_rights({**answer, "pipelines": mine}, user)

    @app.get("/api/pipelines/{name}")
    def pipeline(
        name: str, user: GetUserDep, hours: Annotated[float, Query(gt=0, le=24 * 31)] = 1.0
    ) -> dict[str, Any]:
        conf = settings()
        pipelines = _visible(registry.deployed(conf), user)
        if name not in pipelines:
            raise HTTPException(
                status_code=404, detail=f"no pipeline named {name!r} (known: {', '.join(pipelines)})"
            )
        answer = shared.get(
            ("pipeline", name, hours),
            lambda: _timed(lambda: views.pipeline_page(conf, pipelines[name], hours=hours)),
        )
        return _with_rights(dict(answer), user)

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        conf = settings()
        user = await _metrics_reader(request, conf)
        pipelines = registry.deployed(conf)
        visible = pipelines if user is None else _visible(pipelines, user)  # the token reads all
        answer = overview_of_all(conf)
        mine = {**answer, "pipelines": [p for p in answer["pipelines"] if p["name"] in visible]}
        tables = shared.get("tables", lambda: views.table_figures(conf, pipelines))
        body = metrics.exposition(mine, tables)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
