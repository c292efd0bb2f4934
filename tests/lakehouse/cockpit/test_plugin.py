"""The plugin's apps run in Airflow's own API server, to logged-in users only: the Data Docs (with
a page saying how to build them before the first quality run) and the streams cockpit (its page,
JSON answers and Prometheus metrics; a viewer sees but may not act)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.quality.report import docs_dir, quality_home

SERVE = """
import json, os
from fastapi.testclient import TestClient
from airflow import plugins_manager
from airflow.api_fastapi.app import create_app

client = TestClient(create_app())
password = json.load(open(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]))["admin"]
token = client.post("/auth/token", json={"username": "admin", "password": password}).json()["access_token"]
for path in ("/quality-docs/", "/quality-docs/expectations/iot/silver/device_events.html",
             "/quality-docs/nope.html", "/quality-docs/..%2F..%2F..%2Fetc%2Fpasswd", "/quality-docs/docs",
             "/quality-docs/openapi.json"):
    for who, headers in (("anonymous", {}), ("admin", {"Authorization": f"Bearer {token}"})):
        answer = client.get(path, headers=headers)
        print("GET", who, path, answer.status_code, answer.text.replace("\\n", " ")[:60])
print("import errors:", plugins_manager.get_import_errors())
"""


COCKPIT = """
import json, os, sys
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app

client = TestClient(create_app(), follow_redirects=False)
passwords = json.load(open(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]))
who = {"anonymous": {}, "metrics-token": {"Authorization": "Bearer metrics-secret"},
       "wrong-token": {"Authorization": "Bearer guessed"}}
for user in ("admin", "viewer"):
    token = client.post("/auth/token", json={"username": user, "password": passwords[user]}).json()["access_token"]
    who[user] = {"Authorization": f"Bearer {token}"}
for path in ("/lakehouse/", "/lakehouse/api/overview", "/lakehouse/api/pipelines/iot?hours=2",
             "/lakehouse/api/pipelines/nope", "/lakehouse/metrics", "/lakehouse/?dag=iot_backfill",
             "/lakehouse/docs", "/lakehouse/openapi.json", "/lakehouse/redoc"):
    for name, headers in who.items():
        answer = client.get(path, headers=headers)
        body = answer.text
        if answer.status_code == 200 and "/api/" in path:
            data = answer.json()
            body = json.dumps({"user": data["user"], "can_act": [p["can_act"] for p in data.get("pipelines", [data])]})
        print("GET", name, path, answer.status_code, answer.headers.get("location", ""), body.replace("\\n", " ")[:70])
for name in ("viewer",):
    answer = client.post("/api/v2/dags/iot_stream_deploy/dagRuns", headers=who[name], json={"logical_date": None})
    print("POST", name, "trigger", answer.status_code)
views = [(v["name"], v["href"], v["destination"]) for p in client.get("/api/v2/plugins", headers=who["admin"]).json()["plugins"]
         for v in p["external_views"]]
print("views", sorted(views))
print("spark imported:", "pyspark" in sys.modules)
"""


def serve(
    tmp_path: Path,
    airflow_home: Path,
    lake: Path,
    script: str = SERVE,
    users: dict[str, tuple[str, str]] | None = None,
    **env_extra: str,
) -> list[str]:
    """Run ``script`` against Airflow's API server app; ``users`` maps name -> (role, password)."""
    users = users or {"admin": ("admin", "secret-for-tests"), "viewer": ("viewer", "viewer-secret")}
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({name: password for name, (_, password) in users.items()}))
    token = tmp_path / "metrics.token"
    token.write_text("metrics-secret\n")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{n}:{role}" for n, (role, _) in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "LAKEHOUSE_ROOT": str(lake),
        "LAKEHOUSE_METRICS_TOKEN_FILE": str(token),
        **env_extra,
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [
        line
        for line in result.stdout.splitlines()
        if line.startswith(("GET", "POST", "import errors", "views", "spark"))
    ]


def test_the_airflow_api_server_serves_the_data_docs_to_logged_in_users(
    tmp_path: Path, airflow_home: Path
) -> None:
    lake = tmp_path / "lake"
    site = docs_dir(quality_home(Settings(root=str(lake))))
    (site / "expectations/iot/silver").mkdir(parents=True)
    (site / "index.html").write_text("<html>iot.silver.device_events</html>")
    (site / "expectations/iot/silver/device_events.html").write_text("<html>event_id_unique</html>")
    assert serve(tmp_path, airflow_home, lake) == [
        'GET anonymous /quality-docs/ 401 {"detail":"Not authenticated"}',
        "GET admin /quality-docs/ 200 <html>iot.silver.device_events</html>",
        'GET anonymous /quality-docs/expectations/iot/silver/device_events.html 401 {"detail":"Not authenticated"}',
        "GET admin /quality-docs/expectations/iot/silver/device_events.html 200 <html>event_id_unique</html>",
        'GET anonymous /quality-docs/nope.html 401 {"detail":"Not authenticated"}',
        'GET admin /quality-docs/nope.html 404 {"detail":"Not Found"}',
        'GET anonymous /quality-docs/..%2F..%2F..%2Fetc%2Fpasswd 401 {"detail":"Not authenticated"}',
        'GET admin /quality-docs/..%2F..%2F..%2Fetc%2Fpasswd 404 {"detail":"Not Found"}',
        'GET anonymous /quality-docs/docs 401 {"detail":"Not authenticated"}',  # no Swagger UI
        'GET admin /quality-docs/docs 404 {"detail":"Not Found"}',
        'GET anonymous /quality-docs/openapi.json 401 {"detail":"Not authenticated"}',
        'GET admin /quality-docs/openapi.json 404 {"detail":"Not Found"}',
        "import errors: {}",
    ]


