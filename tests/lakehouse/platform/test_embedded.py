"""``make up`` from this checkout: Airflow standalone with the project's DAGs, triggered over the
REST API v2 and from a real browser (Debian's headless Chromium driven by Playwright); then
``make down`` leaves nothing running."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, unquote

import polars as pl
import pytest

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.lineage import LineageLog
from lakehouse.monitoring.ops_tables import exists, read_table
from lakehouse.plan.generators import Landing
from lakehouse.platform.services import MARKER, Platform, free_port, port_in_use
from lakehouse.state.control import FlowControl

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]  # fmt: skip


# Playwright's assertions wait 5 s by default, not the page's timeout: on a loaded 2-core machine
# Airflow's UI took longer than that to render a reloaded run page (CI, 2026-11-27).
EXPECT_TIMEOUT_MS = 60_000


def get_run(platform: Platform, dag_id: str, run_id: str) -> dict:
    return platform.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")


def wait_for_run(platform: Platform, dag_id: str, run_id: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = get_run(platform, dag_id, run_id)
        if run["state"] in ("success", "failed"):
            return run
        time.sleep(3)
    raise AssertionError(f"{dag_id} run {run_id} did not finish in {timeout:.0f} s")


def latest_run(platform: Platform, dag_id: str) -> dict:
    runs = platform.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=1")["dag_runs"]
    assert runs, f"no run of {dag_id}"
    return runs[0]


def leftovers(platform_dir: Path, pgids: set[int]) -> list[str]:
    """Live processes of the platform: in one of its process groups, or with its marker or its
    Airflow home in their environment."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = process.environ()
            if (
                os.getpgid(process.pid) in pgids
                or str(platform_dir) in env.get(MARKER, "")
                or env.get("AIRFLOW_HOME") == str(platform_dir / "airflow")
            ):
                found.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])[:120]}")
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def a_clean_checkout() -> bool:
    """As CI's fresh clone, and a newcomer's: no lake or platform state in the checkout, and
    the default ports free. Then ``make up`` runs with every default location; elsewhere (a
    developer's checkout with their own platform up) it takes its own ports and directories."""
    defaults = Settings()
    return not (
        (REPO / "lakehouse").exists()
        or defaults.platform_dir.exists()
        or port_in_use(defaults.airflow_port)
        or port_in_use(defaults.serve_port)
    )


