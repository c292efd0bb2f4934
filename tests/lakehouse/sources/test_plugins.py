"""A source kind is one plugin: nothing outside the source packages branches on a source's type
(no ``isinstance(..., <source class>)``, no ``.kind ==`` on a source), and every declared kind
names a reader that implements the protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lakehouse
from lakehouse import spec
from lakehouse.sources import SourceReader, reader_for
from lakehouse.spec import (
    CsvFiles,
    DeltaTable,
    Ingest,
    JsonFiles,
    KafkaTopic,
    ParquetFiles,
    Source,
    SpecError,
)

ROOT = Path(lakehouse.__file__).parent
SOURCE_PACKAGES = ("sources", "spec/sources")
SOURCE_CLASSES = {
    name
    for name in spec.__all__
    if isinstance(getattr(spec, name), type) and issubclass(getattr(spec, name), Source)
}
KINDS = {"files", "kafka", "csv", "parquet", "delta"}


def branches_on_source_type(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            named = {n.id for n in ast.walk(node.args[-1]) if isinstance(n, ast.Name)}
            named |= {n.attr for n in ast.walk(node.args[-1]) if isinstance(n, ast.Attribute)}
            if named & SOURCE_CLASSES:
                found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            kinds = [p for p in parts if isinstance(p, ast.Attribute) and p.attr == "kind"]
            constants = {p.value for p in parts if isinstance(p, ast.Constant)}
            if kinds and (constants & KINDS or any("source" in ast.unparse(k.value) for k in kinds)):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_checker_sees_both_kinds_of_branch() -> None:
    tree = ast.parse(
        "isinstance(table.source, JsonFiles)\nif source.kind == 'kafka': pass\nx.kind == 'stream'"
    )
    assert [line for line, _ in branches_on_source_type(tree)] == [1, 2]


def test_nothing_outside_the_source_packages_branches_on_a_source_type() -> None:
    assert {"JsonFiles", "KafkaTopic", "CsvFiles", "ParquetFiles", "DeltaTable", "Source"} <= SOURCE_CLASSES
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted(ROOT.rglob("*.py"))
        if not path.relative_to(ROOT).as_posix().startswith(SOURCE_PACKAGES)
        for line, text in branches_on_source_type(ast.parse(path.read_text()))
    ]
    assert found == []  # 10 before source kinds became plugins


@pytest.mark.parametrize(
    "source",
    [
        JsonFiles(schema="a INT"),
        KafkaTopic(schema="a INT", topics=["t"]),
        CsvFiles(schema="a INT"),
        ParquetFiles(schema="a INT"),
        DeltaTable(schema="a INT", path="/somewhere"),
    ],
)
def test_every_kind_names_a_reader_of_its_own(source: Source) -> None:
    reader = reader_for(source)
    assert isinstance(reader, SourceReader) and reader.source is source
    assert type(reader).__module__ == f"lakehouse.sources.{type(source).__module__.rsplit('.', 1)[1]}"


def test_a_kind_of_your_own_plugs_in_by_its_reader_string() -> None:
    class Rows(Source):  # a declaration outside the platform, its reader named by string
        kind = "rows"
        reader = "lakehouse.sources.protocol:SourceReader"
        schema = "a INT"

    table = Ingest("bronze.mine", source=Rows())
    assert table.source.label("p", "mine") == "rows" and isinstance(reader_for(table.source), SourceReader)


def test_a_missing_reader_is_named() -> None:
    class Broken(Source):
        kind = "broken"
        reader = "lakehouse.sources.nowhere:Reader"
        schema = "a INT"

    with pytest.raises(ImportError, match=r"lakehouse.sources.nowhere:Reader"):
        reader_for(Broken())


def test_a_table_source_must_be_a_source_declaration() -> None:
    with pytest.raises(SpecError, match="is not a source declaration"):
        Ingest("bronze.x", source="landing/x")  # type: ignore[arg-type]


def test_the_cockpit_labels_each_kind_by_where_it_reads() -> None:
    assert JsonFiles(schema="a INT").label("shop", "orders") == "landing/shop/orders"
    assert CsvFiles(schema="a INT", path="exports").label("shop", "orders") == "landing/shop/exports"
    assert KafkaTopic(schema="a INT", topics=["o1", "o2"]).label("shop", "orders") == "o1, o2"
    assert DeltaTable(schema="a INT", table="partner.orders").label("shop", "orders") == "partner.orders"
