"""Write modes are plugins: nothing outside the mode packages branches on a mode's type.

A mode's semantics live in its declaration module (``lakehouse/spec/modes/``) and its writer
module (``lakehouse/writes/``); everywhere else asks the mode (``table.write``) through its
protocol. This test parses every module of the library and lists the branches that would make
a new mode a change in many files: ``isinstance(..., <mode class>)`` and comparisons of a mode's
``kind`` with a string.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lakehouse.spec import Aggregate, Append, ChangeMode, Recompute, Scd1, Scd2, Upsert, WriteMode

LIBRARY = Path(__file__).resolve().parents[3] / "include" / "lakehouse"
MODE_PACKAGES = (LIBRARY / "spec" / "modes", LIBRARY / "writes")
MODE_CLASSES = {cls.__name__ for cls in (Aggregate, Append, ChangeMode, Recompute, Scd1, Scd2, Upsert)}
# The names a mode goes by: ``table.write.kind``, ``write.kind``, ``mode.kind``.
MODE_HOLDERS = {"write", "mode"}


def _names(node: ast.expr) -> set[str]:
    """The class names an ``isinstance`` second argument names (a name, ``spec.X``, a tuple)."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _is_mode_kind(node: ast.expr) -> bool:
    if not (isinstance(node, ast.Attribute) and node.attr == "kind"):
        return False
    holder = node.value
    return (isinstance(holder, ast.Attribute) and holder.attr in MODE_HOLDERS) or (
        isinstance(holder, ast.Name) and holder.id in MODE_HOLDERS
    )


def mode_branches(source: str) -> list[int]:
    """Lines of ``source`` that branch on a write mode's type."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and _names(node.args[1]) & MODE_CLASSES
        ) or (
            isinstance(node, ast.Compare)
            and any(_is_mode_kind(side) for side in (node.left, *node.comparators))
        ):
            found.append(node.lineno)
    return found


def test_the_detector_sees_both_kinds_of_branch() -> None:
    source = (
        "if isinstance(table.write, Aggregate): pass\n"
        "if isinstance(mode, (spec.Scd2, int)): pass\n"
        "if table.write.kind == 'upsert': pass\n"
        "if origin.kind == 'stream': pass\n"  # not a write mode
        "if isinstance(table.write, WriteMode): pass\n"  # any mode: not a branch on one
    )
    assert mode_branches(source) == [1, 2, 3]


def test_no_module_outside_the_mode_packages_branches_on_a_mode() -> None:
    assert WriteMode.__name__ not in MODE_CLASSES
    branches = {
        f"{path.relative_to(LIBRARY)}:{line}"
        for path in LIBRARY.rglob("*.py")
        if not any(path.is_relative_to(package) for package in MODE_PACKAGES)
        for line in mode_branches(path.read_text())
    }
    assert not branches, f"branches on a write mode's type outside its modules: {sorted(branches)}"