def make(target: str, env: dict[str, str], timeout: float = 900) -> str:
    """``make -s <target>`` from the repository root, as the README says; its output."""
    done = subprocess.run(
        ["make", "-s", target], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"make {target}: " + done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def process_groups(conf: Settings) -> set[int]:
    """The process groups of the services ``make up`` started (each service leads its group)."""
    states = [json.loads(f.read_text()) for f in (conf.platform_dir / "run").glob("*.json")]
    return {state["pid"] for state in states if "pid" in state}


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory):
    """The platform started with `make up`, stopped with `make down`: with every default location
    (the lake in ./lakehouse, state in ./.platform, ports 8080 and 10000) in a clean checkout,
    else with its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_") and k != "AIRFLOW_HOME"}
    env.update(
        LAKEHOUSE_SHUFFLE_PARTITIONS="2",
        LAKEHOUSE_SPARK_UI="false",
        # the JVM options and Spark settings tests/conftest.py gives every driver of the suite
        LAKEHOUSE_DRIVER_JAVA_OPTIONS=os.environ["LAKEHOUSE_DRIVER_JAVA_OPTIONS"],
        LAKEHOUSE_SPARK_CONF=os.environ["LAKEHOUSE_SPARK_CONF"],
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        # no scheduled runs competing for the two cores: the tests trigger what they need
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
    )
    newcomer = a_clean_checkout()
    if newcomer:
        conf = Settings(root=str(REPO / "lakehouse"))
    else:
        base = tmp_path_factory.mktemp("platform")
        env.update(
            LAKEHOUSE_AIRFLOW_PORT=str(free_port()),
            LAKEHOUSE_SERVE_PORT=str(free_port()),
            LAKEHOUSE_PLATFORM_DIR=str(base / "state"),
            LAKEHOUSE_ROOT=str(base / "lake"),
        )
        conf = Settings(
            root=env["LAKEHOUSE_ROOT"],
            platform_dir=Path(env["LAKEHOUSE_PLATFORM_DIR"]),
            airflow_port=int(env["LAKEHOUSE_AIRFLOW_PORT"]),
            serve_port=int(env["LAKEHOUSE_SERVE_PORT"]),
        )
    try:
        output = make("up", env)
        yield Platform(conf), output, env
    finally:
        pgids = process_groups(conf)
        down = make("down", env, timeout=600)
        assert "Stopped." in down
        assert leftovers(conf.platform_dir, pgids) == [], "make down stops exactly what make up started"
        if newcomer:  # the checkout is clean again: the next run is a newcomer's too
            shutil.rmtree(conf.root)
            shutil.rmtree(conf.platform_dir)


@pytest.mark.slow
def test_make_up_prints_where_and_how_to_log_in(platform) -> None:
    running, output, _ = platform
    match = re.search(r"Airflow UI\s+(http://127\.0\.0\.1:\d+)\s+login: admin / (\S+)", output)
    assert match, output
    assert match[1] == running.url and match[2] == running.password()
    assert {s["dag_id"] for s in running.api("GET", "/api/v2/dags?limit=100")["dags"]} >= {
        "iot_stream_deploy", "iot_stream_monitor", "iot_stream_stop", "iot_incremental", "iot_backfill",
    }  # fmt: skip
    landing = Path(running.conf.root) / "landing" / "iot" / "device_events"
    assert any(landing.glob("*.json")), "the generator feeds the landing zone"
    assert f"jdbc:hive2://127.0.0.1:{running.conf.serve_port}/default" in output
    assert port_in_use(running.conf.serve_port), "make up starts the SQL server"
    assert f"{running.url}/quality-docs/" in output
    pool = running.api("GET", "/api/v2/pools/lakehouse_drivers")  # Spark-driver tasks queue in it
    assert pool["slots"] == max(1, (os.cpu_count() or 2) // 2), pool


def operate_block(name: str) -> str:
    page = (REPO / "docs" / "operate.md").read_text()
    match = re.search(rf"<!-- run: {name} -->\n```bash\n(.*?)\n```", page, re.DOTALL)
    assert match, f"docs/operate.md has no '<!-- run: {name} -->' block"
    return match[1]


def test_the_readme_starts_with_make_up_and_make_test() -> None:
    readme = (REPO / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)\n```", readme, re.DOTALL)[1].splitlines()
    assert [line.split()[:2] for line in first] == [["make", "up"], ["make", "test"]]
    assert "docs/operate.md" in readme


@pytest.mark.slow
def test_trigger_over_the_rest_api_as_the_readme_shows(platform) -> None:
    running, _, _ = platform
    env = {
        **os.environ,
        "LAKEHOUSE_AIRFLOW_PORT": str(running.conf.airflow_port),
        "LAKEHOUSE_PLATFORM_DIR": str(running.conf.platform_dir),
    }
    script = operate_block("trigger-over-rest")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run = json.loads(result.stdout)
    assert run["dag_id"] == "iot_stream_monitor" and run["conf"] == {"restart": False}
    finished = wait_for_run(running, "iot_stream_monitor", run["dag_run_id"])
    assert finished["state"] == "success"
    run_path = f"/api/v2/dags/iot_stream_monitor/dagRuns/{quote(run['dag_run_id'], safe='')}"
    tasks = running.api("GET", f"{run_path}/taskInstances")
    assert {t["task_id"]: t["state"] for t in tasks["task_instances"]} == {"check_flows": "success"}


def backfill_dag_page(browser, running: Platform):
    """``iot_backfill``'s page in Airflow's UI, logged in as the admin."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{running.url}/dags/iot_backfill")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(running.password())
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/dags/iot_backfill")
    return page


def bronze_alone(dialog) -> None:
    """The trigger dialog's Run Parameters narrowed to bronze, without the tables below it."""
    from playwright.sync_api import expect

    dialog.locator("#element_flows").fill("bronze.device_events")
    switch = 'input[name="element_downstream"]'  # on by default
    dialog.locator(f"label:has({switch})").click()
    expect(dialog.locator(switch)).not_to_be_checked()


