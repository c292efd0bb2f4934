"""``Scd1`` / ``Scd2``: a change feed applied as the current state, or the history, of each key."""

from __future__ import annotations

from typing import ClassVar

from attrs import field, frozen

from lakehouse.spec.durations import SpecError
from lakehouse.spec.expectations import Expectation, gxe
from lakehouse.spec.modes.base import CHANGE_OPERATIONS, Declared, WriteMode
from lakehouse.spec.sources import names

# The columns of a change row (``lakehouse.plan.changes``), beside the row image's columns.
CHANGE_OP, CHANGE_SEQUENCE, CHANGE_TIME, CHANGE_ID = "_op", "_seq", "_ts", "_event_id"
CHANGE_VERSION = "_version"  # the total order of a key's changes


class ChangeMode(WriteMode):
    """What :class:`Scd1` and :class:`Scd2` share: a table applying a change feed.

    The upstream holds change events in Debezium's envelope (``op``, ``before``, ``after``,
    ``source``; see :func:`lakehouse.spec.debezium_schema`). Each event becomes one change row:
    the row image (``after``; ``before`` for a delete), its operation, its sequence and its time.

    - ``keys``: the columns identifying a row (of the row image).
    - ``sequence_by``: SQL expressions over the envelope giving the order of a key's changes, a
      total order per key from the source (``source.lsn`` for Postgres; ``source.file``,
      ``source.pos``, ``source.row`` for MySQL). Changes are applied in this order, not in the
      order they arrive.
    - ``changed_at``: the expression of the change's time, epoch milliseconds (default: the
      source database's commit time ``source.ts_ms``).
    - ``ignore``: row columns not kept in the table.
    """

    writer: ClassVar[str] = "lakehouse.writes.scd:ChangeWriter"
    applies_changes: ClassVar[bool] = True
    # What the type's table holds per key (the checks at rest count them).
    current_filter: ClassVar[str] = ""
    rows_label: ClassVar[str] = "rows"
    keys: tuple[str, ...]
    sequence_by: tuple[str, ...]
    changed_at: str
    ignore: tuple[str, ...]

    def check_fields(self) -> None:
        name = type(self).__name__
        if not self.keys:
            raise SpecError(f"{name} needs keys=(...): the columns identifying a row of the feed")
        if not self.sequence_by:
            raise SpecError(
                f"{name} needs sequence_by=(...): expressions ordering a key's changes, e.g. "
                "'source.lsn' (Postgres) or 'source.file', 'source.pos', 'source.row' (MySQL)"
            )
        if overlap := set(self.keys) & set(self.ignore):
            raise SpecError(f"{name}: key column(s) {sorted(overlap)} cannot be ignored")

    def check(self, table: Declared) -> None:
        mode = type(self).__name__
        if table.sources or len(table.upstreams) != 1:
            raise table.fail(
                f"{mode} applies the change feed of one upstream table: declare "
                "upstreams=['bronze.<changes>'], the bronze table of Debezium change events"
            )
        for name in ("event_time", "watermark", "state"):
            if getattr(table, name):
                raise table.fail(
                    f"{mode} cannot declare {name}=: changes are applied in sequence order, per key, "
                    "whenever they arrive (no watermark drops them), and a backfill recomputes the "
                    "keys changed in its slice; leave it out"
                )

    def implied_expectations(self, table: Declared) -> tuple[Expectation, ...]:
        """What every change event must have to be applied (else it goes to the quarantine with
        the name of what it lacks): an operation the platform knows, its keys, its sequence."""
        return (
            gxe.ExpectColumnValuesToNotBeNull(column=CHANGE_OP, action="drop", name="change_has_operation"),
            gxe.ExpectColumnValuesToBeInSet(
                column=CHANGE_OP,
                value_set=list(CHANGE_OPERATIONS),
                action="drop",
                name="change_operation_known",
            ),
            *(
                gxe.ExpectColumnValuesToNotBeNull(column=key, action="drop", name=f"change_has_key_{key}")
                for key in self.keys
            ),
            gxe.ExpectColumnValuesToNotBeNull(
                column=CHANGE_SEQUENCE, action="drop", name="change_has_sequence"
            ),
        )

    def implied_checks(self, table: Declared) -> tuple[Expectation, ...]:
        """The checks every change-feed table passes at rest: one row (one current version) per
        key, and the rows agree with the change log (a key has a row, or a current version,
        exactly when its latest change is not a delete)."""
        keys = [f"`{k}`" for k in self.keys]
        on = " AND ".join(f"c.{k} <=> t.{k}" for k in keys)
        listed = ", ".join(keys)
        matches_log = (
            f"SELECT {', '.join(f'coalesce(c.{k}, t.{k}) AS {k}' for k in keys)}, c._last_op, t._rows "
            f"FROM (SELECT {listed}, max_by({CHANGE_OP}, {CHANGE_VERSION}) AS _last_op "
            f"FROM {{{table.changes}}} GROUP BY {listed}) c "
            f"FULL OUTER JOIN (SELECT {listed}, count(*) AS _rows FROM {{batch}} {self.current_filter} "
            f"GROUP BY {listed}) t "
            f"ON {on} WHERE c._last_op IS NULL OR t._rows > 1 "
            "OR (c._last_op = 'd' AND t._rows IS NOT NULL) OR (c._last_op <> 'd' AND t._rows IS NULL)"
        )
        return (
            gxe.UnexpectedRowsExpectation(
                unexpected_rows_query=matches_log,
                description=f"Exactly the keys whose latest change is not a delete have one of the {self.rows_label}",
                name="rows_match_change_log",
            ),
        )