def test_before_the_first_quality_run_the_index_says_how_to_build_the_docs(
    tmp_path: Path, airflow_home: Path
) -> None:
    lines = serve(tmp_path, airflow_home, tmp_path / "lake")
    assert lines[1].startswith("GET admin /quality-docs/ 200 <!doctype html><html><head><title>Data Docs")


def test_the_cockpit_is_served_to_logged_in_users_and_a_viewer_may_not_act(
    tmp_path: Path, airflow_home: Path
) -> None:
    lines = serve(tmp_path, airflow_home, tmp_path / "lake", COCKPIT)
    answers = {
        tuple(line.split(" ", 3)[:3]): line.split(" ", 3)[3] for line in lines if line.startswith("GET")
    }

    def status(who: str, path: str) -> str:
        return answers[("GET", who, path)].split(" ")[0]

    login = answers[("GET", "anonymous", "/lakehouse/")]  # a browser is sent to log in, then back
    assert login.startswith("307 /auth/login?next=http%3A%2F%2Ftestserver%2Flakehouse%2F "), login
    for path in ("/lakehouse/", "/lakehouse/api/overview", "/lakehouse/api/pipelines/iot?hours=2"):
        if path != "/lakehouse/":
            assert status("anonymous", path) == "401", path
        assert status("wrong-token", path) == "403", path  # not a JWT Airflow issued
        assert status("metrics-token", path) == "403", path  # the metrics token reads metrics only
        assert status("admin", path) == status("viewer", path) == "200", path
    assert answers[("GET", "admin", "/lakehouse/")].startswith("200  <!doctype html>")
    every = len(registry.discover("pipelines"))  # one answer per pipeline
    assert answers[("GET", "admin", "/lakehouse/api/overview")].endswith(
        '{"user": "admin", "can_act": [' + ", ".join(["true"] * every) + "]}"
    )
    assert answers[("GET", "viewer", "/lakehouse/api/overview")].endswith(
        '{"user": "viewer", "can_act": [' + ", ".join(["false"] * every) + "]}"
    )
    assert answers[("GET", "viewer", "/lakehouse/api/pipelines/iot?hours=2")].endswith('"can_act": [false]}')
    assert status("admin", "/lakehouse/api/pipelines/nope") == "404"
    assert status("anonymous", "/lakehouse/metrics") == "401"
    for path in ("/lakehouse/docs", "/lakehouse/openapi.json", "/lakehouse/redoc"):  # no API schema to anyone
        assert status("anonymous", path) == status("admin", path) == "404", path
    assert status("wrong-token", "/lakehouse/metrics") == "403"
    for who in ("admin", "metrics-token"):
        assert answers[("GET", who, "/lakehouse/metrics")].startswith("200  # HELP lakehouse_flow_state")
    assert answers[("GET", "admin", "/lakehouse/?dag=iot_backfill")].startswith("307 ./#/pipeline/iot")
    assert "POST viewer trigger 403" in lines  # Airflow itself refuses the viewer's trigger
    views = next(line for line in lines if line.startswith("views"))
    assert "('Lakehouse', '/lakehouse/', 'nav')" in views
    assert "('Lakehouse', '/lakehouse/?dag={DAG_ID}', 'dag')" in views
    assert "spark imported: False" in lines


TEAM_AUTH = '''
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class TeamAuthManager(SimpleAuthManager):
    """Per-DAG rights, as FAB or Keycloak give them: "iot-team" may read the iot DAGs only."""

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
        if user.get_name() == "iot-team" and details is not None and not str(details.id).startswith("iot_"):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
'''

TEAM = """
import json, os
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app

client = TestClient(create_app(), follow_redirects=False)
passwords = json.load(open(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]))
admin = client.post("/auth/token", json={"username": "admin", "password": passwords["admin"]}).json()
first = client.get("/lakehouse/api/overview", headers={"Authorization": f"Bearer {admin['access_token']}"}).json()
print("GET admin overview", len(first["pipelines"]))  # computed for every pipeline, shared below
token = client.post("/auth/token", json={"username": "iot-team", "password": passwords["iot-team"]}).json()
headers = {"Authorization": f"Bearer {token['access_token']}"}
overview = client.get("/lakehouse/api/overview", headers=headers).json()
print("GET overview", [p["name"] for p in overview["pipelines"]], overview["generated_at"] == first["generated_at"])
for name in ("iot", "ads"):
    print("GET page", name, client.get(f"/lakehouse/api/pipelines/{name}", headers=headers).status_code)
metrics = client.get("/lakehouse/metrics", headers=headers).text
print("GET metrics", sorted({line.split('pipeline="')[1].split('"')[0] for line in metrics.splitlines() if 'pipeline="' in line}))
"""


def test_a_user_sees_only_the_pipelines_whose_dags_airflow_lets_them_read(
    tmp_path: Path, airflow_home: Path
) -> None:
    (tmp_path / "team_auth.py").write_text(TEAM_AUTH)
    lines = serve(
        tmp_path,
        airflow_home,
        tmp_path / "lake",
        TEAM,
        users={
            "iot-team": ("admin", "team-secret"),
            "admin": ("admin", "admin-secret"),
        },  # iot-team: the iot DAGs
        AIRFLOW__CORE__AUTH_MANAGER="team_auth.TeamAuthManager",
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    )
    every = len(registry.discover("pipelines"))
    assert lines == [
        f"GET admin overview {every}",
        "GET overview ['iot'] True",  # the admin's shared answer, cut to what iot-team may read
        "GET page iot 200",
        "GET page ads 404",  # as a pipeline that does not exist
        "GET metrics ['iot']",
    ]
