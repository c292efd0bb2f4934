"""The kit every pipeline generator uses: deliver records to a table's source atomically (a
landing file, Kafka records: the source's kind decides, see ``SourceReader.deliver``), and draw
realistic traffic (time ranges, ids, late and malformed lines, files).

Spark's file source ignores names starting with ``.``, so a file is written as a hidden
temporary and renamed into place: a stream never reads half a file. For a table whose source
is a :class:`~lakehouse.spec.KafkaTopic`, the same call produces each line as one record
(keyed by the event's ``device``/first field when it is JSON) and waits until the broker has
acknowledged them all (``acks=all``), so a generator runs unchanged against either source.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lakehouse.core.times import iso_millis, now, utc
from lakehouse.sources import reader_for
from lakehouse.state.objects import atomic_write, read_text

if TYPE_CHECKING:
    import random
    from collections.abc import Iterable, Sequence
    from datetime import datetime, timedelta

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline

T = TypeVar("T")
iso = iso_millis  # how generated events write their times


@dataclass(frozen=True)
class Landing:
    """Where a pipeline's generator drops source files and reference data (a local lake, or one
    on ``s3a://``: files are written through :mod:`lakehouse.state.objects`)."""

    lake: Lake
    pipeline: Pipeline

    def source_dir(self, table: str) -> Path:
        spec = self.pipeline.table(table)
        folder = spec.source.landing_folder(spec.short_name) if spec.source is not None else None
        if folder is None:
            raise ValueError(f"{table} has no file source to land files in")
        if not self.lake.root.startswith("/"):
            raise ValueError(f"generators write to a local lake, not {self.lake.root}")
        return Path(self.lake.landing(self.pipeline.name, folder))

    def write_lines(self, table: str, name: str, lines: Iterable[str]) -> Path | str:
        """Deliver ``lines`` to ``table``'s source as input ``name``: one landing file, written
        atomically; for a Kafka source, records produced to its (first) topic (``kafka://<topic>``)."""
        spec = self.pipeline.table(table)
        if spec.source is None:
            raise ValueError(f"{table} has no source to deliver lines to")
        return reader_for(spec.source).deliver(self.lake, self.pipeline, spec, name, lines)

    def write_reference(self, lookup: str, text: str) -> Path | str:
        return atomic_write(self.reference(lookup), text)

    def read_reference(self, lookup: str) -> str | None:
        """The text of ``lookup``'s reference file, ``None`` before it is written."""
        return read_text(self.reference(lookup))

    def reference(self, lookup: str) -> str:
        return self.lake.reference(self.pipeline.name, self.pipeline.lookup(lookup).file)


# --------------------------------------------------------------------------- drawing traffic


def time_range(start: datetime | None, end: datetime | None, span: timedelta) -> tuple[datetime, datetime]:
    """``[start, end)`` in UTC: given bounds, or ``span`` long ending at the other bound (default now)."""
    end_ = utc(end) or ((utc(start) + span) if start else now())
    start_ = utc(start) or end_ - span
    if start_ >= end_:
        raise ValueError(f"start {start_} must be before end {end_}")
    return start_, end_


def uid(rng: random.Random) -> str:
    """A UUID4 drawn from ``rng`` (same seed, same ids)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def malformed(rng: random.Random, good: dict[str, Any], *, wrong_type: tuple[str, Any], missing: str) -> str:
    """One of what real producers send by mistake: truncated JSON, a field of the wrong type
    (``wrong_type``), a required field ``missing``, or a line that is not JSON at all."""
    kind = rng.randrange(4)
    text = json.dumps(good)
    if kind == 0:
        return text[: rng.randrange(5, len(text) - 5)]
    if kind == 1:
        return json.dumps({**good, wrong_type[0]: wrong_type[1]})
    if kind == 2:
        return json.dumps({k: v for k, v in good.items() if k != missing})
    return "#" + "".join(rng.choice("abcdef0123456789") for _ in range(24))


def chunks(items: Sequence[T], files: int) -> list[Sequence[T]]:
    """``items`` cut into at most ``files`` consecutive, near-equal, non-empty parts."""
    files = max(1, min(files, len(items) or 1))
    size = -(-len(items) // files)
    return [part for k in range(files) if (part := items[k * size : (k + 1) * size])]
