"""Spark-free figures about the lake for ``lakehouse status``, monitors and DAG tasks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.monitoring.ops_tables import exists, rs_table

if TYPE_CHECKING:
    from lakehouse.core.lake import Lake


CODE = "lakehouse_code"  # a commit's userMetadata key: the code version that wrote it
CODE_HISTORY = 1000  # commits ``code_versions`` looks at, newest first


def code_of(user_metadata: str | None) -> str | None:
    """The code version (``lakehouse.plan.compatibility.code_version``) a commit's
    ``userMetadata`` records; ``None``: none."""
    if not user_metadata or CODE not in user_metadata:
        return None
    try:
        return str(json.loads(user_metadata)[CODE])
    except (ValueError, KeyError, TypeError):
        return None


def code_versions(commits: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """Of a table's commits (delta-rs history): each code version that wrote some, with the
    first and last table version it wrote; the latest code first."""
    spans: dict[str, tuple[int, int]] = {}
    for commit in commits:
        if code := code_of(commit.get("userMetadata")):
            first, last = spans.get(code, (commit["version"], commit["version"]))
            spans[code] = (min(first, commit["version"]), max(last, commit["version"]))
    return sorted(((c, a, b) for c, (a, b) in spans.items()), key=lambda span: -span[2])


@dataclass(frozen=True)
class TableStats:
    name: str
    version: int | None
    rows: int | None
    files: int | None
    size_bytes: int | None
    last_update: datetime | None
    last_operation: str | None

    @property
    def exists(self) -> bool:
        return self.version is not None


def table_stats(lake: Lake, name: str) -> TableStats:
    """Version, row and file counts from the Delta log (no data files are read)."""

    path = lake.table(name)
    if not exists(path):
        return TableStats(name, None, None, None, None, None, None)
    table = rs_table(path)
    actions = pa.table(table.get_add_actions(flatten=True))
    last = table.history(1)[0]
    return TableStats(
        name=name,
        version=table.version(),
        rows=int(pc.sum(actions["num_records"]).as_py() or 0),
        files=actions.num_rows,
        size_bytes=int(pc.sum(actions["size_bytes"]).as_py() or 0),
        last_update=datetime.fromtimestamp(last["timestamp"] / 1000, tz=UTC),
        last_operation=last.get("operation"),
    )