@pytest.mark.slow
def test_a_browser_triggers_a_backfill_with_params_and_sees_it_succeed(platform) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)

    running, _, _ = platform
    assert CHROMIUM.exists(), "Debian's chromium is missing: run `make browser` (apt-get install chromium)"
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    # The slice holds every landed event: from the day of the generator's first (it started with
    # the platform; late events are at most minutes older, an hour covers them) through today,
    # so a run that crosses midnight still backfills everything it checks below.
    first = datetime.fromisoformat(running.first_started()) - timedelta(hours=1)
    first_day = first.replace(hour=0, minute=0, second=0, microsecond=0)
    start, end = first_day.strftime("%Y-%m-%d"), (today + timedelta(days=1)).strftime("%Y-%m-%d")
    # Unpausing schedules the nightly run of yesterday's slice (a JVM for an empty slice, ahead of
    # ours): record it as done, the scheduler creates no second run for a logical date.
    yesterday = (today - timedelta(days=1)).isoformat()
    done = running.api("POST", "/api/v2/dags/iot_backfill/dagRuns", {"logical_date": yesterday})
    running.api(
        "PATCH",
        f"/api/v2/dags/iot_backfill/dagRuns/{quote(done['dag_run_id'], safe='')}",
        {"state": "success"},
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = backfill_dag_page(browser, running)

        page.get_by_role("button", name="Trigger").first.click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_text("Slice start, UTC")).to_be_visible()  # the params' descriptions
        dialog.locator("#element_start").fill(start)
        dialog.locator("#element_end").fill(end)
        bronze_alone(dialog)
        dialog.get_by_test_id("trigger-dag-submit").click()  # "Unpause on trigger" is ticked
        # the trigger answers once Airflow (SQLite) created the run: over a minute once on a loaded
        # 2-core machine (fresh-clone CI, 2026-12-07)
        page.wait_for_url("**/dags/iot_backfill/runs/manual__*", timeout=180_000)
        run_id = page.url.rsplit("/runs/", 1)[1]

        # The run is followed over the API: reloading Airflow's UI every few seconds kept a core
        # busy rendering it. The page is opened again once the run is over, and says so.
        run = wait_for_run(running, "iot_backfill", unquote(run_id))
        page.reload()
        expect(page.get_by_text("Success", exact=True).first).to_be_visible()
        page.screenshot(path=str(Path(running.conf.platform_dir) / "backfill-success.png"))
        browser.close()

    run_path = f"/api/v2/dags/iot_backfill/dagRuns/{quote(unquote(run_id), safe='')}"
    [task] = running.api("GET", f"{run_path}/taskInstances")["task_instances"]
    assert task["pool"] == "lakehouse_drivers", task
    assert run["state"] == "success" and run["conf"]["start"] == start
    assert run["conf"]["flows"] == ["bronze.device_events"] and run["conf"]["downstream"] is False
    lake = Lake(running.conf.root)
    assert not exists(lake.table("silver.device_events")), "the table below bronze was written"
    bronze = read_table(lake.table("bronze.device_events")).filter(pl.col("event_time").is_not_null())
    assert bronze.height > 0, "bronze was not backfilled"
    assert bronze["event_time"].min() >= first_day and bronze["event_time"].max() < today + timedelta(days=1)


