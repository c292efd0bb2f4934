"""Failure callback of every generated task: log the alert and record it in ``ops.alerts``.

``ops.alerts`` is a Delta table (written with delta-rs, no Spark), so the history of alerts can
be queried like any other table and read by whatever pages people (a webhook, a chat bot).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse.config import settings
from lakehouse.lake import Lake

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("lakehouse.alerts")

ALERTS_TABLE = "ops.alerts"


def schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("raised_at", pa.timestamp("us", tz="UTC")),
            ("dag_id", pa.string()),
            ("task_id", pa.string()),
            ("run_id", pa.string()),
            ("try_number", pa.int64()),
            ("message", pa.string()),
        ]
    )


def on_failure(context: Any) -> None:
    """Airflow ``on_failure_callback``: one ``ops.alerts`` row per failed task (after retries)."""
    from lakehouse.monitoring.ops_tables import append_rows

    ti = context["ti"]
    message = str(context.get("exception") or "task failed")
    log.error("ALERT %s.%s (run %s) failed: %s", ti.dag_id, ti.task_id, ti.run_id, message)
    row = {
        "raised_at": datetime.now(UTC),
        "dag_id": ti.dag_id,
        "task_id": ti.task_id,
        "run_id": ti.run_id,
        "try_number": ti.try_number,
        "message": message[:10_000],
    }
    try:
        append_rows(Lake.from_settings(settings()).table(ALERTS_TABLE), schema(), [row])
    except Exception:  # the alert is in the task log either way
        log.exception("could not record the alert in %s", ALERTS_TABLE)
