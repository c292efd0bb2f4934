"""Failure callback of every generated task: log the alert, record it in ``ops.alerts``
(``lakehouse.monitoring.alerts``, which the cockpit shows), and notify people through the
Airflow connection ``LAKEHOUSE_ALERT_CONN_ID`` (default ``lakehouse_alerts``) when it exists.

The monitor fails its ``check_flows`` task when a flow is stale, failing or out of restarts (one
line per such flow), and the quality DAG its ``verdict_<table>`` task when a table check fails, so
both reach people here. A task that keeps failing for the same reason (the monitor checks every 2
minutes) notifies once per :data:`REPEAT_AFTER`, not at every run: the same message but for its
numbers ("no heartbeat for 16 min", then 18 min) is the same reason; another flow failing too is
not. Every failure is still recorded.

- ``smtp`` connection: Airflow's ``SmtpNotifier`` (host, port, login, password; extra ``to`` (a
  comma-separated list), ``from_email``, ``disable_tls``/``disable_ssl`` as the SMTP provider reads them).
- ``http`` connection: a JSON POST (``{"text": ..., "dag_id": ..., ...}``, which Slack-style
  incoming webhooks accept) to extra ``url``, or to the host when it is a URL.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.request
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from lakehouse.core import times
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.orchestration import pipeline_of

if TYPE_CHECKING:
    from lakehouse.core.config import Settings

log = logging.getLogger("lakehouse.alerts")

REPEAT_AFTER = timedelta(hours=1)
NUMBERS = re.compile(r"\d+")  # what may change while a task fails for the same reason


def on_failure(context: Any) -> None:
    """Airflow ``on_failure_callback``: one ``ops.alerts`` row per failed task (after retries),
    and a notification unless the same task already notified within :data:`REPEAT_AFTER`."""
    raise_alert(settings(), context, str(context.get("exception") or "task failed"))


def raise_alert(conf: Settings, context: Any, message: str, subject: str | None = None) -> None:
    """Record ``message`` as an alert of the context's task in ``ops.alerts`` (and ``ops.events``)
    and notify people, unless the task notified the same reason within :data:`REPEAT_AFTER` and
    said nothing recovered since (a failure's callback, or a task that alerts without failing:
    the monitor's missed freshness objectives)."""
    from lakehouse.monitoring.alerts import AlertLog  # deferred: DAG files parse without pyarrow

    ti = context["ti"]
    message = message[:10_000]
    log.error("ALERT %s.%s (run %s): %s", ti.dag_id, ti.task_id, ti.run_id, message)
    alerts = AlertLog(Lake.from_settings(conf))
    repeated = False
    try:
        recent = alerts.read()
        mine = recent.filter((recent["dag_id"] == ti.dag_id) & (recent["task_id"] == ti.task_id))
        recoveries = mine.filter(mine["message"].str.starts_with("recovered: "))["raised_at"]
        since = max(times.now() - REPEAT_AFTER, recoveries.max() or times.now() - REPEAT_AFTER)
        repeated = bool(
            mine.filter(
                (mine["message"].str.replace_all(NUMBERS.pattern, "#") == NUMBERS.sub("#", message))
                & (mine["raised_at"] > since)
            ).height
        )
        alerts.append(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            try_number=ti.try_number,
            message=message,
        )
        if not repeated:  # a reason once in the event log, not once per monitor run
            _alert_event(conf, ti, "raised", message)
    except Exception:  # the alert is in the task log either way
        log.exception("could not record the alert in ops.alerts")
    if repeated:
        log.info("%s.%s already notified within %s: not notifying again", ti.dag_id, ti.task_id, REPEAT_AFTER)
        return
    try:
        notify(conf, context, message, subject=subject)
    except Exception:  # a mail server down must not hide the task's own failure
        log.exception("could not send the alert through connection %r", conf.alert_conn_id)


def on_recovery(conf: Settings, context: Any, message: str) -> None:
    """What was alerted is fine again (a freshness objective met after it was missed): one
    ``ops.alerts`` row and a notification, through the same connection, saying so."""
    from lakehouse.monitoring.alerts import AlertLog  # deferred: DAG files parse without pyarrow

    ti = context["ti"]
    log.info("RECOVERED %s.%s (run %s): %s", ti.dag_id, ti.task_id, ti.run_id, message)
    try:
        AlertLog(Lake.from_settings(conf)).append(
            dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, try_number=ti.try_number,
            message=f"recovered: {message}",
        )  # fmt: skip
    except Exception:
        log.exception("could not record the recovery in ops.alerts")
    try:
        notify(conf, context, message, subject=f"[lakehouse] {ti.dag_id}: recovered")
    except Exception:
        log.exception("could not send the recovery through connection %r", conf.alert_conn_id)


def _alert_event(conf: Settings, ti: Any, outcome: str, message: str) -> None:
    """The alert (or recovery) in ``ops.events`` too, under the pipeline whose DAG raised it."""
    from lakehouse.monitoring.events import Actor, Event, EventLog  # deferred: as above

    pipeline = pipeline_of(ti.dag_id)
    if pipeline is None:  # a DAG of no pipeline (the platform's maintenance): ops.alerts has it
        return
    actor = Actor(f"task {ti.task_id}", ti.dag_id, ti.run_id)
    EventLog(Lake.from_settings(conf)).record(Event(pipeline, "alert", outcome, (), message, actor=actor))


def notify(conf: Settings, context: Any, message: str, subject: str | None = None) -> str | None:
    """Send the alert through ``conf.alert_conn_id``; how it went (None: no such connection).
    ``subject``: the first line (default: the task failed)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conf.alert_conn_id)
    except AirflowNotFoundException:
        log.info("no Airflow connection %r: the alert is recorded, nobody is notified", conf.alert_conn_id)
        return None
    from airflow.configuration import conf as airflow_conf

    ti = context["ti"]
    base = airflow_conf.get("api", "base_url", fallback="") or ""
    run_url = f"{base.rstrip('/')}/dags/{quote(ti.dag_id)}/runs/{quote(ti.run_id, safe='')}"
    subject = subject or f"[lakehouse] {ti.dag_id}.{ti.task_id} failed"
    extra = conn.extra_dejson
    if conn.conn_type in ("smtp", "email"):
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        html = (
            f"<p><b>{_html(subject)}</b>: {_html(ti.dag_id)}.{_html(ti.task_id)} (run {_html(ti.run_id)}, "
            f'try {ti.try_number}): <a href="{_html(run_url)}">{_html(run_url)}</a></p><pre>{_html(message[:5000])}</pre>'
        )
        SmtpNotifier(
            to=[a.strip() for a in str(extra["to"]).split(",")],
            from_email=extra.get("from_email"),
            subject=subject,
            html_content=html,
            smtp_conn_id=conf.alert_conn_id,
        ).notify(context)
        return f"mailed to {extra['to']}"
    if conn.conn_type in ("http", "https"):
        url = extra.get("url") or (
            conn.host if "://" in (conn.host or "") else f"{conn.conn_type}://{conn.host}"
        )
        body = {
            "text": f"{subject}: {message[:1000]}\n{run_url}",
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "try_number": ti.try_number,
            "message": message[:10_000],
            "url": run_url,
        }
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return f"posted to the webhook: HTTP {answer.status}"
    log.error(
        "connection %r has type %r: alerts go through an 'smtp' or an 'http' connection",
        conf.alert_conn_id,
        conn.conn_type,
    )
    return None


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
