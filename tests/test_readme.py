"""The README is executable documentation: its commands and examples run here, as written."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import read_table

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
FENCE = r"\n```[a-z]*\n(.*?)\n```"


def readme_files() -> dict[str, str]:
    return dict(re.findall(r"<!-- file: (\S+) -->" + FENCE, README, re.DOTALL))


def readme_script(name: str) -> str:
    match = re.search(rf"<!-- run: {name} -->" + FENCE, README, re.DOTALL)
    assert match, f"README has no '<!-- run: {name} -->' block"
    return match[1]


def test_readme_names_the_two_commands_and_ci_runs_the_test_one() -> None:
    assert "make demo" in README and "make test" in README
    assert "make test" in (REPO / ".ci/run").read_text()


def test_the_ysb_figures_the_readme_quotes_are_the_committed_results() -> None:
    """The README's YSB bullet quotes bench/results/latest.json (make bench writes it), not a
    number typed from memory: each figure below, found in the bullet, equals the file's."""
    import json

    results = json.loads((REPO / "bench" / "results" / "latest.json").read_text())
    small, large = results, results["throughput"]
    [bullet] = [b for b in README.split("\n- ") if b.startswith("YSB-style workload")]
    bullet = " ".join(bullet.split())
    quoted = {
        "streams": f"streams {small['ratio']:.2f} / {large['ratio']:.2f}",
        "as processes": f"**{small['cli_backfill_ratio']:.2f} / {large['cli_backfill_ratio']:.2f}**",
        "small seconds": f"({small['cli_backfill_seconds']:.1f} s against {small['plain_batch_process_seconds']:.1f};",
        "large seconds": f"{large['cli_backfill_seconds']:.1f} against {large['plain_batch_process_seconds']:.1f})",
        "pairs": f"median of {small['process_runs']}",
        "backfill": f"backfill alone {small['backfill_ratio']:.2f} / {large['backfill_ratio']:.2f}",
        "coordinated": f"coordinated {small['user_backfill_ratio']:.2f} / {large['user_backfill_ratio']:.2f}",
        "freshness": f"{small['freshness_p50_s']:.2f} s (p50; p95 {small['freshness_p95_s']:.2f} s)",
        "floor's freshness": f"{small['plain_freshness_p50_s']:.2f} s ({small['plain_freshness_p95_s']:.2f} s)",
    }
    missing = {what: text for what, text in quoted.items() if text not in bullet}
    assert not missing, f"the README's YSB bullet does not quote latest.json: {missing}"


@pytest.mark.slow
def test_add_a_pipeline_example_runs_as_written(tmp_path: Path, cli_env: dict[str, str]) -> None:
    files = readme_files()
    assert set(files) == {"jobs/pipelines/orders/pipeline.py", "jobs/pipelines/orders/transforms.py"}
    (tmp_path / "jobs/pipelines").mkdir(parents=True)
    (tmp_path / "jobs/pipelines/__init__.py").touch()
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text + "\n")
    env = {
        **cli_env,
        "PYTHONPATH": str(tmp_path / "jobs"),
        "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_script("add-a-pipeline")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pipeline orders: OK" in result.stdout
    lake = Lake(env["LAKEHOUSE_ROOT"])
    revenue = read_table(lake.table("gold.hourly_revenue")).to_dicts()
    assert [(r["hour"].isoformat(), r["revenue"], r["orders"]) for r in revenue] == [
        ("2026-03-01T10:00:00+00:00", 42.5, 2)
    ]
    bronze = read_table(lake.table("bronze.orders"))
    errors = bronze.filter(bronze["_parse_error"].is_not_null()).to_dicts()
    assert [(e["_parse_error"], '"o-3"' in e["_raw_record"]) for e in errors] == [
        ("wrong type for: amount", True)
    ]


@pytest.mark.slow
def test_make_demo_runs_end_to_end(cli_env: dict[str, str]) -> None:
    result = subprocess.run(
        ["make", "-s", "demo"], cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lake = Lake(cli_env["LAKEHOUSE_ROOT"])
    for table in (
        "bronze.device_events",
        "silver.device_events",
        "gold.device_type_stats",
        "gold.device_status",
    ):
        assert read_table(lake.table(table)).height > 0, table
        assert table in result.stdout
    quarantined = read_table(lake.table("quarantine.silver_device_events")).height  # unregistered devices
    assert quarantined > 0 and read_table(lake.table("silver.device_events")).height + quarantined == 5000
    assert "gold.device_type_stats: " in result.stdout and "latest 8" in result.stdout


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_a_lake_in_the_working_directory_does_not_shadow_the_package(tmp_path: Path) -> None:
    """The default lake is ./lakehouse: once it has control/, models/, ... it must not become the
    ``lakehouse`` package for any Python started there (make down, Airflow tasks, Spark workers)."""
    for folder in ("control", "platform", "models", "quality"):
        (tmp_path / "lakehouse" / folder).mkdir(parents=True)
    (tmp_path / "pipelines" / "iot").mkdir(parents=True)
    python = str(REPO / ".venv/bin/python")
    probe = "import lakehouse.state.control, pipelines.iot.pipeline; print(lakehouse.state.control.FlowControl.__name__)"
    imported = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "FlowControl"
    down = subprocess.run(
        [python, "-m", "lakehouse.platform.embedded", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0, down.stderr
    assert "up,down" in down.stdout
