"""The map is true: the package docstring and the README place every module of the library, and
every module the layer contract (pyproject.toml) names is on the map."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import lakehouse

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "include" / "lakehouse"


def top_level() -> set[str]:
    """The library's top-level modules and packages (``stream``, ``writes``, ...)."""
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return names | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


def exists(module: str) -> bool:
    path = PACKAGE.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def contracted() -> set[str]:
    """Every module the import-linter layers name, without the ``lakehouse.`` prefix."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    [layers] = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return {
        name.strip().removeprefix("lakehouse.")
        for row in layers["layers"]
        for name in re.split(r"[|:]", row)
        if name.strip().startswith("lakehouse.")
    }


def test_the_package_docstring_places_every_module() -> None:
    placed = set(re.findall(r"``([a-z_.]+)``", lakehouse.__doc__ or ""))
    packages = {name.split(".", 1)[0] for name in placed}  # ``quality.gate`` places ``quality``
    assert top_level() - packages == set(), "modules the map in lakehouse/__init__.py does not place"
    assert contracted() - placed == set(), "modules of the layer contract missing from the map"
    missing = {n for n in placed if n != "lakehouse" and not exists(n)}
    assert missing == set(), "the map names modules that do not exist"


def test_every_module_is_in_a_layer_of_the_contract() -> None:
    layered = {name.split(".", 1)[0] for name in contracted()}
    assert top_level() - layered == set(), "modules outside pyproject.toml's layers escape `make lint`"


def test_the_readme_places_every_top_level_module() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)(?:\.py|/)`", section))
    assert top_level() - named == set(), "README's 'Where things are' does not place these"
