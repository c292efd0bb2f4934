"""What a flow's streaming checkpoint says it has done: the input it consumed (its sources'
offsets: each source kind reads its own, see ``lakehouse.sources``) and how far its watermark
has closed event time.

Backfills read a flow's inputs *as its stream consumed them*, so that the stream, resuming,
processes exactly the rest; maintenance keeps the files a lagging stream still has to read.
The formats are Structured Streaming's own metadata logs (``offsets/``, ``commits/``,
``sources/<n>/``), one JSON document per line after a version header.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse.state import storage

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

# A Delta source offset that read its version to the end carries an index near Long.MAX_VALUE.
END_INDEX = 2**62


@dataclass(frozen=True)
class Checkpoint:
    """One flow's checkpoint directory (``Lake.checkpoint(pipeline, table)``)."""

    spark: SparkSession
    path: str

    def _batches(self, log: str) -> list[int]:
        return sorted(int(name) for name in storage.names(self.spark, f"{self.path}/{log}") if name.isdigit())

    def documents(self, file: str) -> list[dict[str, Any]]:
        """The JSON documents of one of the checkpoint's log files (after its version header)."""
        text = storage.read_text(self.spark, file) or ""
        return [json.loads(line) for line in text.splitlines()[1:] if line.startswith("{")]

    @property
    def exists(self) -> bool:
        """Whether the flow ever committed a micro-batch."""
        return bool(self._batches("commits"))

    def last_committed(self) -> int | None:
        batches = self._batches("commits")
        return batches[-1] if batches else None

    def committed_offsets(self, batch: int | None = None) -> list[dict[str, Any]]:
        """The source offsets of committed batch ``batch`` (default: the last), one per source
        (in plan order)."""
        batch = self.last_committed() if batch is None else batch
        if batch is None:
            return []
        return self.documents(f"{self.path}/offsets/{batch}")[1:]  # the first is the batch metadata

    def watermark(self) -> datetime | None:
        """The event time the flow's watermark has passed: windows and timers before it are final."""
        batch = self.last_committed()
        if batch is None:
            return None
        documents = self.documents(f"{self.path}/commits/{batch}")
        millis = documents[0].get("nextBatchWatermarkMs") if documents else None
        return datetime.fromtimestamp(millis / 1000, tz=UTC) if millis else None

    def read_through(self, table_ids: Mapping[str, str], batch: int | None = None) -> dict[str, int]:
        """Of the Delta tables named in ``table_ids`` (name -> Delta table id) the flow reads: the
        last version committed batch ``batch`` (default: the last) had read to the end."""
        by_id = {table_id: name for name, table_id in table_ids.items()}
        versions = {}
        for offset in self.committed_offsets(batch):
            name = by_id.get(offset.get("reservoirId"))
            if name is not None and (unread := self.next_version(offset)) > 0:
                versions[name] = unread - 1
        return versions

    @staticmethod
    def next_version(offset: dict[str, Any]) -> int:
        """Of a Delta source offset: the first table version the flow has not read to its end."""
        version, index = int(offset["reservoirVersion"]), int(offset.get("index", -1))
        return version + 1 if index >= END_INDEX else version
