"""``Append()``: insert every row once; ``Append(keys=[...])``: once per key."""

from __future__ import annotations

from typing import ClassVar

from attrs import field, frozen

from lakehouse.spec.modes.base import Declared, WriteMode
from lakehouse.spec.sources import names


@frozen
class Append(WriteMode):
    """Insert every row once. With ``keys``, one row per key: deduplicated within the
    watermark in streams (exactly, in backfills); a repeat later than the watermark is dropped as
    late, so appending never scans the table's history."""

    kind: ClassVar[str] = "append"
    writer: ClassVar[str] = "lakehouse.writes.append:AppendWriter"
    keys: tuple[str, ...] = field(default=(), converter=names)

    def describe(self) -> str:
        return f"append, one row per {', '.join(self.keys)}" if self.keys else "append"

    @property
    def keyed_insert(self) -> bool:
        return bool(self.keys)

    def dedupes(self, table: Declared) -> bool:
        """Deduplicated on the keys (within the watermark in streams); a scored table's keys only
        name its rows (its transform runs per batch, without state), a bronze table's too."""
        return bool(self.keys) and not table.sources and table.model is None

    def check(self, table: Declared) -> None:
        if self.keys and table.state is not None:
            raise table.fail(
                "state= with Append cannot declare keys: the platform would deduplicate after the "
                "transform's own state; deduplicate in the transform or use Upsert(...)"
            )
        if self.dedupes(table):
            for up in table.upstreams:
                if not (up.watermark or table.watermark):
                    raise table.fail(
                        f"deduplicates on keys {list(self.keys)}, which needs a watermark to bound "
                        "its state; set watermark='10 minutes' or similar"
                    )
