"""Airflow's SQLite connection on the embedded platform (``make up``).

SQLite serializes writers, and two things failed ``airflow backfill create`` with "database is
locked" in fresh-clone runs while the scheduler and API server wrote:

- Python's default wait for the lock is 5 s, which a busy 2-core machine exceeds: 60 s here.
- A transaction that reads before it writes cannot wait at all. Airflow creates each backfill
  run inside ``session.begin_nested()``: the ``SAVEPOINT`` opens a deferred transaction, its
  reads pin a WAL snapshot, and when another process commits before the ``INSERT``, SQLite
  refuses the upgrade at once (``SQLITE_BUSY_SNAPSHOT``: no busy timeout applies). A savepoint
  that opens a transaction here opens it ``IMMEDIATE``: it waits for the lock first, then reads.

Other transactions keep Python's behaviour (reads outside a transaction, ``BEGIN`` just before the
first write, which waits). Airflow imports this dict (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_
ARGS``) in every process; the stack's Postgres does not take it.
"""

from __future__ import annotations

import sqlite3
from typing import Any


class _Cursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        if not self.connection.in_transaction and sql.lstrip()[:9].upper() == "SAVEPOINT":
            super().execute("BEGIN IMMEDIATE")
        return super().execute(sql, parameters)


class ImmediateSavepoints(sqlite3.Connection):
    """A connection whose outermost savepoint takes the write lock before anything is read."""

    def cursor(self, factory: Any = _Cursor) -> sqlite3.Cursor:  # type: ignore[override]
        return super().cursor(factory)


CONNECT_ARGS = {"timeout": 60, "factory": ImmediateSavepoints}
