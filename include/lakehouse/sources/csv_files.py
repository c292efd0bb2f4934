"""Reading ``CsvFiles``: landing lines split into the schema's fields, never dropping a line.

Each line is split with all fields as text (``from_csv``), its fields counted outside quoted
values, and each field cast to its type (``try_cast``). A line with the wrong number of fields,
a value that does not cast, or no value for a ``NOT NULL`` column keeps ``_raw_record`` (the
line) and ``_parse_error`` (why), like a bad JSON line. One line is one record: a quoted value
may hold the delimiter, not a line break.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse.sources.json_files import LinesReader, text_lines
from lakehouse.sources.landing import FILE_SIZE, LINE_BYTES
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
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamReader


class CsvFilesReader(LinesReader):
    source: CsvFiles

    def load(self, reader: DataStreamReader, paths: str | list[str]) -> DataFrame:
        # (only spaces make a line blank: a tab may be the delimiter)
        return self.parse(text_lines(reader, paths, self.source.max_line_bytes, blank=(" ",)))

    def parse(self, lines: DataFrame) -> DataFrame:
        """``value`` (one CSV line per row) -> typed columns + bronze metadata columns."""
        source, columns = self.source, self.source.columns
        width = len(columns)
        split = ", ".join(f"`_f{i}` STRING" for i in range(width))
        options = {
            "sep": source.delimiter,
            "quote": source.quote,
            "escape": source.escape,
            "nullValue": source.null_value,
        }
        df = lines.withColumn("_f", F.from_csv("value", split, options))
        if source.header:  # a line naming the schema's columns is a file's header
            header = F.lit(True)
            for i, c in enumerate(columns):
                header = header & (F.lower(F.trim(F.col(f"_f._f{i}"))) == c.name.lower())
            df = df.where(~F.coalesce(header, F.lit(False)))
        text = [F.col(f"_f._f{i}") for i in range(width)]  # as sent; null when empty
        typed = [
            t.try_cast(c.type) if c.type.upper() != "STRING" else t
            for c, t in zip(columns, text, strict=True)
        ]
        q, e = re.escape(source.quote), re.escape(source.escape)
        # a quoted value, its quotes doubled (RFC 4180: escape = quote) or escaped
        inner = f"[^{q}]|{q}{q}" if source.escape == source.quote else f"[^{q}{e}]|{e}.|{q}{q}"
        unquoted = F.regexp_replace("value", f"{q}(?:{inner})*{q}", "")
        fields = F.size(F.split(unquoted, re.escape(source.delimiter), -1))
        error = F.coalesce(
            F.when(
                fields != width, F.concat(F.lit(f"{width} fields expected, found "), fields.cast("string"))
            ),
            listed(
                "wrong type for: ",
                [
                    F.when(raw.isNotNull() & t.isNull(), F.lit(c.name))
                    for c, raw, t in zip(columns, text, typed, strict=True)
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
