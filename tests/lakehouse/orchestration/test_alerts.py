"""A failed task's alert reaches people through the Airflow connection ``lakehouse_alerts``: mail
to a real local SMTP server (aiosmtpd), or a JSON POST to a real local webhook; once per hour
per task, every failure still recorded in ``ops.alerts``."""

from __future__ import annotations

import json
from email import message_from_bytes
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from aiosmtpd.controller import Controller

from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.alerts import AlertLog
from lakehouse.orchestration.alerts import on_failure, on_recovery
from lakehouse.platform.services import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class Inbox:
    def __init__(self) -> None:
        self.mails: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.mails.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[int, Inbox]]:
    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield port, inbox
    controller.stop()


def fail(task_id: str, message: str, run_id: str = "scheduled__2026-11-23T00:00:00+00:00") -> None:
    ti = SimpleNamespace(dag_id="iot_stream_monitor", task_id=task_id, run_id=run_id, try_number=1)
    on_failure({"ti": ti, "exception": RuntimeError(message)})


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    settings.cache_clear()
    yield Lake(str(tmp_path / "lake"))
    settings.cache_clear()


def test_a_failed_check_is_mailed_once_per_hour_and_always_recorded(
    lake: Lake, smtp: tuple[int, Inbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, inbox = smtp
    connection = {
        "conn_type": "smtp", "host": "127.0.0.1", "port": port,
        "extra": {"to": "oncall@example.com, data@example.com", "from_email": "lakehouse@example.com",
                  "disable_tls": True, "disable_ssl": True},
    }  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_LAKEHOUSE_ALERTS", json.dumps(connection))
    stale = "silver.device_events: STALE - no heartbeat for 16 min"
    fail("check_flows", stale)
    fail("check_flows", stale.replace("16", "18"), run_id="r2")
    [(recipients, mail)] = inbox.mails  # the same reason again within the hour: no mail
    assert recipients == ["oncall@example.com", "data@example.com"]
    assert mail["Subject"] == "[lakehouse] iot_stream_monitor.check_flows failed"
    body = mail.get_payload()[0].get_payload(decode=True).decode()
    assert "STALE - no heartbeat for 16 min" in body and "/dags/iot_stream_monitor/runs/scheduled__" in body
    assert sorted(AlertLog(lake).read()["run_id"].to_list()) == ["r2", "scheduled__2026-11-23T00:00:00+00:00"]

    fail("check_flows", stale + "\ngold.device_status: DEAD - driver is down", run_id="r3")  # a new reason
    assert (
        len(inbox.mails) == 2
        and "gold.device_status: DEAD" in inbox.mails[1][1].get_payload()[0].get_payload(decode=True).decode()
    )
    fail("verdict_silver__device_events", "signal_in_range failed on 3 rows")  # another task: mailed
    assert len(inbox.mails) == 3 and "verdict_silver__device_events" in inbox.mails[2][1]["Subject"]
    assert AlertLog(lake).read().height == 4  # every failure recorded


def test_a_failed_check_is_posted_to_a_webhook(
    lake: Lake, webhook: tuple[str, list[dict]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKEHOUSE_ALERTS", json.dumps({"conn_type": "http", "extra": {"url": url}})
    )
    fail("check_flows", "gold.device_status: EXHAUSTED - 3 restarts in the last hour")
    [post] = received
    assert post["task_id"] == "check_flows" and "EXHAUSTED" in post["message"]
    assert post["text"].startswith("[lakehouse] iot_stream_monitor.check_flows failed: gold.")


def test_without_a_connection_the_alert_is_recorded_and_nothing_fails(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_LAKEHOUSE_ALERTS", raising=False)
    fail("check_flows", "DEAD")
    assert AlertLog(lake).read()["message"].to_list() == ["DEAD"]


def test_the_same_reason_after_a_recovery_is_notified_again(
    lake: Lake, webhook: tuple[str, list[dict]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKEHOUSE_ALERTS", json.dumps({"conn_type": "http", "extra": {"url": url}})
    )
    ti = SimpleNamespace(dag_id="iot_stream_monitor", task_id="check_flows", run_id="r1", try_number=1)
    late = "silver.device_events: freshness objective missed: 40 min old"
    fail("check_flows", late)
    on_recovery(settings(), {"ti": ti}, "silver.device_events: freshness objective met")
    fail("check_flows", late.replace("40", "41"), run_id="r2")  # missed again, minutes later
    assert len(received) == 3, [post["text"] for post in received]  # not held back as a repeat
    assert received[1]["text"].startswith("[lakehouse] iot_stream_monitor: recovered: silver.device_events")
    assert received[2]["text"].startswith("[lakehouse] iot_stream_monitor.check_flows failed: silver.")
    assert "41 min old" in received[2]["message"]
