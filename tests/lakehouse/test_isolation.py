"""One pipeline's mistake is its own: beside a healthy pipeline, one that fails to import (a syntax
error, a ``SpecError``, a module it imports raising), one whose transform module raises at import
and one whose transform raises when its flow is planned each break only themselves: discovery,
the DAG folder (an Airflow import error naming each, in a file of its own), ``lakehouse
validate``, the cockpit's overview, and a run of the healthy pipeline."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lakehouse
from lakehouse import registry
from lakehouse.cli import app
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "isopipes"


def declaration(name: str, watermark: str = "10 minutes", head: str = "") -> str:
    return f"""{head}
from lakehouse.spec import Ingest, JsonFiles, Pipeline, StreamingTable
pipeline = Pipeline(name={name!r}, tables=[
    Ingest("bronze.{name}_events", source=JsonFiles(schema="id STRING NOT NULL, ts TIMESTAMP"), event_time="ts"),
    StreamingTable("silver.{name}_events", upstreams=["bronze.{name}_events"], transform="transforms:clean",
                   event_time="ts", watermark={watermark!r}),
])
"""


CLEAN = "def clean(df):\n    return df.where('id IS NOT NULL')\n"
PIPELINES: dict[str, dict[str, str]] = {
    "healthy": {"pipeline.py": declaration("healthy"), "transforms.py": CLEAN},
    # fail to load: their DAGs are left out, each named in the import error
    "syntax": {"pipeline.py": declaration("syntax").replace("tables=[", "tables=[[", 1)},
    "spec": {"pipeline.py": declaration("spec", watermark="soon"), "transforms.py": CLEAN},
    "helper": {
        "pipeline.py": declaration("helper", head="from isopipes.helper import constants  # noqa"),
        "constants.py": "raise RuntimeError('LEGACY_BUCKET is not set')\n",
        "transforms.py": CLEAN,
    },
    # load, their DAGs are built, their own runs fail
    "imports": {"pipeline.py": declaration("imports"), "transforms.py": "import no_such_library\n" + CLEAN},
    "plans": {
        "pipeline.py": declaration("plans"),
        "transforms.py": "def clean(df):\n    raise ValueError('column amount_cents is gone')\n",
    },
}
BROKEN = {  # what each load failure says, beside its file and the command that checks it
    "syntax": r"SyntaxError: .*pipeline.py, line 7\)",
    "spec": r"SpecError: .*watermark.*'soon'",
    "helper": r"RuntimeError: LEGACY_BUCKET is not set",
}


@pytest.fixture
def pipelines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The six pipelines in a package of their own, which the settings point at."""
    root = tmp_path / PACKAGE
    for name, files in PIPELINES.items():
        for file, text in {"__init__.py": "", **files}.items():
            (root / name).mkdir(parents=True, exist_ok=True)
            (root / name / file).write_text(text)
    (root / "__init__.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_PIPELINES_PACKAGE", PACKAGE)
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    settings.cache_clear()
    yield root
    settings.cache_clear()
    for module in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
        del sys.modules[module]


def check_failure_text(text: str, name: str, root: Path) -> None:
    assert re.search(
        rf"pipeline '{name}' cannot be loaded from {re.escape(str(root / name / 'pipeline.py'))}: "
        rf"{BROKEN[name]}.*`lakehouse validate {name}`",
        text,
        re.DOTALL,
    ), text


def test_discovery_loads_every_pipeline_but_the_broken_ones(pipelines: Path) -> None:
    found = registry.load(PACKAGE)
    assert sorted(found.pipelines) == ["healthy", "imports", "plans"]
    assert sorted(found.failures) == sorted(BROKEN)
    for name, failure in found.failures.items():
        check_failure_text(failure.message, name, pipelines)
        with pytest.raises(lakehouse.spec.SpecError, match=re.escape(failure.message)):
            registry.get(PACKAGE, name)
    assert registry.get(PACKAGE, "healthy").table_names == ("bronze.healthy_events", "silver.healthy_events")


