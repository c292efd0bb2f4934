"""The ads pipeline gets its DAGs from the factory like every pipeline: no DAG code of its own
(and no ``ads_train``: it declares no model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# In a child process, as Airflow's DAG processor would: importing Airflow reconfigures logging.
LIST_DAGS = """
import json
from lakehouse.orchestration.dags import build_all
dags = build_all()
print(json.dumps({dag_id: sorted(dag.params["flows"] or []) if "flows" in dag.params else [] for dag_id, dag in dags.items()}))
"""


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_the_factory_builds_the_same_dags_for_ads_as_for_iot(tmp_path: Path) -> None:
    env = {**os.environ, "LAKEHOUSE_ROOT": str(tmp_path / "lake")}
    result = subprocess.run(
        [sys.executable, "-c", LIST_DAGS], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    dags = json.loads(result.stdout.strip().splitlines()[-1])
    kinds = {p: {d.removeprefix(f"{p}_") for d in dags if d.startswith(f"{p}_")} for p in ("iot", "ads")}
    # iot declares a model and quarantines rows that a replay can write again; ads neither
    assert kinds["ads"] and kinds["ads"] == kinds["iot"] - {"train", "replay"}
    assert {"ads_stream_deploy", "ads_incremental", "ads_backfill"} <= set(dags)
    assert {"gold.user_activity", "gold.impression_clicks"} <= set(dags["ads_backfill"])
