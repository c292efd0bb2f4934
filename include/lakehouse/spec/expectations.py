"""Declaring expectations next to a table, without importing Great Expectations.

Pipeline declarations are read by Airflow at DAG-parse time, where importing GX (2-3 s) is not
acceptable. So a declaration records the GX Core expectation class by name, its arguments and
what to do with failing rows; it reads exactly like GX::

    from lakehouse.quality import gxe  # or: from lakehouse.spec import gxe

    StreamingTable(
        "silver.device_events",
        ...,
        expectations=[  # every row, in streams and backfills
            gxe.ExpectColumnValuesToNotBeNull(column="device", action="drop"),
        ],
        checks=[  # the table at rest, from Airflow (`<pipeline>_quality`) or `lakehouse quality`
            gxe.ExpectColumnValuesToBeUnique(column="event_id"),
        ],
    )

The real GX class is instantiated with these arguments by ``lakehouse validate``, by the tests
and by the runners (``lakehouse.quality.gx``): a misspelt class or argument fails there with
the table and expectation named.

Actions:

- ``warn``: the row passes (the table check passes); the failure is recorded;
- ``drop`` (row expectations only): the row goes to the table's quarantine table;
- ``fail``: the flow stops (the quality check fails) naming the expectation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

Action = Literal["warn", "drop", "fail"]
ROW_ACTIONS: tuple[str, ...] = ("warn", "drop", "fail")
CHECK_ACTIONS: tuple[str, ...] = ("warn", "fail")

# ``{silver.device_events}`` in an UnexpectedRowsExpectation query: another table of the lake,
# replaced by ``delta.`<its path>``` when the check runs (GX itself fills ``{batch}``).
TABLE_REFERENCE = re.compile(r"\{([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9_.:()\[\], -]+$")


def snake_case(class_name: str) -> str:
    """``ExpectColumnValuesToBeBetween`` -> ``expect_column_values_to_be_between`` (GX's type)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", class_name).lower()


@dataclass(frozen=True, eq=False)
class Expectation:
    """A GX Core expectation, by class name and keyword arguments, with the action on failure."""

    gx_class: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    action: Action = "fail"
    name: str | None = None

    @property
    def label(self) -> str:
        """The name used in quarantine rows, results and errors: ``name=`` or one derived from
        the class and its columns, e.g. ``expect_column_values_to_not_be_null(device)``."""
        if self.name:
            return self.name
        columns = [
            str(self.kwargs[key])
            for key in ("column", "column_A", "column_B")
            if isinstance(self.kwargs.get(key), str)
        ]
        columns += [str(c) for c in self.kwargs.get("column_list") or ()]
        return f"{snake_case(self.gx_class)}({', '.join(columns)})"

    def describe(self) -> str:
        """One line for ``lakehouse describe``: label, GX class, arguments, action."""
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.label}: {self.gx_class}({arguments}) -> {self.action}"

    @property
    def severity(self) -> str:
        """GX's own severity: a ``warn`` failure is a warning, anything else critical."""
        return "warning" if self.action == "warn" else "critical"

    def table_references(self) -> list[str]:
        """Tables named as ``{layer.table}`` in a query argument."""
        return [
            f"{m[0]}.{m[1]}"
            for value in self.kwargs.values()
            if isinstance(value, str)
            for m in TABLE_REFERENCE.findall(value)
        ]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"gxe.{self.gx_class}({args}, action={self.action!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expectation) and repr(self) == repr(other) and self.label == other.label

    def __hash__(self) -> int:
        return hash((repr(self), self.label))


class _LazyExpectations:
    """``gxe.<GX expectation class>(**kwargs, action=..., name=...)`` builds an
    :class:`Expectation`; the class name is checked against GX later, not on attribute access."""

    def __getattr__(self, gx_class: str) -> Callable[..., Expectation]:
        if gx_class.startswith("_") or not gx_class[:1].isupper():
            raise AttributeError(gx_class)

        def declare(*, action: Action = "fail", name: str | None = None, **kwargs: Any) -> Expectation:
            return Expectation(gx_class, dict(kwargs), action, name)

        declare.__name__ = gx_class
        return declare


gxe = _LazyExpectations()


def problems(
    expectations: Sequence[Expectation], checks: Sequence[Expectation], *, aggregate: bool
) -> list[str]:
    """What is wrong with a table's expectation declarations (without importing GX);
    ``aggregate``: the table's rows are windows updated in place."""
    found: list[str] = []
    for kind, items, actions in (
        ("expectations", expectations, ROW_ACTIONS),
        ("checks", checks, CHECK_ACTIONS),
    ):
        labels: set[str] = set()
        for item in items:
            if not isinstance(item, Expectation):
                found.append(
                    f"{kind} must be declared with lakehouse.quality.gxe, e.g. "
                    f"gxe.ExpectColumnValuesToNotBeNull(column='id', action='drop'); got {item!r}"
                )
                continue
            if item.action not in actions:
                hint = (
                    "; a table check cannot drop rows (declare it in expectations=)"
                    if item.action == "drop"
                    else ""
                )
                found.append(
                    f"{kind} {item.label!r}: action={item.action!r} is not one of {', '.join(actions)}{hint}"
                )
            if kind == "expectations" and item.action == "drop" and aggregate:
                found.append(
                    f"expectation {item.label!r}: action='drop' cannot quarantine windows of an "
                    "aggregate table (their values change as late rows arrive, so a stream and a "
                    "backfill would drop different rows); drop the input rows on the upstream "
                    "table, or use action='warn' / 'fail' here, or a table check"
                )
            if not _NAME.match(item.label):
                found.append(f"{kind} name {item.label!r} may only use letters, digits and _.:()[], -")
            if item.label in labels:
                found.append(
                    f"{kind}: two expectations are named {item.label!r}; give one of them name='...'"
                )
            labels.add(item.label)
    return found
