"""The kit every pipeline generator uses: deliver records to the landing zone (files or Kafka)
atomically, and draw realistic traffic (time ranges, ids, late and malformed lines, files).

Spark's file source ignores names starting with ``.``, so a file is written as a hidden
temporary and renamed into place: a stream never reads half a file. For a table whose source
is a :class:`~lakehouse.spec.KafkaTopic`, the same call produces each line as one record
(keyed by the event's ``device``/first field when it is JSON) and waits until the broker has
acknowledged them all (``acks=all``), so a generator runs unchanged against either source.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kafka import KafkaProducer

from lakehouse.spec import JsonFiles, KafkaTopic, Pipeline
from lakehouse.times import iso_millis, now, utc

if TYPE_CHECKING:
    import random
    from collections.abc import Iterable, Sequence
    from datetime import datetime, timedelta

    from lakehouse.lake import Lake

T = TypeVar("T")
iso = iso_millis  # how generated events write their times


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

    def write_lines(self, table: str, name: str, lines: Iterable[str]) -> Path | str:
        """Write one landing file of JSON lines for ``table``'s source, atomically; for a Kafka
        source, produce the lines to its (first) topic and return ``kafka://<topic>``."""
        source = self.pipeline.table(table).source
        if isinstance(source, KafkaTopic):
            return produce(source, list(lines))
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


_PRODUCERS: dict[str, Any] = {}


def _producer(servers: str) -> Any:

    logging.getLogger("kafka").setLevel(logging.WARNING)  # a line per connection otherwise
    if servers not in _PRODUCERS:
        producer = KafkaProducer(bootstrap_servers=servers.split(","), acks="all", linger_ms=5)
        _PRODUCERS[servers] = producer
        atexit.register(producer.close)
    return _PRODUCERS[servers]


def _key(line: str) -> bytes | None:
    """The record key: the event's device (one device's events stay in order in one partition)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    device = value.get("device") if isinstance(value, dict) else None
    return str(device).encode() if device is not None else None


def produce(source: KafkaTopic, lines: list[str]) -> str:
    """Produce ``lines`` to ``source``'s first topic; returns once the broker acknowledged all."""
    if not source.bootstrap_servers:
        raise ValueError("no Kafka broker configured: set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=host:9092")
    producer = _producer(source.bootstrap_servers)
    topic = source.topics[0]
    futures = [producer.send(topic, key=_key(line), value=line.encode()) for line in lines]
    producer.flush()
    for future in futures:
        future.get(timeout=60)  # raises if a record was not acknowledged
    return f"kafka://{topic}"


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
