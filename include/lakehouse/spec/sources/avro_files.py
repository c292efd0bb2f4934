"""``AvroFiles``: Avro files dropped in the landing zone."""

from __future__ import annotations

from typing import ClassVar

from attrs import frozen

from lakehouse.spec.sources.base import LandingFiles


@frozen
class AvroFiles(LandingFiles):
    """Bronze source: Avro object container files dropped in ``<root>/landing/<pipeline>/<path>/``
    (what Kafka Connect sinks, Debezium exports and Spark's ``spark-avro`` write).

    Each file is read with the writer schema it carries, fields by name, and held to the same
    contract as :class:`ParquetFiles`: bronze keeps the ``schema`` columns (Spark DDL; a missing
    one is null), the file's other fields as JSON in ``_rescued_data``; a field of another type is
    converted where every value converts exactly (``int`` to ``BIGINT``, ``timestamp-nanos`` to
    microseconds with the exact value kept in ``_rescued_data``, a union's text holding a number);
    a row with a value that does not convert, or without a value for a ``NOT NULL`` column, stays
    in bronze with ``_parse_error`` (the record as JSON in ``_raw_record``); a file that is not
    Avro, or is cut short, is one row saying so after the records read before the damage.
    """

    kind: ClassVar[str] = "avro"
    reader: ClassVar[str] = "lakehouse.sources.avro_files:AvroFilesReader"
    schema: str
    path: str | None = None
    max_files_per_trigger: int = 100

    def __attrs_post_init__(self) -> None:
        self.check_files()