@pytest.mark.slow
def test_airflow_backfill_create_runs_each_daily_slice_through_the_coordination(platform) -> None:
    """Airflow's own backfill, from its CLI and from the UI's backfill dialog: one run per
    completed daily interval of ``iot_backfill``, each a ``lakehouse backfill`` of its slice. Events
    landed for that day are in bronze once each afterwards, whatever the live streams did."""
    from pipelines.iot.generator import generate

    running, _, env = platform
    iot = registry.get("pipelines", "iot").configured("files")
    # the day before yesterday: the browser's backfill test records a run for yesterday
    day_start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
    landed = generate(
        Landing(Lake(running.conf.root), iot), events=120, files=1, seed=31, file_prefix="yesterday",
        start=day_start + timedelta(hours=9), end=day_start + timedelta(hours=10),
        late_fraction=0, duplicate_fraction=0, malformed_fraction=0,
    )  # fmt: skip
    day = day_start.strftime("%Y-%m-%d")
    # the tests' platform creates its DAGs paused (make up's do not): runs of a paused DAG wait
    running.api("PATCH", "/api/v2/dags/iot_backfill", {"is_paused": False})
    conf = json.dumps({"flows": ["bronze.device_events"], "downstream": False})
    script = (  # as docs/operate.md says: the running platform's environment, then Airflow's CLI
        'eval "$(.venv/bin/python -m lakehouse.platform.embedded env)"\n'
        f".venv/bin/airflow backfill create --dag-id iot_backfill --from-date {day} --to-date {day} "
        f"--dag-run-conf '{conf}' --reprocess-behavior completed"
    )
    created = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]

    runs = running.api("GET", "/api/v2/dags/iot_backfill/dagRuns?limit=50")["dag_runs"]
    [run] = [r for r in runs if r["logical_date"].startswith(day) and r["run_type"] == "backfill"]
    finished = wait_for_run(running, "iot_backfill", run["dag_run_id"])
    assert finished["state"] == "success" and finished["conf"]["flows"] == ["bronze.device_events"], finished
    bronze = read_table(Lake(running.conf.root).table("bronze.device_events"))
    mine = bronze.filter(pl.col("event_id").is_in(list(landed.event_ids)))
    assert sorted(mine["event_id"]) == sorted(landed.event_ids), "each landed event once in bronze"
    assert mine["event_time"].min() >= day_start and mine["event_time"].max() < day_start + timedelta(days=1)

    # the day before, from the UI's backfill dialog, which sends the form's parameters only when
    # "Override parameters on existing runs" is ticked (Airflow 3.3; unticked, every run of the
    # backfill takes the DAG's defaults: all flows, downstream)
    earlier = day_start - timedelta(days=1)
    landed = generate(
        Landing(Lake(running.conf.root), iot), events=60, files=1, seed=32, file_prefix="earlier",
        start=earlier + timedelta(hours=9), end=earlier + timedelta(hours=10),
        late_fraction=0, duplicate_fraction=0, malformed_fraction=0,
    )  # fmt: skip
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    deadline = time.monotonic() + 120  # one backfill of a DAG at a time: the CLI's must be complete
    while any(
        b["completed_at"] is None
        for b in running.api("GET", "/api/v2/backfills?dag_id=iot_backfill")["backfills"]
    ):
        assert time.monotonic() < deadline, "the CLI's backfill is not marked complete"
        time.sleep(3)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = backfill_dag_page(browser, running)
        page.get_by_role("button", name="Trigger").first.click()
        dialog = page.get_by_role("dialog").first
        dialog.get_by_text("Backfill", exact=True).first.click()
        for picker in (0, 1):  # From, To: the same day
            dialog.get_by_test_id("datetime-input").nth(picker).click()
            calendar = page.locator("[data-scope=popover][data-part=content]:not([hidden])").last
            calendar.get_by_placeholder("YYYY/MM/DD").fill(earlier.strftime("%Y/%m/%d"))
            calendar.get_by_placeholder("HH:mm").fill("00:00")
            page.keyboard.press("Escape")
        expect(dialog.get_by_text("1 run will be triggered.")).to_be_visible()
        dialog.get_by_text("Override parameters on existing runs").click()
        bronze_alone(dialog)
        dialog.get_by_role("button", name="Run Backfill").click()
        expect(page.get_by_text("Backfill in progress").first).to_be_visible()
        browser.close()
    deadline = time.monotonic() + 120
    while True:  # the backfill's run: the one not made by the CLI above
        runs = running.api("GET", "/api/v2/dags/iot_backfill/dagRuns?limit=50")["dag_runs"]
        made = [r for r in runs if r["run_type"] == "backfill" and r["dag_run_id"] != run["dag_run_id"]]
        if made or time.monotonic() > deadline:
            break
        time.sleep(3)
    backfills = running.api("GET", "/api/v2/backfills?dag_id=iot_backfill")["backfills"]
    assert len(made) == 1, f"runs: {runs}; backfills: {backfills}"
    assert made[0]["data_interval_start"].startswith(earlier.strftime("%Y-%m-%d")), made
    finished = wait_for_run(running, "iot_backfill", made[0]["dag_run_id"])
    assert finished["run_type"] == "backfill" and finished["state"] == "success", finished
    assert finished["conf"]["flows"] == ["bronze.device_events"] and finished["conf"]["downstream"] is False
    bronze = read_table(Lake(running.conf.root).table("bronze.device_events"))
    mine = bronze.filter(pl.col("event_id").is_in(list(landed.event_ids)))
    assert sorted(mine["event_id"]) == sorted(landed.event_ids), "each event of the day once in bronze"


