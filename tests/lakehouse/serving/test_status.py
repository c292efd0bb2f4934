"""The SQL endpoint's recorded state (``lakehouse.serving.status``): what the supervisor writes as
its server starts, dies, comes back and stops, and how the cockpit reads it."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakehouse.core.config import Settings
from lakehouse.serving.status import STALE_SECONDS, StatusRecorder, endpoints

URL = "jdbc:hive2://127.0.0.1:10000/default"


def record(path: str) -> dict:
    return json.loads(Path(path).read_text())


def test_a_restart_is_an_outage_that_opens_when_the_server_dies_and_closes_when_it_answers(
    tmp_path: Path,
) -> None:
    conf = Settings(root=str(tmp_path / "lake"))
    recorder = StatusRecorder(conf, URL, "127.0.0.1", 10000)
    assert recorder.path == f"{tmp_path}/lake/control/serving/127.0.0.1_10000.json"

    recorder.state("starting")
    recorder.state("up")
    up = record(recorder.path)
    assert (up["state"], up["restarts"], up["outages"], up["reason"]) == ("up", 0, [], None)

    recorder.state("restarting", "the server's process ended (exit code 3)")
    down = record(recorder.path)
    assert (down["state"], down["restarts"]) == ("restarting", 1)
    assert down["reason"] == "the server's process ended (exit code 3)"
    [outage] = down["outages"]
    assert outage["ended"] is None and outage["reason"] == down["reason"]
    [shown] = endpoints(conf)  # as the cockpit shows it: not up
    assert (shown["state"], shown["up"], shown["url"]) == ("restarting", False, URL)

    recorder.state("up")
    again = record(recorder.path)
    assert (again["state"], again["restarts"], again["reason"]) == ("up", 1, None)
    [outage] = again["outages"]
    assert outage["began"] <= outage["ended"]
    assert endpoints(conf)[0]["up"] is True

    recorder.state("stopped", "stopped by its operator")
    assert endpoints(conf)[0]["state"] == "stopped"


def test_a_record_whose_supervisor_stopped_beating_is_down_but_a_stopped_one_stays_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = Settings(root=str(tmp_path / "lake"))
    up = StatusRecorder(conf, URL, "127.0.0.1", 10000)
    up.state("up")
    stopped = StatusRecorder(conf, URL.replace("10000", "10001"), "127.0.0.1", 10001)
    stopped.state("stopped", "stopped by its operator")
    (Path(up.path).parent / "garbage.json").write_text("{not json")

    later = datetime.now(UTC) + timedelta(seconds=STALE_SECONDS + 5)
    with caplog.at_level(logging.WARNING, logger="lakehouse.serve"):
        shown = {e["url"]: e for e in endpoints(conf, now=later)}
    assert "unreadable SQL endpoint record garbage.json" in caplog.text
    assert set(shown) == {URL, URL.replace("10000", "10001")}
    gone = shown[URL]
    assert (gone["state"], gone["up"]) == ("down", False)
    assert gone["reason"].startswith("no heartbeat from `lakehouse serve` for ")
    assert shown[URL.replace("10000", "10001")]["state"] == "stopped"
    assert endpoints(conf)[0]["state"] == "up"  # now: it beats


def test_a_record_that_cannot_be_written_is_logged_and_the_server_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "lake").mkdir()
    (tmp_path / "lake" / "control").write_text("a file where the control directory should be")
    recorder = StatusRecorder(Settings(root=str(tmp_path / "lake")), URL, "127.0.0.1", 10000)
    with caplog.at_level(logging.WARNING, logger="lakehouse.serve"):
        recorder.state("up")
    assert "could not record the SQL endpoint's state" in caplog.text
