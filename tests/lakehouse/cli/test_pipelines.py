"""The CLI: help everywhere, clear errors with non-zero exits, Spark-free commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.core.config import settings

runner = CliRunner()


@pytest.fixture(autouse=True)
def fresh_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("COLUMNS", "200")
    settings.cache_clear()
    yield
    settings.cache_clear()


@pytest.mark.parametrize("command", ["validate", "run", "backfill", "generate", "status", "show"])
def test_every_command_has_help(command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_validate_lists_the_tables() -> None:
    result = runner.invoke(app, ["validate"])  # every pipeline, its checks reading platform tables too
    assert result.exit_code == 0, result.output
    assert all(f"pipeline {name}: OK" in result.output for name in ("ads", "crm", "iot")), result.output
    assert "gold.device_type_stats" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["backfill", "iot", "--start", "2026-01-01"], "give --start and --end"),
        (
            ["backfill", "iot", "--full-refresh", "--start", "2026-01-01"],
            "--full-refresh rebuilds whole tables",
        ),
        (["backfill", "iot", "--start", "2026-01-02", "--end", "2026-01-01"], "must be before its end"),
        (["backfill", "iot", "--full-refresh", "--flow", "gold.nope"], "has no table 'gold.nope'"),
        (["run", "nope", "--trigger", "incremental"], "no pipeline named 'nope'"),
        (["generate", "iot", "--set", "colour=red"], "expected NAME=VALUE with NAME one of"),
        (["generate", "iot", "--set", "late_fraction=lots"], "'lots' is not a valid float"),
        (["show", "gold.device_status"], "no Delta table 'gold.device_status'"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


def test_unknown_trigger_is_rejected_by_the_parser() -> None:
    result = runner.invoke(app, ["run", "iot", "--trigger", "sometimes"])
    assert result.exit_code == 2 and "sometimes" in result.output


def test_generate_is_seeded_and_status_works_without_spark(tmp_path: Path) -> None:
    args = [
        "generate",
        "iot",
        "--events",
        "200",
        "--files",
        "2",
        "--seed",
        "7",
        "--start",
        "2026-01-01",
        "--json",
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output)
    assert summary["events"] == 200 and len(summary["files"]) == 2
    written = [Path(f).read_text() for f in summary["files"]]
    again = json.loads(runner.invoke(app, args).output)
    assert [Path(f).read_text() for f in again["files"]] == written
    assert {k: v for k, v in again.items() if k != "files"} == {
        k: v for k, v in summary.items() if k != "files"
    }
    status = runner.invoke(app, ["status", "iot"])
    assert status.exit_code == 0, status.output
    assert "not created yet" in status.output and "never ran" in status.output


def test_status_shows_where_the_time_goes(tmp_path: Path) -> None:
    from lakehouse.core.lake import Lake
    from lakehouse.monitoring.progress import PHASES, ProgressLog

    log = ProgressLog(Lake(str(tmp_path / "lake")))
    flow = "silver.device_events"
    log.append(
        [
            {"pipeline": "iot", "flow": flow, "event": "progress", "query_id": "q", "batch_id": b,
             "num_input_rows": rows, "batch_duration_ms": 1000 + b,
             **{f"{phase}_ms": 10 * (i + 1) + b for i, phase in enumerate(PHASES)}}
            for b, rows in enumerate([5, 0, 7])  # the empty batch is left out of the medians
        ]
    )  # fmt: skip
    medians = log.phases("iot").row(0, named=True)
    assert medians["batches"] == 2 and medians["compute_ms"] == (20 + 22) / 2
    status = runner.invoke(app, ["status", "iot"])
    assert status.exit_code == 0, status.output
    assert "where the time goes" in status.output
    breakdown = status.output.split("where the time goes")[1]
    line = next(line for line in breakdown.splitlines() if line.strip(" │").startswith(flow))
    cells = [cell.strip() for cell in line.strip(" │").split("│")]
    assert cells[1:] == ["2", *(str(10 * (i + 1) + 1) for i in range(len(PHASES))), "1001"]
