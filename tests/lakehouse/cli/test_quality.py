"""``lakehouse quality`` and ``lakehouse validate``: help, and declaration errors that name the
table and the expectation, before any Spark starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.core.config import settings

runner = CliRunner()

BROKEN = """
from lakehouse.quality import gxe
from lakehouse.spec import Ingest, JsonFiles, Pipeline

pipeline = Pipeline(
    name="broken",
    tables=[
        Ingest(
            "bronze.broken_events",
            source=JsonFiles(schema="id STRING NOT NULL, x DOUBLE"),
            expectations=[gxe.ExpectColumnValuesToBeBetwen(column="x", max_value=1, action="drop")],
        )
    ],
)
"""


@pytest.fixture(autouse=True)
def fresh_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("COLUMNS", "200")
    settings.cache_clear()
    yield
    settings.cache_clear()


def test_quality_has_help_and_refuses_unknown_tables_before_starting_spark() -> None:
    help_ = runner.invoke(app, ["quality", "--help"])
    assert help_.exit_code == 0 and "GX checkpoints" in help_.output
    result = runner.invoke(app, ["quality", "iot", "--table", "silver.nope"])
    assert result.exit_code == 2 and "has no table 'silver.nope'" in result.output


def test_validate_names_the_table_and_expectation_of_a_wrong_gx_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "brokenpipes"
    (package / "broken").mkdir(parents=True)
    (package / "__init__.py").touch()
    (package / "broken" / "__init__.py").touch()
    (package / "broken" / "pipeline.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_PIPELINES_PACKAGE", "brokenpipes")
    settings.cache_clear()
    try:
        result = runner.invoke(app, ["validate", "broken"])
    finally:
        for name in [m for m in sys.modules if m.startswith("brokenpipes")]:
            del sys.modules[name]
    assert result.exit_code == 2, result.output
    assert "table 'bronze.broken_events' expectation: 'expect_column_values_to_be_betwen(x)'" in result.output
    assert "did you mean ExpectColumnValuesToBeBetween" in result.output