@frozen
class Scd1(ChangeMode):
    """A change feed applied as the current state of each key (SCD type 1): the change with the
    greatest sequence wins whatever order changes arrive in; a delete removes the row, and a
    change older than the delete never brings it back (the table's change log remembers it)."""

    kind: ClassVar[str] = "scd1"
    keys: tuple[str, ...] = field(converter=names)
    sequence_by: tuple[str, ...] = field(converter=names)
    changed_at: str = "source.ts_ms"
    ignore: tuple[str, ...] = field(default=(), converter=names)

    def __attrs_post_init__(self) -> None:
        self.check_fields()

    def describe(self) -> str:
        return (
            f"SCD type 1 (current state) on {', '.join(self.keys)}, in order of {', '.join(self.sequence_by)}"
        )


@frozen
class Scd2(ChangeMode):
    """A change feed applied as the history of each key (SCD type 2): one row per version with
    ``valid_from``, ``valid_to`` (null while current) and ``is_current``. A change of a ``track``
    column (default: every column but the keys) opens a new version; other changes update the
    version in place. A delete closes the current version; a late change is inserted in its place
    in history and its neighbours' intervals are fixed."""

    kind: ClassVar[str] = "scd2"
    current_filter: ClassVar[str] = "WHERE is_current"
    rows_label: ClassVar[str] = "current rows"
    keys: tuple[str, ...] = field(converter=names)
    sequence_by: tuple[str, ...] = field(converter=names)
    track: tuple[str, ...] = field(default=(), converter=names)
    changed_at: str = "source.ts_ms"
    ignore: tuple[str, ...] = field(default=(), converter=names)

    def __attrs_post_init__(self) -> None:
        self.check_fields()
        if overlap := set(self.track) & set(self.keys):
            raise SpecError(f"Scd2: key column(s) {sorted(overlap)} cannot be tracked (a key is the row)")
        if overlap := set(self.track) & set(self.ignore):
            raise SpecError(f"Scd2: column(s) {sorted(overlap)} are both tracked and ignored")

    def describe(self) -> str:
        tracked = f", history of {', '.join(self.track)}" if self.track else ""
        return f"SCD type 2 (history) on {', '.join(self.keys)}, in order of {', '.join(self.sequence_by)}{tracked}"

    def check(self, table: Declared) -> None:
        super().check(table)
        if set(table.partition_by) & set(self.track or ()):
            raise table.fail("Scd2 cannot be partitioned by a tracked column: rows move between versions")

    def implied_checks(self, table: Declared) -> tuple[Expectation, ...]:
        """And versions of a key never overlap."""
        by_key = f"PARTITION BY {', '.join(f'`{k}`' for k in self.keys)} ORDER BY _start_seq"
        return (
            *super().implied_checks(table),
            gxe.UnexpectedRowsExpectation(
                unexpected_rows_query=(
                    f"SELECT * FROM (SELECT *, LAG(_end_seq) OVER ({by_key}) AS _previous_end, "
                    f"ROW_NUMBER() OVER ({by_key}) AS _n FROM {{batch}}) "
                    "WHERE (_n > 1 AND (_previous_end IS NULL OR _previous_end > _start_seq)) "
                    "OR _end_seq <= _start_seq OR valid_to < valid_from"
                ),
                description="Versions of a key never overlap (and no interval ends before it starts)",
                name="versions_do_not_overlap",
            ),
        )
