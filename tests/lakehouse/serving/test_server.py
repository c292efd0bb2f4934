"""``lakehouse serve`` for real: a JDBC (HiveServer2 protocol) client against the running server."""

from __future__ import annotations

import math
import re
import threading
import time
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyhive.exc import OperationalError

pytestmark = pytest.mark.slow


def _utc(value: datetime | str) -> datetime:
    """PyHive returns Spark's (UTC) timestamps as naive datetimes."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC)


def test_gold_rows_over_jdbc_equal_the_answers_computed_from_the_input(served, demo) -> None:
    stats = served.query(
        "SELECT window_start, device_type, events, avg_signal, min_signal, max_signal "
        "FROM gold.device_type_stats"
    )
    got = {(_utc(r[0]), r[1]): r[2:] for r in stats}
    assert set(got) == set(demo.expected.type_stats)
    for key, (events, avg, low, high) in demo.expected.type_stats.items():
        assert got[key][0] == events, key
        assert math.isclose(got[key][1], avg, rel_tol=1e-9), key
        assert (got[key][2], got[key][3]) == (low, high), key

    status = served.query(
        "SELECT device, device_type, signal, alert, event_time, event_id FROM gold.device_status"
    )
    assert {r[0]: (r[1], r[2], r[3], _utc(r[4]), r[5]) for r in status} == demo.expected.status
    assert any(alert for _, _, alert, _, _ in demo.expected.status.values())  # the data has alerts


def test_a_bad_query_returns_the_engine_error_and_the_server_keeps_serving(served) -> None:
    connection = served.connect()
    try:
        cursor = connection.cursor()
        with pytest.raises(OperationalError) as failure:
            cursor.execute("SELECT no_such_column FROM gold.device_status")
        message = failure.value.args[0].status.errorMessage
        assert "UNRESOLVED_COLUMN" in message and "no_such_column" in message
        with pytest.raises(OperationalError, match="PARSE_SYNTAX_ERROR"):
            cursor.execute("SELEC 1")
        cursor.execute("SELECT count(*) FROM gold.device_status")  # same session still works
        assert cursor.fetchall()[0][0] > 0
    finally:
        connection.close()
    assert served.query("SELECT 1")[0][0] == 1  # and new sessions too
    assert served.process.poll() is None


# As an analyst writes it (no partitioning of their own), and minutes of every core with the
# suite's interpreted expressions (tests/conftest.py; 100M rows took 26 s of two quiet cores,
# 2026-12-04; the range(0, 100000000000) is that much with Spark's code generation).
# At Spark's default it is one long task per core, and a one-row query waits for a free core
# until the runaway ends (or times out); the server splits it into short tasks
# (engine.SHORT_TASKS). Its 40 s timeout (tests/lakehouse/conftest.py)
# cancels it long before it ends.
RUNAWAY = "SELECT count(*) FROM range(0, 1000000000)"


def test_a_runaway_statement_leaves_room_for_others_and_is_cancelled_at_the_timeout(served, demo) -> None:
    outcome: dict[str, str] = {}

    def run_away() -> None:
        try:
            outcome["rows"] = str(served.query(RUNAWAY))
        except OperationalError as exc:
            outcome["error"] = exc.args[0].status.errorMessage

    one_row = "SELECT count(*) FROM gold.device_status"
    served.query(one_row)  # its table's Delta log read once, as an analyst's earlier queries did
    runaway = threading.Thread(target=run_away)
    started = time.monotonic()
    runaway.start()
    time.sleep(3)  # its tasks hold every core of the server
    asked = time.monotonic()
    [(devices,)] = served.query(one_row)
    answered = time.monotonic() - asked
    print(f"one-row query beside a runaway: {answered:.2f} s", flush=True)
    assert devices == len(demo.expected.status)
    assert runaway.is_alive(), "another analyst's query answered while the runaway ran (short tasks, FAIR)"
    runaway.join(timeout=120)
    cancelled = time.monotonic() - started
    print(f"runaway cancelled after {cancelled:.1f} s")
    assert "rows" not in outcome, outcome
    assert outcome["error"].startswith("Expected state FINISHED, but found TIMEDOUT"), (
        outcome
    )  # HiveServer2's words
    assert cancelled < 100, "cancelled at the timeout, not at its end"
    assert served.query("SELECT 1")[0][0] == 1 and served.process.poll() is None


def _running(cursor) -> None:
    """Wait until ``cursor``'s asynchronous statement runs on the server (parsed, jobs started)."""
    from TCLIService.ttypes import TOperationState

    deadline = time.monotonic() + 60
    while cursor.poll().operationState != TOperationState.RUNNING_STATE:
        assert time.monotonic() < deadline, "the statement did not start"
        time.sleep(0.2)
    time.sleep(1)  # RUNNING is set just before the statement is parsed (and counted)