@pytest.mark.slow  # Airflow's import runs `file` on the interpreter: a process of its own
def test_the_dag_folder_builds_the_healthy_dags_and_names_each_broken_pipeline(pipelines: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    [(file, error)] = bag.import_errors.items()  # one file: the one that declares no DAG
    assert Path(file).name == "lakehouse_pipeline_errors.py", bag.import_errors
    assert error.count("cannot be loaded from") == len(BROKEN)
    for name in BROKEN:
        check_failure_text(error, name, pipelines)
    prefixes = {dag_id.split("_")[0] for dag_id in bag.dag_ids}
    assert prefixes == {"healthy", "imports", "plans", "lakehouse"}, bag.dag_ids
    assert {"healthy_stream_deploy", "healthy_stream_monitor", "healthy_backfill"} <= set(bag.dag_ids)
    deploy = bag.dags["healthy_stream_deploy"]
    assert Path(deploy.fileloc).name == "lakehouse_pipelines.py", "apart from the import error's file"


def test_validate_checks_each_pipeline_on_its_own(pipelines: Path) -> None:
    runner = CliRunner()
    healthy = runner.invoke(app, ["validate", "healthy"])
    assert healthy.exit_code == 0 and "pipeline healthy: OK" in healthy.output, healthy.output
    for name in BROKEN:
        result = runner.invoke(app, ["validate", name])
        assert result.exit_code == 2
        check_failure_text(" ".join(result.output.split()), name, pipelines)
    status = runner.invoke(app, ["status", "healthy"])  # Spark-free, as run/backfill/plan load it
    assert status.exit_code == 0 and "healthy: tables under" in " ".join(status.output.split()), status.output
    broken = runner.invoke(app, ["status", "spec"])
    assert broken.exit_code == 2
    check_failure_text(" ".join(broken.output.split()), "spec", pipelines)
    every = runner.invoke(app, ["validate"])
    assert every.exit_code == 2
    text = " ".join(every.output.split())
    assert "pipeline healthy: OK" in text and "pipeline plans: OK" in text  # its transform resolves
    assert (
        "pipeline 'imports': reference 'transforms:clean': isopipes.imports.transforms cannot be "
        "imported: ModuleNotFoundError: No module named 'no_such_library'"
    ) in text
    for name in BROKEN:
        check_failure_text(text, name, pipelines)


def test_the_overview_shows_a_card_per_broken_pipeline(pipelines: Path) -> None:
    from lakehouse.cockpit import metrics, views

    found = registry.load(PACKAGE)
    answer = views.overview(settings(), found.pipelines, failures=found.failures.values())
    assert [p["name"] for p in answer["pipelines"]] == ["healthy", "imports", "plans"]
    assert {b["name"]: b["message"] for b in answer["broken"]} == {
        name: failure.message for name, failure in found.failures.items()
    }  # the text of the Airflow import error
    exposed = metrics.exposition(answer, {}).decode()
    assert sorted(
        re.findall(r'^lakehouse_pipeline_not_loaded\{pipeline="(\w+)"\} 1\.0$', exposed, re.M)
    ) == sorted(BROKEN)
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert answer["version"] == re.search(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)[1]


def test_a_transform_failing_when_planned_fails_its_flow_only(pipelines: Path, spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from lakehouse import flows as flow

    lake = Lake(str(tmp_path / "lake"))
    found = registry.load(PACKAGE).pipelines
    rows = spark.sql("SELECT 'a' AS id, TIMESTAMP'2026-03-01 08:00:00' AS ts UNION ALL SELECT NULL, NULL")
    for name in ("healthy", "plans"):  # what their bronze flows wrote
        bronze = rows.withColumn("_parse_error", F.lit(None).cast("string"))
        bronze.write.format("delta").save(lake.table(f"bronze.{name}_events"))
    with pytest.raises(ValueError, match="column amount_cents is gone"):
        flow.build(spark, lake, found["plans"], found["plans"].table("silver.plans_events"), streaming=False)
    healthy = found["healthy"].table("silver.healthy_events")
    written = flow.build(spark, lake, found["healthy"], healthy, streaming=False).collect()
    assert [(r.id, r.ts) for r in written] == [("a", datetime(2026, 3, 1, 8))]  # its clean kept the id
