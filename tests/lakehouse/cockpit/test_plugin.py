"""The Data Docs are reachable from the platform: Airflow's own API server app serves them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lakehouse.config import Settings
from lakehouse.quality.report import docs_dir, quality_home

SERVE = """
from fastapi.testclient import TestClient
from airflow import plugins_manager
from airflow.api_fastapi.app import create_app

client = TestClient(create_app())
for path in ("/quality-docs/", "/quality-docs/expectations/iot/silver/device_events.html", "/quality-docs/nope.html"):
    answer = client.get(path)
    print("GET", path, answer.status_code, answer.text.replace("\\n", " ")[:200])
print("import errors:", plugins_manager.get_import_errors())
"""


def test_the_airflow_api_server_serves_the_data_docs(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    site = docs_dir(quality_home(Settings(root=str(lake))))
    (site / "expectations/iot/silver").mkdir(parents=True)
    (site / "index.html").write_text("<html>iot.silver.device_events</html>")
    (site / "expectations/iot/silver/device_events.html").write_text("<html>event_id_unique</html>")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "LAKEHOUSE_ROOT": str(lake),
    }
    result = subprocess.run(
        [sys.executable, "-c", SERVE], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith(("GET", "import errors"))]
    assert lines == [
        "GET /quality-docs/ 200 <html>iot.silver.device_events</html>",
        "GET /quality-docs/expectations/iot/silver/device_events.html 200 <html>event_id_unique</html>",
        'GET /quality-docs/nope.html 404 {"detail":"Not Found"}',
        "import errors: {}",
    ]