def test_a_user_at_the_statement_limit_is_refused_while_other_users_run(served, demo) -> None:
    """The test server allows 2 statements at once per user (tests/lakehouse/conftest.py)."""
    alice = [served.connect(user="alice") for _ in range(3)]
    cursors = [c.cursor() for c in alice]
    try:
        for n in range(40):  # one after another: each end reaches the limit after its answer does
            cursors[0].execute(f"SELECT {n}")
            assert cursors[0].fetchall() == [(n,)]
        for cursor in cursors[:2]:
            cursor.execute(RUNAWAY, async_=True)
            _running(cursor)
        with pytest.raises(OperationalError) as refused:
            cursors[2].execute("SELECT 1")
        message = refused.value.args[0].status.errorMessage
        assert "too many statements at once: alice already runs 2 statements" in message, message
        assert "LAKEHOUSE_SQL_STATEMENTS_PER_USER" in message

        [(devices,)] = served.query("SELECT count(*) FROM gold.device_status", user="bob")
        assert devices == len(demo.expected.status)  # another user is not held up

        cursors[0].cancel()  # one of alice's ends: her next statement runs
        cancelled = time.monotonic()
        deadline = cancelled + 30
        while True:
            try:
                cursors[2].execute("SELECT 41 + 1")
                break
            except OperationalError as exc:  # the end is reported through Spark's listener bus
                assert "too many statements" in exc.args[0].status.errorMessage
                assert time.monotonic() < deadline, "a cancelled statement still counts after 30 s"
                time.sleep(0.5)
        assert cursors[2].fetchall() == [(42,)]
        print(f"alice's next statement ran {time.monotonic() - cancelled:.1f} s after the cancel")
    finally:
        for cursor in cursors[:2]:
            cursor.cancel()
        for connection in alice:
            connection.close()


def test_a_result_over_the_cap_fails_with_the_reason_and_the_server_keeps_serving(served) -> None:
    """4 MiB per result on the test server: 10,000 rows of 1,000 random characters (LZ4 leaves
    about 6 bits of each) are 7 MiB or more; 1,000 rows of 100 are well under."""
    with pytest.raises(OperationalError) as failure:
        served.query("SELECT randstr(1000) AS s FROM range(0, 10000)")
    message = failure.value.args[0].status.errorMessage
    assert "is bigger than spark.driver.maxResultSize (4.0 MiB)" in message, message
    rows = served.query("SELECT randstr(100) AS s FROM range(0, 1000)")
    assert len(rows) == 1000 and all(len(s) == 100 for (s,) in rows)
    assert served.process.poll() is None


def test_time_travel_over_jdbc_returns_the_rows_before_the_backfill(served, demo) -> None:
    version = demo.before["gold.device_status"]
    old = served.query(f"SELECT device, event_id FROM gold.device_status VERSION AS OF {version}")
    assert {r[0]: r[1] for r in old} == {
        r["device"]: r["event_id"] for r in demo.before_rows["gold.device_status"]
    }
    now = served.query("SELECT device, event_id FROM gold.device_status")
    assert {r[0]: r[1] for r in now} != {r[0]: r[1] for r in old}  # the backfill changed it