def flow_state(page, flow: str) -> str:
    return page.locator(f'tr[data-flow="{flow}"] .state').first.inner_text()


def assert_flow_runs_name_the_airflow_tasks_that_started_them(lake: Lake) -> None:
    """Airflow's OpenLineage provider recorded its task runs in ops.lineage (where the platform
    points it by default), and each flow's stream run names the task that started its driver as
    parent and that task's DAG run as root: the deploy's, for "deploy all"."""
    wanted = {("iot_stream_deploy.deploy", "COMPLETE"), ("iot_stream_deploy", "COMPLETE")}
    deadline = time.monotonic() + 120  # a task's end is reported after Airflow marks it done
    while True:
        events = LineageLog(lake).events()
        ended = {(e["job"]["name"], e["eventType"]) for e in events if e["job"]["namespace"] != "lakehouse"}
        if wanted <= ended or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert wanted <= ended, ended
    airflow = {e["run"]["runId"]: e["job"]["name"] for e in events if e["job"]["namespace"] != "lakehouse"}
    starts = [e for e in events if e["job"]["namespace"] == "lakehouse" and e["eventType"] == "START"]
    parents = [e["run"]["facets"]["parent"] for e in starts]
    assert all(airflow.get(p["run"]["runId"]) == p["job"]["name"] for p in parents), parents
    assert all(p["root"]["job"]["name"] == p["job"]["name"].split(".")[0] for p in parents), parents
    by_deploy = {
        e["job"]["name"]
        for e, p in zip(starts, parents, strict=True)
        if p["job"]["name"] == "iot_stream_deploy.deploy"
    }
    assert "iot.bronze.device_events" in by_deploy, by_deploy


