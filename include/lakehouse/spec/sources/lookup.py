"""``Lookup``: static reference data joined to streams."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from attrs import field, frozen

from lakehouse.spec.durations import NAME, SpecError
from lakehouse.spec.sources.base import ddl_columns

if TYPE_CHECKING:
    from collections.abc import Mapping


@frozen
class Lookup:
    """Static reference data joined to streams (stream-static join), read fresh by every run.

    Lives in ``<root>/reference/<pipeline>/<path>`` (default ``<name>.csv``).
    """

    name: str
    schema: str
    format: Literal["csv", "json", "parquet", "delta"] = "csv"
    path: str | None = None
    options: Mapping[str, str] = field(factory=lambda: {"header": "true"})

    def __attrs_post_init__(self) -> None:
        if not NAME.match(self.name):
            raise SpecError(f"lookup name {self.name!r} must be lower_snake_case")
        ddl_columns(self.schema)

    @property
    def file(self) -> str:
        return self.path or f"{self.name}.{self.format}"
