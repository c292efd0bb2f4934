"""Seeded generator of a realistic change feed: an operational database of customers and their
orders, whose changes Debezium (Postgres connector, JSON without schemas) publishes.

The database is a state machine: customers are created, updated many times (a change of segment
or country, which the history tracks, or of name or e-mail, which it does not), deleted, and
sometimes created again after their deletion; orders are placed by live customers, move through
their statuses, and are sometimes cancelled (deleted). Every change gets the next position in
the write-ahead log (``source.lsn``) and a commit time (``source.ts_ms``, ties within a
millisecond happen). Its state persists in the landing zone between calls
(``landing/crm/.database.json``), so successive calls (``lakehouse generate crm --continuous``)
continue one database.

What a connector delivers is not that order: events arrive shuffled (up to ``reorder`` events
away from their place), some twice (a connector restart re-sends them, with a new envelope
``ts_ms``), a few malformed (an operation the platform does not apply, a missing key or log
position: quarantined by silver; lines that are not JSON: kept in bronze with a parse error),
and with ``snapshot=True`` a snapshot of every live row (``op = 'r'``) comes first, as when a
connector starts.

The returned summary holds the ground truth: the final state of both tables, and every version of
each customer's segment and country closed during the call plus the open ones, with their
validity (what ``silver.customer_history`` must hold).
"""

from __future__ import annotations

import bisect
import json
import random
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakehouse.plan.generators import atomic_write, chunks, iso, time_range
from lakehouse.state.objects import read_text
from pipelines.crm.constants import COUNTRIES, ORDER_STATUSES, SEGMENTS

if TYPE_CHECKING:
    from lakehouse.plan.generators import Landing

CUSTOMERS, ORDERS = "bronze.customer_changes", "bronze.order_changes"
SOURCE_TABLES = {CUSTOMERS: "customers", ORDERS: "orders"}  # the database's tables
FIRST_NAMES = ("ada", "alan", "grace", "edsger", "barbara", "donald", "frances", "ken", "radia", "tim")
TRACKED = ("segment", "country")


@dataclass
class Version:
    """One version of a customer's tracked columns (with the last values of the others)."""

    customer_id: int
    name: str
    segment: str
    country: str
    valid_from: str
    valid_to: str | None = None
    end_op: str | None = None


@dataclass
class Database:
    """The operational database's state, kept between calls."""

    lsn: int = 10_000
    clock_ms: int = 0
    next_customer: int = 1
    next_order: int = 1
    customers: dict[int, dict[str, Any]] = field(default_factory=dict)
    orders: dict[int, dict[str, Any]] = field(default_factory=dict)
    deleted: list[int] = field(default_factory=list)
    open_versions: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> Database:
        text = read_text(path)  # a local lake or one on the object store
        if text is None:
            return cls()
        data = json.loads(text)
        for name in ("customers", "orders", "open_versions"):
            data[name] = {int(k): v for k, v in data[name].items()}
        return cls(**data)

    def __post_init__(self) -> None:
        # each table's keys in order, kept as rows come and go (not saved): sorting them for every
        # event made generating 100,000 changes take 22 s (40,000: 3 s)
        self.sorted_keys = {"customers": sorted(self.customers), "orders": sorted(self.orders)}

    def save(self, path: str) -> None:
        atomic_write(path, json.dumps(asdict(self)))

    def pick(self, rng: random.Random, table: str) -> int:
        """A random key of ``table`` (the draw of ``rng.choice(sorted(keys))``)."""
        return rng.choice(self.sorted_keys[table])

    def insert(self, table: str, key: int, row: dict[str, Any]) -> None:
        bisect.insort(self.sorted_keys[table], key)
        getattr(self, table)[key] = row

    def delete(self, table: str, key: int) -> dict[str, Any]:
        keys = self.sorted_keys[table]
        del keys[bisect.bisect_left(keys, key)]
        return getattr(self, table).pop(key)


