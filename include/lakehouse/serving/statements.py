"""What both SQL engines (``lakehouse.serving.engine``) speak: statements in, a :class:`Result`
or a :class:`QueryError` with the engine's own message out. Spark-free."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import sqlparse

from lakehouse.core.errors import OperationFailed


class QueryError(OperationFailed):
    """The engine rejected a statement; the message is the engine's."""


@dataclass(frozen=True)
class Result:
    columns: list[str]
    numeric: list[bool]
    rows: list[tuple[Any, ...]]
    truncated: bool = False

    @property
    def has_rows(self) -> bool:
        """False for statements that return no result set (``CREATE``, ``SET``, ...)."""
        return bool(self.columns)


class Engine(Protocol):
    def execute(self, statement: str, max_rows: int | None = None) -> Result: ...

    def close(self) -> None: ...


def split_statements(text: str) -> list[str]:
    """``"SELECT 1; SELECT ';'"`` -> both statements, without comments or trailing semicolons."""
    statements = []
    for raw in sqlparse.split(text):
        statement = sqlparse.format(raw, strip_comments=True).strip().rstrip(";").strip()
        if statement:
            statements.append(statement)
    return statements


_TOO_LARGE = re.compile(
    r"Total size of serialized results of \d+ tasks \(([^)]*)\) is bigger than spark\.driver\.maxResultSize \(([^)]*)\)"
)


def engine_message(text: str) -> str:
    """The engine's message without the query plan or Java class names Spark appends."""
    if too_large := _TOO_LARGE.search(text):
        return (
            f"the result is larger than the {too_large[2]} a statement may return ({too_large[1]} "
            "before the statement was stopped; LAKEHOUSE_SQL_MAX_RESULT_MB): aggregate, filter or add a LIMIT"
        )
    text = re.sub(r"^Error running query: ", "", text.strip())
    text = re.sub(r"^(\[[A-Z_.]+\] )?(org\.apache|java|io\.delta)[\w.$]+: ", "", text)
    text = text.split(";\n")[0]  # a check rule's refusal comes with the analyzed plan after it
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if "SQLSTATE:" in line:  # the plan or JVM frames follow
            return "\n".join(lines[: number + 1]).rstrip(";").strip()
    return "\n".join(line for line in lines if not line.lstrip().startswith("at ")).strip()
