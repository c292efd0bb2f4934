"""``CsvFiles``: CSV files dropped in the landing zone."""

from __future__ import annotations

from typing import ClassVar

from attrs import frozen

from lakehouse.spec.durations import SpecError
from lakehouse.spec.sources.base import MAX_LINE_BYTES, LandingFiles


@frozen
class CsvFiles(LandingFiles):
    """Bronze source: CSV files dropped in ``<root>/landing/<pipeline>/<path>/``.

    Columns are read by position in the order of ``schema`` (Spark DDL); with ``header`` a line
    naming the schema's columns (a file's header) is skipped. A line with a value of the wrong type, without a value
    for a ``NOT NULL`` column, or with more or fewer fields than the schema stays in bronze with
    ``_parse_error`` (why) and ``_raw_record`` (the line as received), like a bad JSON line.
    ``escape`` is the character before a quote inside a quoted value: ``\\`` (Spark's writer)
    or ``"`` for quotes doubled as Excel, pandas and Python's ``csv`` write them. A line of
    ``max_line_bytes`` or more is not read and a row says so, as for :class:`JsonFiles`.
    """

    kind: ClassVar[str] = "csv"
    reader: ClassVar[str] = "lakehouse.sources.csv_files:CsvFilesReader"
    schema: str
    path: str | None = None
    header: bool = True
    delimiter: str = ","
    quote: str = '"'
    escape: str = "\\"
    null_value: str = ""
    max_files_per_trigger: int = 100
    max_line_bytes: int = MAX_LINE_BYTES

    def __attrs_post_init__(self) -> None:
        self.check_files()
        self.check_line_limit(self.max_line_bytes)
        for name, value in (("delimiter", self.delimiter), ("quote", self.quote), ("escape", self.escape)):
            if len(value) != 1:
                raise SpecError(f"CsvFiles.{name} must be one character, not {value!r}")
        if self.delimiter in (self.quote, "\n"):
            raise SpecError(f"CsvFiles.delimiter {self.delimiter!r} cannot be the quote or a newline")
