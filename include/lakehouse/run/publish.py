"""The one way a flow's rows reach its table, for a stream's micro-batch and a backfill's slice
alike: the quality gate judges them, the table's writer commits what it kept and what it rejected
(a micro-batch exactly once, a slice replaced), then what the source's accounting found once the
rows were read is appended. Where the time went is measured here too (:class:`Phases`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lakehouse.quality.gate import Verdict
from lakehouse.state.control import check_fences

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame

    from lakehouse.quality.gate import QualityGate
    from lakehouse.writes import Origin, TableWriter


class Phases(dict[str, float]):
    """Seconds per phase of one micro-batch or slice (``lakehouse.monitoring.progress.PHASES``,
    and a backfill's ``guard`` and ``accounting``), each lap timed from the end of the last."""

    def __init__(self) -> None:
        super().__init__()
        self._clock = time.perf_counter()

    def lap(self, phase: str) -> None:
        """The time since the last lap goes to ``phase`` (added to what it had)."""
        now = time.perf_counter()
        self[phase] = self.get(phase, 0.0) + now - self._clock
        self._clock = now

    def restart(self) -> None:
        """Time from now on (what passed since the last lap belongs to no phase)."""
        self._clock = time.perf_counter()


def judge(gate: QualityGate | None, rows: DataFrame, origin: Origin) -> Verdict:
    """The gate's verdict on ``rows`` (every row kept when the table declares no expectation)."""
    return gate.judge(rows, origin) if gate is not None else Verdict(rows, None)


def publish(
    writer: TableWriter,
    verdict: Verdict,
    origin: Origin,
    phases: Phases,
    *,
    settle: Callable[[], DataFrame | None] | None = None,
    settled_as: str,
) -> None:
    """Commit ``verdict`` (its kept rows into the table, its rejected ones into the quarantine) as
    ``origin`` says, then append what ``settle`` finds once they are written (timed as
    ``settled_as``). A write that fails asks the store whether this process still holds its
    flows (``LeaseLost`` if a successor fenced the table: Delta refused the commit)."""
    try:
        phases.update(writer.write(verdict.kept, verdict.rejected, origin))
    except Exception:
        check_fences(confirm=True)
        raise
    if settle is not None:
        phases.restart()
        if (found := settle()) is not None:
            writer.append_found(found, origin)
        phases.lap(settled_as)
