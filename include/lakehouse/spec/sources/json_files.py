"""``JsonFiles``: JSON-lines files dropped in the landing zone."""

from __future__ import annotations

from typing import ClassVar

from attrs import frozen

from lakehouse.spec.sources.base import MAX_LINE_BYTES, LandingFiles


@frozen
class JsonFiles(LandingFiles):
    """Bronze source: JSON-lines files dropped in ``<root>/landing/<pipeline>/<path>/``.

    ``schema`` is a Spark DDL string; ``NOT NULL`` fields are required, and a line missing one,
    with a value of the wrong type, or that is not JSON, lands in bronze with a parse error.
    A line of ``max_line_bytes`` or more, its break included, is not read (a file holding one
    huge line must not exhaust memory); bronze gets a row saying how many bytes of the file were
    skipped. Lines end at ``\\n``, ``\\r\\n`` or ``\\r``; blank lines hold no row.
    """

    kind: ClassVar[str] = "files"
    reader: ClassVar[str] = "lakehouse.sources.json_files:JsonFilesReader"
    schema: str
    path: str | None = None
    max_files_per_trigger: int = 100
    max_line_bytes: int = MAX_LINE_BYTES

    def __attrs_post_init__(self) -> None:
        self.check_files()
        self.check_line_limit(self.max_line_bytes)