def test_a_newly_declared_table_appears_without_ddl_and_leaves_with_its_spec(served) -> None:
    """A pipeline declared while the server runs: its table is queryable as soon as it is
    written; removing the declaration removes the name (the data stays)."""
    extra = served.pipelines_dir / "extra"
    extra.mkdir()
    (extra / "__init__.py").touch()
    (extra / "pipeline.py").write_text(
        "from lakehouse.spec import Ingest, JsonFiles, Pipeline, StreamingTable\n"
        "pipeline = Pipeline(name='extra', tables=[\n"
        "    Ingest('bronze.extra_events', source=JsonFiles(schema='id STRING NOT NULL')),\n"
        "    StreamingTable('gold.extra_counts', upstreams=['bronze.extra_events'], transform='transforms:count'),\n"
        "])\n"
    )
    path = f"{served.env['LAKEHOUSE_ROOT']}/tables/gold/extra_counts"
    write_deltalake(path, pa.table({"id": ["a", "b"], "n": [1, 2]}))
    tables = {"device_type_stats", "device_status", "extra_counts"}
    assert served.wait_for_tables("gold", tables) == tables, served.log_tail()
    assert sorted(served.query("SELECT id, n FROM gold.extra_counts")) == [("a", 1), ("b", 2)]

    (extra / "pipeline.py").unlink()
    tables = {"device_type_stats", "device_status"}
    assert served.wait_for_tables("gold", tables) == tables, served.log_tail()
    assert DeltaTable(path).count() == 2


def test_statements_that_would_exhaust_the_server_are_refused_and_a_dead_jvm_is_restarted(
    served, demo
) -> None:
    """Partition counts are the server's (REPARTITION(1000000) of a 20-row table took it down);
    should its JVM die anyway, ``lakehouse serve`` starts a new one on the same port."""
    import psutil

    for sql in (
        "SELECT /*+ REPARTITION(1000000) */ * FROM gold.device_status",
        "SELECT count(*) FROM range(0, 100000000000, 1, 2)",
    ):
        with pytest.raises(OperationalError, match="partition counts are the server's to choose"):
            served.query(sql)
    from lakehouse.core.config import Settings
    from lakehouse.serving.status import endpoints

    def status() -> dict:  # the endpoint's state as the cockpit and Prometheus show it
        conf = Settings(root=served.env["LAKEHOUSE_ROOT"])
        return next(e for e in endpoints(conf) if e["url"] == served.url)

    before = status()
    assert before["state"] == "up", before
    jvms = [p for p in psutil.Process(served.process.pid).children(recursive=True) if p.name() == "java"]
    assert len(jvms) == 1, jvms
    ready_lines = served.log.read_text(errors="replace").count("lakehouse serve: ready on")
    killed = time.monotonic()
    jvms[0].kill()  # as the kernel's OOM killer would
    restarting = outage = None
    deadline = killed + 240
    while time.monotonic() < deadline:
        text = served.log.read_text(errors="replace")
        if restarting is None and re.search(r"starting\s+it\s+again", text):  # the log wraps lines
            restarting = time.monotonic() - killed
        if outage is None and status()["state"] == "restarting":
            outage = time.monotonic() - killed
        if text.count("lakehouse serve: ready on") > ready_lines:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"not serving again 240 s after its JVM died:\n{served.log_tail()}")
    print(
        f"JVM killed: restart began after {restarting:.1f} s, shown as an outage after {outage:.1f} s, "
        f"serving after {time.monotonic() - killed:.1f} s"
    )
    assert restarting is not None and restarting < 10, served.log_tail()
    assert outage is not None and outage < 10, "the cockpit did not show the outage"
    settled = time.monotonic() + 10  # the supervisor looks at the port every half second
    while (after := status())["state"] != "up" and time.monotonic() < settled:
        time.sleep(0.5)
    assert (after["state"], after["restarts"]) == ("up", before["restarts"] + 1), after
    assert after["outages"][-1]["ended"] is not None and "exit code" in after["outages"][-1]["reason"]
    tables = {"device_type_stats", "device_status"}
    assert served.wait_for_tables("gold", tables) >= tables
    [(devices,)] = served.query("SELECT count(*) FROM gold.device_status")
    assert devices == len(demo.expected.status)
    assert served.process.poll() is None
