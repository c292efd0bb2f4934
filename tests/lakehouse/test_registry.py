"""Discovery finds pipelines by convention; references resolve; signatures are checked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lakehouse import registry
from lakehouse.spec import SpecError


def write_package(root: Path, name: str, files: dict[str, str]) -> str:
    package = root / name
    for relative, text in files.items():
        target = package / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (package / "__init__.py").touch()
    return name


PIPELINE = """
from lakehouse.spec import Ingest, JsonFiles, Pipeline, StreamingTable
pipeline = Pipeline(name={name!r}, tables=[
    Ingest({bronze!r}, source=JsonFiles(schema="id STRING NOT NULL, ts TIMESTAMP"), event_time="ts"),
    StreamingTable({silver!r}, upstreams=[{bronze!r}], transform="transforms:clean", event_time="ts"),
])
"""


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for module in [m for m in sys.modules if m.startswith(("pk_", "dupes"))]:
        del sys.modules[module]


def test_iot_is_discovered_and_its_transforms_resolve() -> None:
    loaded = registry.load("pipelines")
    assert loaded.failures == {}, "a reference pipeline no longer loads: the DAGs would leave it out"
    found = registry.discover("pipelines")
    assert "iot" in found
    iot = found["iot"]
    assert iot.package == "pipelines.iot"
    registry.check_transforms(iot)
    assert registry.resolve(iot, "transforms:clean_events").__name__ == "clean_events"


def test_adding_a_directory_adds_a_pipeline(packages: Path) -> None:
    write_package(
        packages,
        "pk_one",
        {
            "alpha/__init__.py": "",
            "alpha/pipeline.py": PIPELINE.format(name="alpha", bronze="bronze.a", silver="silver.a"),
            "alpha/transforms.py": "def clean(df):\n    return df\n",
            "helpers/__init__.py": "",  # a package without pipeline.py is ignored
        },
    )
    found = registry.discover("pk_one")
    assert list(found) == ["alpha"]
    registry.check_transforms(found["alpha"])


def test_transform_signature_must_match_inputs(packages: Path) -> None:
    write_package(
        packages,
        "pk_sig",
        {
            "beta/__init__.py": "",
            "beta/pipeline.py": PIPELINE.format(name="beta", bronze="bronze.b", silver="silver.b"),
            "beta/transforms.py": "def clean(df, devices):\n    return df\n",
        },
    )
    with pytest.raises(SpecError, match=r"must accept 1 positional argument\(s\) \(bronze.b\)"):
        registry.check_transforms(registry.get("pk_sig", "beta"))


def test_missing_transform_function_is_named(packages: Path) -> None:
    write_package(
        packages,
        "pk_missing",
        {
            "gamma/__init__.py": "",
            "gamma/pipeline.py": PIPELINE.format(name="gamma", bronze="bronze.g", silver="silver.g"),
            "gamma/transforms.py": "def other(df):\n    return df\n",
        },
    )
    with pytest.raises(SpecError, match=r"pk_missing.gamma.transforms has no function 'clean'"):
        registry.check_transforms(registry.get("pk_missing", "gamma"))


def test_table_names_are_global_across_pipelines(packages: Path) -> None:
    files = {}
    for name in ("one", "two"):
        files[f"{name}/__init__.py"] = ""
        files[f"{name}/pipeline.py"] = PIPELINE.format(
            name=name, bronze="bronze.same", silver=f"silver.{name}"
        )
    write_package(packages, "dupes", files)
    found = registry.load("dupes")
    assert list(found.pipelines) == ["one"], "the first (in name order) keeps the name"
    assert "'bronze.same' is declared by pipelines 'one' and 'two'" in found.failures["two"].message
    with pytest.raises(SpecError, match=r"pipeline 'two' cannot be loaded from .*dupes/two/pipeline.py"):
        registry.get("dupes", "two")


def test_unknown_package_and_pipeline() -> None:
    with pytest.raises(SpecError, match=r"pipelines package 'nope_pkg' cannot be imported"):
        registry.discover("nope_pkg")
    with pytest.raises(SpecError, match=r"no pipeline named 'nope'.*known: .*iot"):
        registry.get("pipelines", "nope")
