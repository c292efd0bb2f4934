"""A flow's checkpoint read as Structured Streaming writes it (hand-written ``offsets/`` and
``commits/`` files): which upstream versions a committed batch had read to the end."""

from __future__ import annotations

import json
from pathlib import Path

from lakehouse.state.checkpoints import END_INDEX, Checkpoint

SILVER, OTHER = "silver-table-id", "another-table-id"


def write_batch(path: Path, batch: int, offsets: list[dict], *, committed: bool = True) -> None:
    header = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000 + batch, "conf": {}}
    (path / "offsets").mkdir(parents=True, exist_ok=True)
    (path / "offsets" / str(batch)).write_text(
        "\n".join(["v1", json.dumps(header), *map(json.dumps, offsets)])
    )
    if committed:
        (path / "commits").mkdir(parents=True, exist_ok=True)
        (path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def delta_offset(table_id: str, version: int, index: int) -> dict:
    return {"sourceVersion": 1, "reservoirId": table_id, "reservoirVersion": version, "index": index,
            "isStartingVersion": False}  # fmt: skip


def test_the_versions_a_given_batch_had_read_not_the_next_ones(spark, tmp_path: Path) -> None:
    """A check compares a table as batch N left it with its upstream as batch N had read it; the
    stream committing batch N + 1 meanwhile must not move the upstream ahead (a live check of
    gold.device_status failed on every device when it did)."""
    path = tmp_path / "checkpoint"
    write_batch(path, 0, [delta_offset(SILVER, 3, -1), delta_offset(OTHER, 5, END_INDEX)])
    write_batch(path, 1, [delta_offset(SILVER, 7, 2), delta_offset(OTHER, 5, END_INDEX)])
    write_batch(path, 2, [delta_offset(SILVER, 9, -1)], committed=False)  # planned, not committed
    checkpoint = Checkpoint(spark, str(path))
    ids = {"silver.device_events": SILVER, "gold.other": OTHER}

    assert checkpoint.last_committed() == 1
    # index -1: version 3 not started, read through 2; version 7 read up to file 2: through 6;
    # an index at END_INDEX: version 5 read to its end
    assert checkpoint.read_through(ids, 0) == {"silver.device_events": 2, "gold.other": 5}
    assert checkpoint.read_through(ids, 1) == {"silver.device_events": 6, "gold.other": 5}
    assert checkpoint.read_through(ids) == checkpoint.read_through(ids, 1)  # the last committed
    assert checkpoint.read_through({"gold.unread": "nobody-reads-it"}, 0) == {}
