"""Landing zone writes for generators and tests: whole files appear atomically.

Spark's file source ignores names starting with ``.``, so a file is written as a hidden
temporary and renamed into place: a stream never reads half a file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.spec import JsonFiles, Pipeline

if TYPE_CHECKING:
    from collections.abc import Iterable

    from lakehouse.lake import Lake


@dataclass(frozen=True)
class Landing:
    """Where a pipeline's generator drops source files and reference data (local lakes)."""

    lake: Lake
    pipeline: Pipeline

    def source_dir(self, table: str) -> Path:
        spec = self.pipeline.table(table)
        if not isinstance(spec.source, JsonFiles):
            raise ValueError(f"{table} has no file source to land files in")
        if not self.lake.root.startswith("/"):
            raise ValueError(f"generators write to a local lake, not {self.lake.root}")
        return Path(self.lake.landing(self.pipeline.name, spec.source.path or spec.short_name))

    def write_lines(self, table: str, name: str, lines: Iterable[str]) -> Path:
        """Write one landing file of JSON lines for ``table``'s source, atomically."""
        return atomic_write(self.source_dir(table) / name, "".join(f"{line}\n" for line in lines))

    def write_reference(self, lookup: str, text: str) -> Path:
        path = Path(self.lake.reference(self.pipeline.name, self.pipeline.lookup(lookup).file))
        return atomic_write(path, text)


def atomic_write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    data = text.encode() if isinstance(text, str) else text
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path