@pytest.mark.slow
def test_the_cockpit_deploys_a_flow_sees_it_healthy_with_charts_and_stops_it(platform) -> None:
    """As an operator would: the Lakehouse entry in Airflow's navigation, the pipeline page,
    "deploy all" from the page, bronze turns healthy and its charts fill, stop it from the page
    (the other flows run on: the next test stops them with ``make down``)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)

    running, _, _ = platform
    flow = "bronze.device_events"
    shots = Path(running.conf.platform_dir)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.set_default_timeout(60_000)
        page.on("dialog", lambda dialog: dialog.accept())  # "deploy bronze.device_events?"
        page.goto(f"{running.url}/lakehouse/")  # not logged in: Airflow's login, then back here
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill(running.password())
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/lakehouse/")
        expect(page.locator('section[data-pipeline="iot"]')).to_be_visible()
        expect(page.locator('section[data-pipeline="ads"]')).to_be_visible()
        assert flow_state(page, flow) == "stopped"

        page.goto(f"{running.url}/")  # the entry in Airflow's navigation opens the cockpit in the UI
        page.get_by_role("link", name="Lakehouse").first.click()
        expect(page.frame_locator("iframe").locator('section[data-pipeline="iot"]')).to_be_visible()

        page.goto(f"{running.url}/lakehouse/#/pipeline/iot")
        expect(page.locator("svg[aria-label='flow graph']")).to_be_visible()
        page.locator('button[data-act="deploy"]:not([data-flow])').click()  # "deploy all"
        expect(page.locator("#log")).to_contain_text("deploy triggered: iot_stream_deploy", timeout=240_000)
        deadline = time.monotonic() + 420
        while flow_state(page, flow) != "healthy":
            assert time.monotonic() < deadline, (
                f"{flow} is {flow_state(page, flow)} 7 minutes after the deploy"
            )
            page.wait_for_timeout(5000)
        # the deploy's plan, on the page (new, or unchanged when a backfill above started bronze's checkpoint)
        expect(page.locator("section[data-plan] h2")).to_contain_text("by iot_stream_deploy")
        expect(page.locator(f'section[data-plan] tr[data-flow="{flow}"] .pill')).to_have_text(
            re.compile(r"^(new|unchanged)$")
        )
        page.select_option("#range", "0.25")
        # bronze's charts fill: a series of one point is a dot (its path has no extent: "hidden")
        drawn = page.locator(".chart circle, .chart path[d*='L']")
        expect(drawn).not_to_have_count(0, timeout=120_000)
        page.screenshot(path=str(shots / "cockpit-pipeline.png"), full_page=True)
        # column lineage, as silver's flow reported it when it started: a column's upstream,
        # in the list and outlined on the graph
        silver_signal = '["silver.device_events","signal"]'
        expect(page.locator(f"#column option[value='{silver_signal}']")).to_have_count(1, timeout=240_000)
        page.select_option("#column", silver_signal)
        expect(page.locator("[data-upstream]")).to_contain_text("bronze.device_events.signal")
        expect(page.locator('svg g[data-node="bronze.device_events"]')).to_have_class(re.compile(r"\bup\b"))
        page.screenshot(path=str(shots / "cockpit-lineage.png"), full_page=True)
        page.goto(f"{running.url}/lakehouse/")
        expect(page.locator(f'section[data-pipeline="iot"] tr[data-flow="{flow}"] .state')).to_have_text(
            "healthy"
        )
        page.screenshot(path=str(shots / "cockpit-overview.png"), full_page=True)

        # the deploy task holds the pipeline's operations until every flow of "deploy all" runs,
        # and a stop waits its turn: on a loaded CI machine that took minutes (2026-11-28)
        deploy = latest_run(running, "iot_stream_deploy")
        assert wait_for_run(running, "iot_stream_deploy", deploy["dag_run_id"])["state"] == "success"
        assert_flow_runs_name_the_airflow_tasks_that_started_them(Lake.from_settings(running.conf))
        page.goto(f"{running.url}/lakehouse/#/pipeline/iot")
        page.locator(f'button[data-act="stop"][data-flow="{flow}"]').click()
        expect(page.locator("#log")).to_contain_text("stop: asking Airflow to run iot_stream_stop")  # heard
        # Airflow's API on SQLite answered only after more than a minute once, with a deploy's
        # drivers and two other test workers on the two cores (fresh-clone run, 2026-12-06)
        expect(page.locator("#log")).to_contain_text("stop triggered: iot_stream_stop", timeout=240_000)
        deadline = time.monotonic() + 300
        while flow_state(page, flow) != "stopped":
            if time.monotonic() > deadline:
                stop = latest_run(running, "iot_stream_stop")
                raise AssertionError(
                    f"{flow} is {flow_state(page, flow)} 5 minutes after the stop; the stop's run: {stop}"
                )
            page.wait_for_timeout(5000)

        viewer = browser.new_page(viewport={"width": 1500, "height": 1100})  # make up's read-only login
        viewer.goto(f"{running.url}/lakehouse/#/pipeline/iot")
        viewer.get_by_label("Username").fill("viewer")
        viewer.get_by_label("Password").fill(running.password("viewer"))
        viewer.get_by_role("button", name="Sign in").click()
        viewer.wait_for_url("**/lakehouse/")  # the login's "next" has no #fragment: open the page again
        viewer.goto(f"{running.url}/lakehouse/#/pipeline/iot")
        expect(viewer.get_by_text("read-only: your Airflow role may not trigger DAGs")).to_be_visible()
        expect(viewer.locator(f'tr[data-flow="{flow}"] .state')).to_have_text("stopped")  # sees
        buttons = viewer.locator("button[data-act]")
        assert buttons.count() >= 5 and all(b.is_disabled() for b in buttons.all())  # cannot act
        browser.close()
    audit = running.api("GET", "/api/v2/eventLogs?dag_id=iot_stream_deploy&event=trigger_dag_run")
    assert [e["owner"] for e in audit["event_logs"]] == ["admin"]  # Airflow's audit log names the user


@pytest.mark.slow
def test_deploy_make_down_and_make_up_again_as_the_readme_says(platform, poll) -> None:
    """The README's first hour, in a clean checkout with every default: ``iot_stream_deploy``
    triggered (by the cockpit's "deploy all" above), the flows turn healthy; ``make down`` stops each after its micro-batch
    and leaves no process of the platform; ``make up`` again starts with the flows still deployed
    (the monitor resumes them). The fixture's ``make down`` ends it a second time."""
    running, _, env = platform
    control = FlowControl.of(running.conf, "iot")
    flows = [
        flow
        for flow in registry.get("pipelines", "iot").configured("files").table_names
        if control.deployment(flow)
    ]
    if not flows:  # run alone: the cockpit's "deploy all" above did not run
        flows = registry.get("pipelines", "iot").configured("files").table_names
        running.api("PATCH", "/api/v2/dags/iot_stream_deploy", {"is_paused": False})
        running.api("POST", "/api/v2/dags/iot_stream_deploy/dagRuns", {"logical_date": None})
    assert len(flows) >= 4, flows

    def states() -> dict[str, str]:
        page = running.api("GET", "/lakehouse/api/pipelines/iot")  # what the cockpit shows
        return {flow["flow"]: flow["state"] for flow in page["flows"] if flow["flow"] in flows}

    poll(lambda: set(states().values()) == {"healthy"}, 420, f"{flows} healthy after the deploy", interval=5)

    pgids = process_groups(running.conf)
    down = make("down", env, timeout=600)
    for flow in flows:  # graceful, all at once, and still deployed
        assert re.search(rf"iot {re.escape(flow)}: stopped in [0-9.]+ s .*still deployed", down), down
    assert leftovers(running.conf.platform_dir, pgids) == [], "make down left processes behind"
    assert not port_in_use(running.conf.airflow_port) and not port_in_use(running.conf.serve_port)

    again = make("up", env)
    assert "Lakehouse is up." in again
    assert "stopped" not in states().values(), states()  # deployed, down until the monitor runs
    assert all(control.deployment(flow) for flow in flows), "make down undeployed a flow"


def test_make_down_stops_the_flows_of_every_pipeline_at_once(tmp_path: Path) -> None:
    """One stop window for all pipelines: each stand-in driver below releases its flow only once
    every pipeline's flow was asked to stop, so stopping pipeline after pipeline (each waiting for
    its own flows first) runs out of time on the first."""
    from lakehouse.platform.embedded import stop_drivers
    from lakehouse.state.control import Deployment, FlowControl

    conf = Settings(root=str(tmp_path / "lake"))
    flows = {"iot": "silver.device_events", "ads": "silver.clicks"}
    controls = {name: FlowControl.of(conf, name) for name in flows}
    for name, flow in flows.items():
        controls[name].deploy(Deployment(flow, "driver", "1 second", datetime.now(UTC)))
        controls[name].acquire(flow, f"driver-{name}", ttl=120, trigger="continuous")

    def driver(name: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(controls[n].stop_requested(f) for n, f in flows.items()):
                controls[name].release(flows[name], f"driver-{name}")
                return
            time.sleep(0.2)

    threads = [threading.Thread(target=driver, args=(name,)) for name in flows]
    for thread in threads:
        thread.start()
    lines = stop_drivers(conf, timeout=30)
    for thread in threads:
        thread.join()
    assert sorted(line.split(":")[0] for line in lines) == sorted(f"{n} {f}" for n, f in flows.items())
    assert all("stopped in" in line and "still deployed" in line for line in lines), lines
    assert all(controls[n].deployment(f) is not None for n, f in flows.items()), "they stay deployed"
