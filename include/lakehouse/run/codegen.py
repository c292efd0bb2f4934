"""Small micro-batches run interpreted: generating Java for a plan costs more than it saves
when a batch holds a few hundred rows.

Spark compiles a plan's generated code (Janino) whenever the code differs from what it cached,
and a micro-batch's code differs every batch: the batch's timestamp, its watermark and Delta's
own versions are literals in it. Measured on the IoT pipeline deployed in one driver
(``bench/freshness.py``'s setup, 2 cores, 10 events/s): ~29 compilations per micro-batch,
57 CPU-seconds of compilation in 142 s of wall time; interpreted, 33 compilations in all and
gold's batches 5.5 s instead of 6.8 s. At volume generated code wins by far (2M YSB lines
through the streams: 37 s with it, 71 s without), so the choice follows the batches' size.

A streaming query plans each batch with its own copy of the session (``foreachBatch`` writes
run in it too): :class:`CodegenBySize` switches that copy, from what the previous batch read.
Only for flows whose write reads the batch's own rows (``ModeWriter.batch_sized``: appends,
windowed aggregates): an upsert's MERGE joins its whole table and a recomputed table rereads its
upstreams, so a few input rows can mean millions processed, and those keep generated code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Interpreting a batch costs about what compiling its plan does at ~25,000 rows (~0.4 CPU-s of
# compilation per batch against ~17 µs more per row interpreted, YSB, 2M lines); the bound sits
# well below it, so a batch near the break-even point keeps generated code.
SMALL_BATCH_ROWS = 10_000
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


class CodegenBySize:
    """One streaming query's switch between generated code (the session's settings) and
    interpreted evaluation (batches under :data:`SMALL_BATCH_ROWS` rows)."""

    def __init__(self) -> None:
        self._configured: dict[str, str | None] | None = None  # the session's own values
        self.interpreted = False

    def follow(self, session: SparkSession, rows: int | None) -> None:
        """Set the query's session for a batch after one of ``rows`` rows (None: unknown, as is)."""
        if rows is None:
            return
        if self._configured is None:
            self._configured = {key: session.conf.get(key, None) for key in INTERPRETED}
        if self._configured == INTERPRETED:  # configured interpreted already (the test suite)
            return
        small = rows < SMALL_BATCH_ROWS
        if small == self.interpreted:
            return
        for key, value in INTERPRETED.items():
            configured = self._configured[key]
            if small:
                session.conf.set(key, value)
            elif configured is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, configured)
        self.interpreted = small
