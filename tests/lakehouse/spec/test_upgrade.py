"""Declarations written for release 0.1 load in this one: its README example and its reference
pipelines, kept as they were (``readme_0_1/``, ``release_0_1/``: from git, the README and
``jobs/pipelines/*/pipeline.py`` of the commit before 5a92bf9, the example's transforms too; the
example apart, its ``silver.orders`` being crm's too), declare tables with ``Table(...)``; each loads as the
kind its constructor of today declares, with a deprecation warning naming that constructor."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakehouse import registry

HERE = Path(__file__).resolve().parent
OLD = ("release_0_1", "readme_0_1")
# the README example's tables, by the constructor this release's README declares them with
README_KINDS = {
    "bronze.orders": "Ingest",
    "silver.orders": "StreamingTable",
    "gold.hourly_revenue": "StreamingTable",
}
CONSTRUCTORS = {
    "ingest": "Ingest",
    "streaming": "StreamingTable",
    "changes": "ApplyChanges",
    "view": "MaterializedView",
}


@pytest.fixture
def old_release(monkeypatch: pytest.MonkeyPatch) -> Iterator[registry.Discovery]:
    monkeypatch.syspath_prepend(str(HERE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # recorded by discovery, checked below
        release, readme = (registry.load(package) for package in OLD)
        yield registry.Discovery(
            release.pipelines | readme.pipelines,
            release.failures | readme.failures,
            release.deprecations | readme.deprecations,
        )
    for module in [m for m in sys.modules if m.split(".")[0] in OLD]:
        del sys.modules[module]


def test_the_previous_release_declarations_load_with_a_warning_naming_each_constructor(
    old_release: registry.Discovery,
) -> None:
    assert old_release.failures == {}
    assert sorted(old_release.pipelines) == ["ads", "crm", "iot", "orders"]
    current = registry.discover("pipelines")  # declared by kind since 0.2: the oracle of each kind
    for name, pipeline in old_release.pipelines.items():
        expected = (
            README_KINDS
            if name == "orders"
            else {
                t.name: CONSTRUCTORS[t.kind] for t in current[name].tables if t.name in pipeline.table_names
            }
        )
        assert set(expected) == set(pipeline.table_names), name
        assert {t.name: CONSTRUCTORS[t.kind] for t in pipeline.tables} == expected
        warned = old_release.deprecations[name]
        assert len(warned) == len(pipeline.tables), warned
        for table, constructor in expected.items():
            [line] = [w for w in warned if f"table {table!r}:" in w]
            assert re.search(rf"_0_1/{name}/pipeline.py:\d+: .*declare it with {constructor}\(", line), line


def test_validate_prints_where_each_deprecated_form_is_and_what_to_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from lakehouse.cli import app
    from lakehouse.core.config import settings

    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("LAKEHOUSE_PIPELINES_PACKAGE", "readme_0_1")
    settings.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            result = CliRunner().invoke(app, ["validate", "orders"])
    finally:
        settings.cache_clear()
        for module in [m for m in sys.modules if m.split(".")[0] == "readme_0_1"]:
            del sys.modules[module]
    assert result.exit_code == 0 and "pipeline orders: OK" in result.output, result.output
    text = " ".join(result.output.split())
    for table, constructor in README_KINDS.items():
        assert re.search(
            rf"deprecated: \S+readme_0_1/orders/pipeline.py:\d+: table '{re.escape(table)}': Table\(\.\.\.\) "
            rf"is deprecated since lakehouse 0.2: declare it with {constructor}\(",
            text,
        ), text
