"""Reading ``JsonFiles``: JSON-lines landing files, parsed line by line (``parse.parse_json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse.sources.landing import FILE_SIZE, LINE_BYTES, LandingFilesReader, file_metadata
from lakehouse.sources.parse import parse_json
from lakehouse.spec.sources import ARRIVAL_TIME, SOURCE_FILE, JsonFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamReader

MAX_LINE = "mapreduce.input.linerecordreader.line.maxlength"


def text_lines(reader: DataStreamReader, paths: str | list[str], max_line_bytes: int | None) -> DataFrame:
    """The non-blank lines of ``paths`` as ``value``, each with its file's metadata and its
    size in bytes (a line over ``max_line_bytes`` is skipped, never loaded)."""
    if max_line_bytes is not None:
        reader = reader.option(MAX_LINE, max_line_bytes)
    frame = reader.format("text").load(paths)
    return frame.select(
        "value", *file_metadata(frame), (F.octet_length("value") + 1).alias(LINE_BYTES)
    ).where(F.trim("value") != "")


class JsonFilesReader(LandingFilesReader):
    source: JsonFiles

    def max_line_bytes(self) -> int | None:
        return self.source.max_line_bytes

    def load(self, reader: DataStreamReader, paths: str | list[str]) -> DataFrame:
        lines = text_lines(reader, paths, self.source.max_line_bytes)
        return parse_json(
            lines, self.source.columns, carry=(SOURCE_FILE, ARRIVAL_TIME, FILE_SIZE, LINE_BYTES)
        )
