"""The Data Docs are reachable from the platform: Airflow's own API server app serves them, to
logged-in users only, with a page saying how to build them before the first quality run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lakehouse.config import Settings
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
             "/quality-docs/nope.html", "/quality-docs/..%2F..%2F..%2Fetc%2Fpasswd"):
    for who, headers in (("anonymous", {}), ("admin", {"Authorization": f"Bearer {token}"})):
        answer = client.get(path, headers=headers)
        print("GET", who, path, answer.status_code, answer.text.replace("\\n", " ")[:60])
print("import errors:", plugins_manager.get_import_errors())
"""


def serve(tmp_path: Path, airflow_home: Path, lake: Path) -> list[str]:
    passwords = tmp_path / "passwords.json"
    passwords.write_text('{"admin": "secret-for-tests"}')
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "LAKEHOUSE_ROOT": str(lake),
    }
    result = subprocess.run(
        [sys.executable, "-c", SERVE], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if line.startswith(("GET", "import errors"))]


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
        "import errors: {}",
    ]


def test_before_the_first_quality_run_the_index_says_how_to_build_the_docs(
    tmp_path: Path, airflow_home: Path
) -> None:
    lines = serve(tmp_path, airflow_home, tmp_path / "lake")
    assert lines[1].startswith("GET admin /quality-docs/ 200 <!doctype html><html><head><title>Data Docs")
