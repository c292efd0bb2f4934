"""``ParquetFiles``: Parquet files dropped in the landing zone."""

from __future__ import annotations

from typing import ClassVar

from attrs import frozen

from lakehouse.spec.sources.base import LandingFiles


@frozen
class ParquetFiles(LandingFiles):
    """Bronze source: Parquet files dropped in ``<root>/landing/<pipeline>/<path>/``.

    Bronze keeps the ``schema`` columns (Spark DDL; the files' other columns are ignored, a
    missing one is null). A row without a value for a ``NOT NULL`` column stays in bronze with
    ``_parse_error`` (and the row as JSON in ``_raw_record``); ``_source_file`` and
    ``_arrival_time`` are the file's path and modification time, as for :class:`JsonFiles`.
    """

    kind: ClassVar[str] = "parquet"
    reader: ClassVar[str] = "lakehouse.sources.parquet_files:ParquetFilesReader"
    schema: str
    path: str | None = None
    max_files_per_trigger: int = 100

    def __attrs_post_init__(self) -> None:
        self.check_files()