@dataclass
class Summary:
    lines: int = 0
    changes: int = 0
    customer_changes: int = 0
    order_changes: int = 0
    snapshot_rows: int = 0
    duplicates: int = 0
    malformed: int = 0  # lines that are not JSON (bronze parse errors)
    quarantined: int = 0  # change events silver quarantines (unknown op, no key, no log position)
    files: list[str] = field(default_factory=list)
    # ground truth
    customers: dict[int, dict[str, Any]] = field(default_factory=dict)
    orders: dict[int, dict[str, Any]] = field(default_factory=dict)
    customer_versions: list[Version] = field(default_factory=list)

    def as_dict(self, with_truth: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_truth:
            for name in ("customers", "orders", "customer_versions"):
                data.pop(name)
        return data


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _iso_millis(ms: int) -> str:
    return iso(datetime.fromtimestamp(ms / 1000, tz=UTC))


def generate(
    landing: Landing,
    *,
    events: int = 1000,
    files: int = 1,
    seed: int = 42,
    start: datetime | None = None,
    end: datetime | None = None,
    order_fraction: float = 0.4,
    delete_fraction: float = 0.04,
    reinsert_fraction: float = 0.3,
    tracked_fraction: float = 0.4,
    reorder: int = 40,
    duplicate_fraction: float = 0.03,
    malformed_fraction: float = 0.005,
    quarantine_fraction: float = 0.005,
    snapshot: bool = False,
    file_prefix: str | None = None,
) -> Summary:
    """Commit ``events`` changes to the simulated database, their commit times spread over
    ``[start, end)`` (default: the hour up to now; never before the previous call's last
    commit), and deliver them as a connector would (see the module doc) in ``files`` files per
    table."""
    rng = random.Random(seed)
    delivery = random.Random(seed * 7919 + 1)  # arrival order: independent of what is committed
    start, end = time_range(start, end, timedelta(hours=1))
    state_path = landing.lake.landing(landing.pipeline.name, ".database.json")
    db = Database.load(state_path)
    db.clock_ms = max(db.clock_ms, _millis(start))
    summary = Summary()
    committed: list[tuple[str, dict[str, Any]]] = []  # (table, event) in commit order

    def envelope(table: str, op: str, before: dict | None, after: dict | None) -> dict[str, Any]:
        return {
            "before": before,
            "after": after,
            "source": {
                "version": "2.7.3.Final", "connector": "postgresql", "name": "crm", "db": "crm",
                "schema": "public", "table": SOURCE_TABLES[table],
                "ts_ms": db.clock_ms, "lsn": db.lsn, "txId": db.lsn // 3,
            },
            "op": op,
            "ts_ms": db.clock_ms + delivery.randrange(5, 500),
        }  # fmt: skip

    if snapshot:  # what a connector reads first: every live row at the log's current position
        for key in sorted(db.customers):
            committed.append((CUSTOMERS, envelope(CUSTOMERS, "r", None, dict(db.customers[key]))))
        for key in sorted(db.orders):
            committed.append((ORDERS, envelope(ORDERS, "r", None, dict(db.orders[key]))))
        summary.snapshot_rows = len(committed)

    step_ms = max(1, int((_millis(end) - db.clock_ms) / max(events, 1)))
    closed: list[Version] = []

    def open_version(row: dict[str, Any]) -> None:
        db.open_versions[row["customer_id"]] = {
            "name": row["name"], "segment": row["segment"], "country": row["country"],
            "valid_from": _iso_millis(db.clock_ms),
        }  # fmt: skip

    def close_version(key: int, op: str) -> None:
        version = db.open_versions.pop(key)
        closed.append(Version(key, **version, valid_to=_iso_millis(db.clock_ms), end_op=op))

    for _ in range(events):
        db.lsn += rng.randrange(1, 5)
        db.clock_ms += rng.choice((0, step_ms // 2, step_ms, step_ms * 2))  # ties within a ms happen
        if db.customers and rng.random() < order_fraction:
            committed.append((ORDERS, _order_change(rng, db, envelope)))
            continue
        roll = rng.random()
        if not db.customers or roll < 0.15:
            if db.deleted and rng.random() < reinsert_fraction:
                key = db.deleted.pop(rng.randrange(len(db.deleted)))
            else:
                key, db.next_customer = db.next_customer, db.next_customer + 1
            row = {
                "customer_id": key,
                "name": rng.choice(FIRST_NAMES),
                "email": f"c{key}.{rng.randrange(1000)}@example.com",
                "segment": rng.choice(SEGMENTS),
                "country": rng.choice(COUNTRIES),
            }
            db.insert("customers", key, row)
            open_version(row)
            committed.append((CUSTOMERS, envelope(CUSTOMERS, "c", None, dict(row))))
        elif roll < 0.15 + delete_fraction:
            key = db.pick(rng, "customers")
            row = db.delete("customers", key)
            db.deleted.append(key)
            close_version(key, "d")
            before = (
                dict(row) if rng.random() < 0.5 else {"customer_id": key}
            )  # replica identity full / default
            committed.append((CUSTOMERS, envelope(CUSTOMERS, "d", before, None)))
        else:
            key = db.pick(rng, "customers")
            before = dict(db.customers[key])
            row = dict(before)
            if rng.random() < tracked_fraction:
                column = rng.choice(TRACKED)
                row[column] = rng.choice(
                    [v for v in (SEGMENTS if column == "segment" else COUNTRIES) if v != row[column]]
                )
                close_version(key, "u")
                open_version(row)
            else:
                column = rng.choice(("name", "email"))
                row[column] = (
                    rng.choice(FIRST_NAMES)
                    if column == "name"
                    else f"c{key}.{rng.randrange(1000)}@example.com"
                )
                db.open_versions[key]["name"] = row["name"]
            db.customers[key] = row
            committed.append((CUSTOMERS, envelope(CUSTOMERS, "u", before, dict(row))))
    summary.changes = len(committed) - summary.snapshot_rows
    summary.customer_changes = sum(1 for table, e in committed if table == CUSTOMERS and e["op"] != "r")
    summary.order_changes = summary.changes - summary.customer_changes
    _deliver(landing, committed, summary, delivery, reorder=reorder, duplicate_fraction=duplicate_fraction,
             malformed_fraction=malformed_fraction, quarantine_fraction=quarantine_fraction,
             prefix=file_prefix or f"changes-{start:%Y%m%dT%H%M%S}-{seed}", files=files)  # fmt: skip
    db.save(state_path)
    summary.customers = {k: dict(v) for k, v in db.customers.items()}
    summary.orders = {k: dict(v) for k, v in db.orders.items()}
    summary.customer_versions = closed + [Version(k, **v) for k, v in sorted(db.open_versions.items())]
    return summary


def _order_change(rng: random.Random, db: Database, envelope: Any) -> dict[str, Any]:
    """Place an order for a live customer, move one along its statuses, or cancel one."""
    roll = rng.random()
    if not db.orders or roll < 0.4:
        key, db.next_order = db.next_order, db.next_order + 1
        row = {
            "order_id": key,
            "customer_id": db.pick(rng, "customers"),
            "amount": round(rng.uniform(5, 500), 2),
            "status": ORDER_STATUSES[0],
            "ordered_at": _iso_millis(db.clock_ms),
        }
        db.insert("orders", key, row)
        return envelope(ORDERS, "c", None, dict(row))
    key = db.pick(rng, "orders")
    if roll < 0.45:
        row = db.delete("orders", key)
        return envelope(ORDERS, "d", dict(row), None)
    before = db.orders[key]
    position = ORDER_STATUSES.index(before["status"])
    row = {**before, "status": ORDER_STATUSES[min(position + 1, len(ORDER_STATUSES) - 1)]}
    if row["status"] == before["status"]:
        row["amount"] = round(row["amount"] * rng.uniform(0.8, 1.0), 2)  # a partial refund
    db.orders[key] = row
    return envelope(ORDERS, "u", dict(before), dict(row))


def _deliver(
    landing: Landing,
    committed: list[tuple[str, dict[str, Any]]],
    summary: Summary,
    rng: random.Random,
    *,
    reorder: int,
    duplicate_fraction: float,
    malformed_fraction: float,
    quarantine_fraction: float,
    prefix: str,
    files: int,
) -> None:
    """Turn commit order into arrival order (see the module doc) and write the lines."""
    arrivals: list[tuple[float, str, str]] = []  # (arrival position, table, line)
    for position, (table, event) in enumerate(committed):
        arrivals.append((position + rng.uniform(0, reorder), table, json.dumps(event)))
        if rng.random() < duplicate_fraction:  # re-sent after a connector restart
            again = {**event, "ts_ms": event["ts_ms"] + rng.randrange(1000, 60_000)}
            arrivals.append((position + rng.uniform(reorder, 4 * reorder), table, json.dumps(again)))
            summary.duplicates += 1
        if rng.random() < quarantine_fraction:
            broken = json.loads(json.dumps(event))
            kind = rng.randrange(3)
            if kind == 0:
                broken["op"] = rng.choice(("t", "m", "x"))  # a truncate, a message, nonsense
            elif kind == 1:
                image = "before" if broken["op"] == "d" else "after"
                key = next(iter(broken[image]))
                broken[image][key] = None
            else:
                broken["source"]["lsn"] = None
            arrivals.append((position + rng.uniform(0, reorder), table, json.dumps(broken)))
            summary.quarantined += 1
        if rng.random() < malformed_fraction:
            text = json.dumps(event)
            arrivals.append((position, table, text[: rng.randrange(5, len(text) - 5)]))
            summary.malformed += 1
    arrivals.sort(key=lambda a: a[0])
    summary.lines = len(arrivals)
    for table in (CUSTOMERS, ORDERS):
        lines = [line for _, t, line in arrivals if t == table]
        for k, chunk in enumerate(chunks(lines, files) if lines else []):
            summary.files.append(str(landing.write_lines(table, f"{prefix}-{k:04d}.json", chunk)))
