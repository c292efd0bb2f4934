"""Airflow's SQLite connection on the embedded platform (``make up``).

SQLite serializes writers; Python's default wait for a lock is 5 s, which a busy 2-core machine
exceeds (``airflow backfill create`` failed with "database is locked" in a fresh-clone run while
the scheduler and API server wrote). Airflow imports this dict (``AIRFLOW__DATABASE__SQL_ALCHEMY_
CONNECT_ARGS``) in every process; the stack's Postgres does not take it.
"""

CONNECT_ARGS = {"timeout": 60}
