"""``ParquetFiles``: Parquet files dropped in the landing zone."""

from __future__ import annotations

from typing import ClassVar

from attrs import frozen

from lakehouse.spec.sources.base import LandingFiles


@frozen
class ParquetFiles(LandingFiles):
    """Bronze source: Parquet files dropped in ``<root>/landing/<pipeline>/<path>/``.

    Each file is read with its own schema, columns by name: bronze keeps the ``schema`` columns
    (Spark DDL; a missing one is null) and the file's other columns as JSON in
    ``_rescued_data``. A column of another type is converted where every value converts exactly
    (``int32`` to ``BIGINT``, nanosecond timestamps to microseconds, the exact value kept in
    ``_rescued_data`` when digits are cut); a row with a value that does not convert, or without
    a value for a ``NOT NULL`` column, stays in bronze with ``_parse_error`` (and the row as JSON
    in ``_raw_record``); a file that is not Parquet is one row saying so. ``_source_file`` and
    ``_arrival_time`` are the file's path and modification time, as for :class:`JsonFiles`.
    """

    kind: ClassVar[str] = "parquet"
    reader: ClassVar[str] = "lakehouse.sources.parquet_files:ParquetFilesReader"
    schema: str
    path: str | None = None
    max_files_per_trigger: int = 100

    def __attrs_post_init__(self) -> None:
        self.check_files()
