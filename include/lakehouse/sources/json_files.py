"""Reading ``JsonFiles``: JSON-lines landing files, parsed line by line (``parse.parse_json``), and
what the kinds of text lines share (``LinesReader``: the line limit and its accounting)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse.sources.landing import FILE_SIZE, LINE_BYTES, LandingFilesReader, file_metadata
from lakehouse.sources.parse import parse_json
from lakehouse.spec.sources import ARRIVAL_TIME, SOURCE_FILE, CsvFiles, JsonFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader
    from pyspark.sql.streaming import DataStreamReader

MAX_LINE = "mapreduce.input.linerecordreader.line.maxlength"
BLANK = (" ", "\t", "\r")  # JSON's whitespace within a line


def text_lines(
    reader: DataStreamReader,
    paths: str | list[str],
    max_line_bytes: int | None,
    blank: tuple[str, ...] = BLANK,
) -> DataFrame:
    """The non-blank lines of ``paths`` as ``value`` (a line of ``blank`` characters only holds no
    row; only a line starting with one is trimmed: trimming 2M lines took 1 s), each with its
    file's metadata and its size in bytes (a line of ``max_line_bytes`` or more is skipped, never
    loaded)."""
    if max_line_bytes is not None:
        reader = reader.option(MAX_LINE, max_line_bytes)
    frame = reader.format("text").load(paths)
    return frame.select(
        "value", *file_metadata(frame), (F.octet_length("value") + 1).alias(LINE_BYTES)
    ).where(~F.left("value", F.lit(1)).isin("", *blank) | (F.trim("value", F.lit("".join(blank))) != ""))


class LinesReader(LandingFilesReader):
    """What the kinds of text lines (JSON lines, CSV) share: a line of ``max_line_bytes`` or
    more is never loaded, and the landing accounting measures every line to say so."""

    source: JsonFiles | CsvFiles

    def max_line_bytes(self) -> int | None:
        return self.source.max_line_bytes

    def line_sizes(self, reader: DataFrameReader, paths: list[str]) -> DataFrame:
        """Every line of ``paths``, blank ones too, with its size in bytes and its break: lines
        end at ``\\n`` (a ``\\r`` before it is the line's, counted), so a file's sizes add up to
        the file (but for a byte order mark the reader strips and a missing last break). A line
        the rows' read skips is skipped here too: the reader skips a line whose bytes with its
        break reach ``max_line_bytes``, whichever break it ends with."""
        frame = (
            reader.option(MAX_LINE, self.source.max_line_bytes)
            .option("lineSep", "\n")
            .option("ignoreMissingFiles", "true")  # deleted meanwhile: LandingAccounting sees it
            .format("text")
            .load(paths)
        )
        return frame.select(*file_metadata(frame)[:2], (F.octet_length("value") + 1).alias(LINE_BYTES))


class JsonFilesReader(LinesReader):
    source: JsonFiles

    def load(self, reader: DataStreamReader, paths: str | list[str]) -> DataFrame:
        lines = text_lines(reader, paths, self.source.max_line_bytes)
        return parse_json(
            lines, self.source.columns, carry=(SOURCE_FILE, ARRIVAL_TIME, FILE_SIZE, LINE_BYTES)
        )
