"""Failure callback of every generated task: log the alert and record it in ``ops.alerts``
(``lakehouse.monitoring.alerts``), where whatever pages people can read it."""

from __future__ import annotations

import logging
from typing import Any

from lakehouse.config import settings
from lakehouse.lake import Lake

log = logging.getLogger("lakehouse.alerts")


def on_failure(context: Any) -> None:
    """Airflow ``on_failure_callback``: one ``ops.alerts`` row per failed task (after retries)."""
    from lakehouse.monitoring.alerts import AlertLog  # deferred: DAG files parse without pyarrow

    ti = context["ti"]
    message = str(context.get("exception") or "task failed")
    log.error("ALERT %s.%s (run %s) failed: %s", ti.dag_id, ti.task_id, ti.run_id, message)
    try:
        AlertLog(Lake.from_settings(settings())).append(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            try_number=ti.try_number,
            message=message[:10_000],
        )
    except Exception:  # the alert is in the task log either way
        log.exception("could not record the alert in ops.alerts")
