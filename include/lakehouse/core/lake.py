"""Where things live under the lake root: the one place that builds lake paths.

```
<root>/landing/<pipeline>/<source>/     files dropped by producers (bronze file sources)
<root>/reference/<pipeline>/            static reference data (lookups)
<root>/tables/<layer>/<table>/          Delta tables (bronze, silver, gold, ops)
<root>/checkpoints/<pipeline>/<table>/  one streaming checkpoint per flow, never shared
<root>/control/<pipeline>/              driver leases, stop requests, driver logs (see control.py)
<root>/scratch/<pipeline>/<table>/<run>/ throwaway work of one run (stateful backfill replays)
<root>/archive/<UTC time>/...          what a reset moved aside: the same layout, a lake of its own
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakehouse.core.config import Settings


@dataclass(frozen=True)
class Lake:
    root: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Lake:
        return cls(settings.root)

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def table(self, name: str) -> str:
        """Path of a Delta table named ``layer.table``."""
        layer, table = name.split(".", 1)
        return self._join("tables", layer, table)

    def checkpoint(self, pipeline: str, table: str) -> str:
        return self._join("checkpoints", pipeline, table)

    def scratch(self, pipeline: str, table: str, run: str) -> str:
        return self._join("scratch", pipeline, table, run)

    def landing(self, pipeline: str, source: str) -> str:
        return self._join("landing", pipeline, source)

    def reference(self, pipeline: str, name: str) -> str:
        return self._join("reference", pipeline, name)

    def archive(self, stamp: str) -> Lake:
        """Where a reset at ``stamp`` moves tables and checkpoints aside: a lake with the same
        layout, outside this one's tables (no catalog or query sees them)."""
        return Lake(self._join("archive", stamp))

    @property
    def tables_root(self) -> str:
        return self._join("tables")
