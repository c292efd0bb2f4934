"""Reading ``CsvFiles``: landing lines split into the schema's fields, never dropping a line.

Each line is split with all fields as text (``from_csv``), one field more than the schema has
(so a line with too many is seen), and with a null marker no line holds (so an empty field
and a missing one differ); each field is then cast to its type (``try_cast``). A line with
the wrong number of fields, a value that does not cast, or no value for a ``NOT NULL`` column
keeps ``_raw_record`` (the line) and ``_parse_error`` (why), like a bad JSON line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse.sources.json_files import text_lines
from lakehouse.sources.landing import FILE_SIZE, LINE_BYTES, LandingFilesReader
from lakehouse.sources.parse import listed
from lakehouse.spec.sources import (
    ARRIVAL_TIME,
    INGESTED_AT,
    PARSE_ERROR,
    RAW_RECORD,
    RESCUED,
    SOURCE_FILE,
    CsvFiles,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming import DataStreamReader

ABSENT = "\u0000absent\u0000"  # the null marker of the split: no CSV field holds it


class CsvFilesReader(LandingFilesReader):
    source: CsvFiles

    def load(self, reader: DataStreamReader, paths: str | list[str]) -> DataFrame:
        return self.parse(text_lines(reader, paths, None))

    def parse(self, lines: DataFrame) -> DataFrame:
        """``value`` (one CSV line per row) -> typed columns + bronze metadata columns."""
        source, columns = self.source, self.source.columns
        width = len(columns)
        split = ", ".join(f"`_f{i}` STRING" for i in range(width + 1))
        options = {
            "sep": source.delimiter,
            "quote": source.quote,
            "escape": source.escape,
            "nullValue": ABSENT,
        }
        df = lines.withColumn("_f", F.from_csv("value", split, options))
        if source.header:  # a line naming the schema's columns is a file's header
            header = F.lit(True)
            for i, c in enumerate(columns):
                header = header & (F.lower(F.trim(F.col(f"_f._f{i}"))) == c.name.lower())
            df = df.where(~F.coalesce(header, F.lit(False)))

        def text(i: int) -> Column:  # the field as sent; null when empty (or the null value)
            field = F.col(f"_f._f{i}")
            return F.when(field != F.lit(source.null_value), field)

        typed = [
            text(i).try_cast(c.type) if c.type.upper() != "STRING" else text(i) for i, c in enumerate(columns)
        ]
        fields = sum((F.col(f"_f._f{i}").isNotNull().cast("int") for i in range(width)), F.lit(0))
        error = F.coalesce(
            F.when(
                F.col(f"_f._f{width}").isNotNull(), F.lit(f"more fields than the schema's {width} columns")
            ),
            F.when(
                fields < width, F.concat(F.lit(f"{width} fields expected, found "), fields.cast("string"))
            ),
            listed(
                "wrong type for: ",
                [
                    F.when(text(i).isNotNull() & t.isNull(), F.lit(c.name))
                    for i, (c, t) in enumerate(zip(columns, typed, strict=True))
                ],
            ),
            listed(
                "missing required field(s): ",
                [
                    F.when(t.isNull(), F.lit(c.name))
                    for c, t in zip(columns, typed, strict=True)
                    if c.required
                ],
            ),
        )
        return df.select(
            *[t.alias(c.name) for c, t in zip(columns, typed, strict=True)],
            F.when(error.isNotNull(), F.col("value")).alias(RAW_RECORD),
            error.alias(PARSE_ERROR),
            F.lit(None).cast("string").alias(RESCUED),
            SOURCE_FILE,
            ARRIVAL_TIME,
            FILE_SIZE,
            LINE_BYTES,
            F.current_timestamp().alias(INGESTED_AT),
        )
