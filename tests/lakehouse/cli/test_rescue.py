"""``lakehouse rescue`` from the command line, as an operator runs it: a field bronze kept in
``_rescued_data`` before the source declared it is filled for the old rows, from bronze alone,
and the command says how many; run again, it says there is nothing to fill. Oracle: the lines as
the test wrote them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.run.stream import StreamRunner
from lakehouse.spec import Ingest, JsonFiles, Pipeline
from lakehouse.spec.sources import RESCUED

pytestmark = pytest.mark.slow  # a Spark scenario through the command (its table printed)

BEFORE = "id STRING NOT NULL, reading DOUBLE"
DECLARED = """
from lakehouse.spec import Ingest, JsonFiles, Pipeline

pipeline = Pipeline(
    name="rescued",
    tables=[Ingest("bronze.readings", source=JsonFiles(schema="id STRING NOT NULL, reading DOUBLE, site STRING"))],
)
"""
LINES = [
    {"id": "r1", "reading": 1.0, "site": "north"},
    {"id": "r2", "reading": 2.0},
    {"id": "r3", "reading": 3.0, "site": "south", "note": "kept"},
]


def test_the_rescue_command_fills_a_declared_field_for_the_rows_that_came_before(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "lake"
    lake = Lake(str(root))
    before = Pipeline("rescued", tables=[Ingest("bronze.readings", source=JsonFiles(schema=BEFORE))])
    Landing(lake, before).write_lines("bronze.readings", "a.json", [json.dumps(r) for r in LINES])
    with StreamRunner(spark, lake, before) as runner:  # the stream ran before `site` was declared
        runner.run_incremental(before.tables)
    package = tmp_path / "rescuepipes"
    (package / "rescued").mkdir(parents=True)
    (package / "__init__.py").touch()
    (package / "rescued" / "__init__.py").touch()
    (package / "rescued" / "pipeline.py").write_text(DECLARED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_PIPELINES_PACKAGE", "rescuepipes")
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(root))
    monkeypatch.setenv("COLUMNS", "200")
    settings.cache_clear()
    try:
        first = CliRunner().invoke(app, ["rescue", "rescued", "--flow", "bronze.readings"])
        again = CliRunner().invoke(app, ["rescue", "rescued", "--flow", "bronze.readings"])
    finally:
        settings.cache_clear()
        for name in [m for m in sys.modules if m.startswith("rescuepipes")]:
            del sys.modules[name]
    assert first.exit_code == 0, first.output
    assert "rescued: rescue of bronze.readings" in first.output
    filled = re.search(r"site\W+(\d+)\W+(\d+)", first.output)
    assert filled and filled.groups() == ("2", "0"), first.output  # r1 and r3 had a site
    assert again.exit_code == 0 and "nothing to fill" in again.output, again.output
    rows = spark.read.format("delta").load(lake.table("bronze.readings")).collect()
    got = {r["id"]: (r["site"], json.loads(r[RESCUED]) if r[RESCUED] else None) for r in rows}
    assert got == {"r1": ("north", None), "r2": (None, None), "r3": ("south", {"note": "kept"})}
