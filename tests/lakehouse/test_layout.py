"""The tests mirror the package: every module of ``lakehouse`` has ``tests/lakehouse/<path>/
test_<module>.py``, or an entry below that says which test modules prove its logic instead (a
declaration tested through the pipelines it builds, a CLI through the commands that use it). A new
module without either fails here, and so does an entry whose test modules do not exist."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "include" / "lakehouse"
TESTS = REPO / "tests"

# module (dotted, under lakehouse.) -> the test modules (paths under tests/) that prove it
TESTED_ELSEWHERE: dict[str, tuple[str, ...]] = {
    # kinds of flow: each proved by the pipelines and runners that run it
    "flows.changes": ("lakehouse/writes/test_history.py", "pipelines/crm/test_pipeline.py"),
    "flows.ingest": ("lakehouse/sources/test_json_files.py", "lakehouse/flows/test_kinds.py"),
    "flows.scored": ("lakehouse/models/test_models.py", "lakehouse/flows/test_kinds.py"),
    "flows.transform": ("lakehouse/plan/test_flow.py", "pipelines/ads/test_streaming.py"),
    "flows.view": ("pipelines/crm/test_pipeline.py", "lakehouse/flows/test_kinds.py"),
    "run.publish": ("lakehouse/run/test_stream.py", "lakehouse/run/test_batch.py"),
    # the command line: one test module per group of commands
    "platform.airflow_sqlite": ("lakehouse/platform/test_services.py",),
    "cli.kit": ("lakehouse/cli/test_pipelines.py", "lakehouse/cli/test_operate.py"),
    # (the maintain command's arguments are checked by the DAG's test, its work by maintain's)
    "cli.maintain": ("lakehouse/orchestration/dags/test_maintenance.py", "lakehouse/run/test_maintenance.py"),
    "cli.models": ("lakehouse/models/test_models.py", "lakehouse/orchestration/dags/test_factory.py"),
    "cli.runs": ("lakehouse/cli/test_operate.py", "test_readme.py"),
    # the cockpit: its views and its Airflow plugin, in a real api-server and a browser
    "cockpit.app": ("lakehouse/cockpit/test_plugin.py", "lakehouse/platform/test_embedded.py"),
    "cockpit.metrics": ("lakehouse/cockpit/test_views.py",),
    "core.errors": ("lakehouse/spec/test_durations.py", "lakehouse/cli/test_pipelines.py"),
    # models: training, registry and scoring, end to end
    "models.scoring": ("lakehouse/models/test_models.py",),
    "models.training": ("lakehouse/models/test_models.py",),
    # monitoring: what the streams record, read back by the tests of runs and health
    "monitoring.progress": ("lakehouse/test_bad_input.py", "lakehouse/monitoring/test_health.py"),
    # orchestration: the DAG factory and its spark-submit tasks, under real Airflow
    "orchestration.dags.kit": ("lakehouse/orchestration/dags/test_factory.py",),
    "plan.changes": ("lakehouse/writes/test_history.py", "pipelines/crm/test_pipeline.py"),
    "plan.generators": ("pipelines/iot/test_generator.py", "pipelines/crm/test_generator.py"),
    "quality.report": ("lakehouse/quality/test_checks.py", "lakehouse/cockpit/test_plugin.py"),
    "quality.results": ("lakehouse/quality/test_checks.py", "lakehouse/quality/test_gate.py"),
    "serving.jvm": ("lakehouse/serving/test_security.py", "lakehouse/serving/test_server.py"),
    "slices": ("lakehouse/spec/test_modes.py", "lakehouse/run/test_batch.py"),
    # sources: each kind's reader has its module; these are what they share
    "sources.landing": ("lakehouse/sources/test_json_files.py", "lakehouse/sources/test_parquet_files.py"),
    "sources.protocol": ("lakehouse/sources/test_plugins.py",),
    # declarations: checked by the declaration tests, kind by kind and mode by mode
    "spec.kinds": ("lakehouse/spec/test_spec.py",),
    "spec.models": ("lakehouse/models/test_models.py",),
    "spec.pipeline": ("lakehouse/spec/test_spec.py",),
    "spec.sinks": ("lakehouse/flows/test_realtime.py",),
    "spec.table": ("lakehouse/spec/test_spec.py", "lakehouse/spec/test_modes.py"),
    **{
        f"spec.modes.{m}": ("lakehouse/spec/test_modes.py",)
        for m in ("aggregate", "append", "base", "recompute", "scd", "upsert")
    },
    "spec.sources.base": ("lakehouse/sources/test_plugins.py", "lakehouse/spec/test_spec.py"),
    "spec.sources.csv_files": ("lakehouse/sources/test_csv_files.py",),
    "spec.sources.delta_table": ("lakehouse/sources/test_delta_table.py",),
    "spec.sources.json_files": ("lakehouse/sources/test_json_files.py",),
    "spec.sources.kafka": ("lakehouse/sources/test_kafka.py",),
    "spec.sources.lookup": ("lakehouse/spec/test_spec.py", "pipelines/iot/test_transforms.py"),
    "spec.sources.parquet_files": ("lakehouse/sources/test_parquet_files.py",),
    "spec.sources.avro_files": ("lakehouse/sources/test_avro_files.py",),
    "state.storage": ("lakehouse/run/test_maintenance.py", "lakehouse/models/test_models.py"),
}


def modules() -> set[str]:
    return {
        ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    }


def mirrored(module: str) -> Path:
    *folders, name = module.split(".")
    return TESTS.joinpath("lakehouse", *folders, f"test_{name}.py")


def test_every_module_has_its_test_module_or_says_where_it_is_tested() -> None:
    untested = sorted(m for m in modules() if not mirrored(m).exists() and m not in TESTED_ELSEWHERE)
    assert untested == [], f"add tests/lakehouse/<path>/test_<module>.py for {untested} (or an entry above)"


def test_the_entries_are_true() -> None:
    stale = sorted(m for m in TESTED_ELSEWHERE if m not in modules() or mirrored(m).exists())
    assert stale == [], f"modules gone, or with a test module of their own now: {stale}"
    missing = sorted({t for tests in TESTED_ELSEWHERE.values() for t in tests if not (TESTS / t).exists()})
    assert missing == [], f"entries name test modules that do not exist: {missing}"
