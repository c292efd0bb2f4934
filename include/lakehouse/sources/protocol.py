"""The protocol every source kind implements, and how a declaration finds its implementation.

A declaration (``lakehouse.spec``, Spark-free) names its reader, ``"module:Class"``;
:func:`reader_for` imports it once. The runners call only this protocol: nothing outside the
source packages branches on a source's type.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Source, Table
    from lakehouse.state.checkpoints import Checkpoint


@dataclass(frozen=True)
class Cut:
    """The part of a source a backfill reads: what the table's stream has consumed, so that the
    stream, resuming, reads exactly the rest. ``consumed`` is the kind's own value (the files, the
    Kafka offsets, the last table version), made and read only by its reader; ``None``: all
    there is (:data:`EVERYTHING`)."""

    consumed: Any = None

    @property
    def everything(self) -> bool:
        return self.consumed is None


EVERYTHING = Cut()


@dataclass(frozen=True)
class Bronze:
    """The bronze table a reader reads for, and where."""

    spark: SparkSession
    lake: Lake
    pipeline: Pipeline
    table: Table


@dataclass(frozen=True)
class Prepared:
    """A batch of a source ready to write (a micro-batch, or a backfill's read), the inputs that
    vanished before they could be read, and ``settle``: what to call once its rows are committed,
    which returns rows that only then showed to be missing (e.g. a line too long to read, counted
    as the batch was written), to append; ``None``: nothing more."""

    rows: DataFrame
    vanished: tuple[str, ...] = ()
    settle: Callable[[], DataFrame | None] | None = None


class SourceReader:
    """How the runners read one kind of source (one subclass per kind, one module each).

    ``read`` gives the parsed bronze rows, as a stream or as a batch limited to a :class:`Cut`;
    ``consumed`` reads in a stream's checkpoint what it has consumed (what a backfill then
    reads); ``account`` (batches) and ``micro_batches`` (streams) add what only a whole batch can
    tell (e.g. lines too long to read, settled once the batch is written); ``deliver`` is where a
    generator's lines go.
    """

    # Columns ``read`` adds for accounting only; the runners drop them before writing.
    working_columns: ClassVar[tuple[str, ...]] = ()

    def __init__(self, source: Source) -> None:
        self.source = source

    def read(self, bronze: Bronze, *, streaming: bool, cut: Cut = EVERYTHING) -> DataFrame:
        raise NotImplementedError(f"{type(self).__name__} does not implement read()")

    def consumed(self, checkpoint: Checkpoint) -> Cut:
        """What the stream with this ``checkpoint`` has consumed (default: everything there is)."""
        return EVERYTHING

    def account(self, bronze: Bronze, rows: DataFrame, cut: Cut) -> Prepared:
        """A batch read's ``rows`` ready to write (default: as read, less the working columns)."""
        return Prepared(rows.drop(*self.working_columns))

    def micro_batches(
        self, bronze: Bronze, checkpoint: Checkpoint
    ) -> Callable[[DataFrame, int], Prepared] | None:
        """What prepares each micro-batch of a stream for writing (``None``: nothing to do)."""
        return None

    def deliver(
        self, lake: Lake, pipeline: Pipeline, table: Table, name: str, lines: Iterable[str]
    ) -> Path | str:
        """Deliver a generator's ``lines`` (one record each) as input ``name``; where they went."""
        raise ValueError(
            f"{table.name} reads a {self.source.kind} source, which generators cannot write to; "
            "declare a JsonFiles or KafkaTopic alternative for generated data"
        )


@cache
def _reader_class(reference: str) -> type[SourceReader]:
    module, _, name = reference.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"source reader {reference!r} (a declaration's reader) not found: {exc}") from exc
    if not (isinstance(found, type) and issubclass(found, SourceReader)):
        raise TypeError(f"source reader {reference!r} is not a lakehouse.sources.SourceReader subclass")
    return found


def reader_for(source: Source) -> SourceReader:
    """The reader of ``source``'s kind (its declaration's ``reader``, imported once)."""
    return _reader_class(source.reader)(source)
