"""Figures of the orchestration layer, printed (never asserted):

- ``parse``: parse time of each DAG file, measured as Airflow's dag-processor does (a fresh
  interpreter with airflow already imported, ``DagBag`` of that one file; Airflow's own
  duration figure), against Airflow's example DAG ``example_bash_operator``;
- ``drivers``: one shared driver for a pipeline's flows vs one driver (JVM) per flow: time
  until every query started, resident memory and CPU of the driver processes;
- ``restart``: time from a driver's death (SIGKILL of the Python driver, then of the JVM) to
  its restart by the scheduled monitor DAG of a real embedded platform (``make up``);
- ``memory``: the four ``iot`` flows deployed in one driver with the generator's traffic for
  ``--minutes`` (30): driver resident memory (Python driver + JVM) and state store size (rows and
  bytes, from the progress of each batch) sampled every 30 s; after a 5-minute warm-up both must
  stay within +-10% (issue 13, goal 6). Written to ``bench/results/memory.json``;
- ``first-start``: ``make up`` as a newcomer gets it (every DAG unpaused, the generators
  landing data), then ``iot_stream_deploy`` triggered at once: the load average over time,
  seconds from the trigger to the first gold row, the drivers running the flows, the DAG runs
  of the first minutes, the monitor runs' durations, the verdicts of every quality run, and the
  cockpit's answer times at that load (overview, the ``iot`` page, ``/metrics``, asked in turn
  every 5 s as a logged-in page does, with ``--progress-rows`` older progress rows in the lake).
  Written to ``bench/results/first_start.json``.

Usage: ``.venv/bin/python bench/orchestration.py parse|drivers|restart|memory|first-start|all [--runs N]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
BIN = Path(sys.executable).parent
FLOWS = ("bronze.device_events", "silver.device_events", "gold.device_type_stats", "gold.device_status")

PARSE_ONE = textwrap.dedent(
    """
    import runpy, sys, time
    import airflow
    started = time.perf_counter()
    if sys.argv[2] == "exec":  # the bare execution of the file, without DagBag's checks
        runpy.run_path(sys.argv[1])
        print("PARSED", time.perf_counter() - started, 0, 0)
        sys.exit()
    import airflow.sdk  # loaded in the dag-processor before it parses a file
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1], bundle_name="bench")
    [stat] = bag.dagbag_stats
    assert not bag.import_errors, bag.import_errors
    print("PARSED", stat.duration.total_seconds(), 0, stat.dag_num)
    """
)


def base_env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "LAKEHOUSE_ROOT": str(tmp / "lake"),
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "160",
    }


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


# --------------------------------------------------------------------------- parse


def parse(runs: int) -> None:
    import airflow.providers.standard.example_dags as examples

    example = Path(examples.__file__).with_name("example_bash_operator.py")
    files = [*sorted((REPO / "dags").glob("*.py")), example]
    print(f"DAG file parse time in s, median (min-max) of {runs} fresh interpreters; load {load()}")
    print("  dagbag: DagBag's own duration of the file (what the dag-processor reports), airflow loaded")
    print("  exec:   the bare execution of the file (runpy), airflow imported")
    print(f"  {'file':<26} {'DAGs':>4} {'dagbag':>22} {'exec':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        env = base_env(Path(tmp))
        for path in files:
            figures, dags = {}, 0
            for mode in ("dagbag", "exec"):
                durations = []
                for _ in range(runs):
                    command = [sys.executable, "-c", PARSE_ONE, str(path), mode]
                    stdout = subprocess.run(
                        command, env=env, capture_output=True, text=True, check=True
                    ).stdout
                    out = next(line for line in stdout.splitlines() if line.startswith("PARSED")).split()
                    durations.append(float(out[1]))
                    dags = max(dags, int(out[3]))
                median, low, high = statistics.median(durations), min(durations), max(durations)
                figures[mode] = f"{median:.3f} ({low:.3f}-{high:.3f})"
            print(f"  {path.name:<26} {dags:>4} {figures['dagbag']:>22} {figures['exec']:>22}")


# --------------------------------------------------------------------------- drivers


def driver_tree(pids: set[int]) -> tuple[float, float]:
    """Resident memory (MiB) and CPU seconds of the given processes and their children."""
    import psutil

    rss = cpu = 0.0
    seen: set[int] = set()
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for process in [root, *root.children(recursive=True)]:
                if process.pid in seen:
                    continue
                seen.add(process.pid)
                rss += process.memory_info().rss
                times = process.cpu_times()
                cpu += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return rss / 2**20, cpu


def drivers(settle: float) -> None:
    from lakehouse.core.config import Settings
    from lakehouse.core.lake import Lake
    from lakehouse.orchestration import operations
    from lakehouse.plan.generators import Landing
    from lakehouse.registry import get
    from lakehouse.state.control import FlowControl
    from pipelines.iot.generator import generate

    print(f"Shared driver vs one driver per flow (local[*], 4 flows of iot); load {load()}")
    for isolate in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            env = base_env(Path(tmp))
            os.environ.update(
                {k: v for k, v in env.items() if k.startswith(("LAKEHOUSE_", "AIRFLOW", "PATH"))}
            )
            os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
            conf = Settings()
            iot = get("pipelines", "iot").configured("files")
            lake = Lake(conf.root)
            generate(Landing(lake, iot), events=2000, files=4, seed=1)
            started = time.monotonic()
            operations.deploy(
                conf, iot, list(FLOWS), operations.spark_submit_launcher(conf, iot), interval="5 seconds",
                isolate=isolate,
            )  # fmt: skip
            startup = time.monotonic() - started
            control = FlowControl.of(conf, "iot")
            jvms = {lease.jvm_pid for flow in FLOWS if (lease := control.running(flow)) and lease.jvm_pid}
            _, cpu_before = driver_tree(jvms)
            tick = time.monotonic()
            deadline = tick + settle
            while time.monotonic() < deadline:  # a generator's traffic: 50 events every 5 s
                generate(Landing(lake, iot), events=50, files=1, seed=int(time.time()), end=datetime.now(UTC))
                time.sleep(5)
            rss_after, cpu_after = driver_tree(jvms)
            cpu_share = (cpu_after - cpu_before) / (time.monotonic() - tick)
            operations.stop(conf, iot, list(FLOWS))
            label = "one driver per flow" if isolate else "one shared driver"
            print(
                f"  {label:<20} {len(jvms)} JVM(s): all queries started in {startup:5.1f} s; "
                f"RSS {rss_after:6.0f} MiB; CPU {cpu_share:4.2f} cores over the next {settle:.0f} s "
                "(a 2,000-event backlog, then 10 events/s)"
            )


# --------------------------------------------------------------------------- memory


def memory(minutes: float, warmup: float = 5.0) -> None:
    import polars as pl

    from lakehouse.core.config import Settings
    from lakehouse.core.lake import Lake
    from lakehouse.monitoring.progress import ProgressLog
    from lakehouse.orchestration import operations
    from lakehouse.plan.generators import Landing
    from lakehouse.registry import get
    from lakehouse.state.control import FlowControl
    from pipelines.iot.generator import generate

    with tempfile.TemporaryDirectory() as tmp:
        env = base_env(Path(tmp))
        os.environ.update({k: v for k, v in env.items() if k.startswith(("LAKEHOUSE_", "AIRFLOW", "PATH"))})
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
        conf, iot = Settings(), get("pipelines", "iot").configured("files")
        lake = Lake(conf.root)
        generate(Landing(lake, iot), events=2000, files=4, seed=1)
        operations.deploy(
            conf, iot, list(FLOWS), operations.spark_submit_launcher(conf, iot), interval="5 seconds"
        )
        control, progress = FlowControl.of(conf, "iot"), ProgressLog(lake)
        print(f"4 iot flows in one driver, 10 events/s for {minutes:g} min; sampling every 30 s", flush=True)
        samples: list[dict[str, float]] = []
        began = last_sample = time.monotonic()
        try:
            while (elapsed := time.monotonic() - began) < minutes * 60:
                generate(Landing(lake, iot), events=50, files=1, seed=int(time.time()), end=datetime.now(UTC))
                if time.monotonic() - last_sample >= 30 or not samples:
                    last_sample = time.monotonic()
                    leases = [control.running(f) for f in FLOWS]
                    pids = {p for x in leases if x for p in (x.pid, x.jvm_pid) if p}
                    rss, _ = driver_tree(pids)
                    latest = progress.latest(progress.read().filter(pl.col("pipeline") == "iot"))
                    sample = {
                        "minute": round(elapsed / 60, 2),
                        "rss_mib": round(rss, 1),
                        "state_rows": float(latest["state_rows"].fill_null(0).sum()),
                        "state_mib": round(float(latest["state_memory_bytes"].fill_null(0).sum()) / 2**20, 2),
                        "flows_running": sum(1 for x in leases if x),
                    }
                    samples.append(sample)
                    print(f"  {sample}", flush=True)
                time.sleep(5)
        finally:
            operations.stop(conf, iot, list(FLOWS))
    steady = [s for s in samples if s["minute"] >= warmup]
    figures: dict[str, object] = {"minutes": minutes, "warmup_minutes": warmup, "samples": samples}
    for key in ("rss_mib", "state_rows", "state_mib"):
        values = [s[key] for s in steady]
        middle = statistics.median(values) if values else 0.0
        figures[key] = {
            "median_after_warmup": middle,
            "min": min(values, default=0.0),
            "max": max(values, default=0.0),
            "max_deviation_pct": round(100 * max(abs(v - middle) for v in values) / middle, 1)
            if middle
            else None,
            "first_vs_last_5min_pct": _drift(steady, key),
        }
    (RESULTS / "memory.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps({k: v for k, v in figures.items() if k != "samples"}, indent=1))


def _drift(samples: list[dict[str, float]], key: str) -> float | None:
    """Change in percent between the median of the first and of the last 5 minutes sampled."""
    if not samples:
        return None
    start, end = samples[0]["minute"], samples[-1]["minute"]
    first = [s[key] for s in samples if s["minute"] < start + 5]
    last = [s[key] for s in samples if s["minute"] > end - 5]
    a, b = statistics.median(first), statistics.median(last)
    return round(100 * (b - a) / a, 1) if a else None


# --------------------------------------------------------------------------- restart


def trigger_deploy(platform: Any, token: str) -> None:
    """Trigger ``iot_stream_deploy``; again on a 500 (SQLite answers "database is locked" while
    every DAG of a new platform starts)."""
    for attempt in range(5):
        try:
            platform.api("POST", "/api/v2/dags/iot_stream_deploy/dagRuns", {"logical_date": None}, token)
            return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == 4:
                raise
            print(f"  trigger answered {exc.code} ({exc.read()[:200]!r}): again in 5 s", flush=True)
            time.sleep(5)


def restart() -> None:
    from lakehouse.core.config import Settings
    from lakehouse.platform.embedded import Platform
    from lakehouse.platform.services import free_port
    from lakehouse.state.control import FlowControl

    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **base_env(Path(tmp)),
            "LAKEHOUSE_AIRFLOW_PORT": str(free_port()),
            "LAKEHOUSE_PLATFORM_DIR": str(Path(tmp) / "platform"),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        }
        env.pop("AIRFLOW_HOME")
        subprocess.run(["make", "-s", "up"], cwd=REPO, env=env, check=True, capture_output=True)
        try:
            conf = Settings(
                root=env["LAKEHOUSE_ROOT"], platform_dir=Path(env["LAKEHOUSE_PLATFORM_DIR"]),
                airflow_port=int(env["LAKEHOUSE_AIRFLOW_PORT"]),
            )  # fmt: skip
            platform, control = Platform(conf), FlowControl.of(conf, "iot")
            token = platform.token()
            for dag_id in ("iot_stream_deploy", "iot_stream_monitor", "iot_stream_stop"):
                platform.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False}, token)
            trigger_deploy(platform, token)
            lease = wait(lambda: control.running(FLOWS[-1]), 900)
            print(f"Death to restart, real scheduler (monitor every 2 minutes); load {load()}")
            for victim in ("Python driver", "JVM"):
                time.sleep(20)  # let it run a little
                pid = lease.pid if victim == "Python driver" else lease.jvm_pid
                os.kill(pid, signal.SIGKILL)
                died = time.monotonic()
                wait(lambda: not any(control.running(f) for f in FLOWS), 120)
                seen_dead = time.monotonic() - died
                wait(lambda: all(control.running(f) for f in FLOWS), 900)
                lease = control.running(FLOWS[-1])
                leased, since = time.monotonic() - died, lease.acquired_at
                wait(lambda since=since: started_since(conf, since), 600)
                print(
                    f"  SIGKILL {victim:<13}: flows seen dead after {seen_dead:4.1f} s; new driver holds "
                    f"the leases after {leased:5.1f} s, every query started after "
                    f"{time.monotonic() - died:5.1f} s"
                )
            platform.api("POST", "/api/v2/dags/iot_stream_stop/dagRuns", {"logical_date": None}, token)
            wait(lambda: not any(control.running(f) for f in FLOWS), 600)
        finally:
            subprocess.run(["make", "-s", "down"], cwd=REPO, env=env, capture_output=True)


# --------------------------------------------------------------------------- first start


COCKPIT_PATHS = {
    "overview": "/lakehouse/api/overview",
    "pipeline": "/lakehouse/api/pipelines/iot",
    "metrics": "/lakehouse/metrics",
}


def cockpit_times(url: str, token: str) -> dict[str, float | None]:
    """Milliseconds of each cockpit answer, asked in turn (None: it failed or took over 30 s)."""
    times: dict[str, float | None] = {}
    for name, path in COCKPIT_PATHS.items():
        request = urllib.request.Request(f"{url}{path}", headers={"Authorization": f"Bearer {token}"})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                answer.read()
            times[name] = round((time.perf_counter() - started) * 1000, 1)
        except (urllib.error.URLError, TimeoutError) as exc:
            print(f"  cockpit {path}: {exc}", flush=True)
            times[name] = None
    return times


def percentiles(samples: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """p50/p95/max per cockpit answer over the samples taken at a 1-minute load >= 8 and over all."""
    out: dict[str, dict[str, float | None]] = {}
    for name in COCKPIT_PATHS:
        for label, chosen in (("all", samples), ("load_8_or_more", [s for s in samples if s["load"] >= 8])):
            values = sorted(s[name] if s[name] is not None else float("inf") for s in chosen)
            if not values:
                out[f"{name}_{label}"] = {"n": 0}
                continue
            out[f"{name}_{label}"] = {
                "n": len(values),
                "p50_ms": _quantile(values, 0.5),
                "p95_ms": _quantile(values, 0.95),
                "max_ms": values[-1],
            }
    return out


def _quantile(ordered: list[float], q: float) -> float:
    """The sample at quantile ``q`` of ``ordered`` (nearest rank, no interpolation)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def record_cockpit_at_load(figures: dict[str, Any]) -> None:
    """Put the cockpit's answer times at load beside bench/cockpit.py's quiet ones, in
    ``bench/results/cockpit.json`` (issue 27: both figures in one place)."""
    path = RESULTS / "cockpit.json"
    quiet = json.loads(path.read_text()) if path.is_file() else {}
    loads = [s["load"] for s in figures["cockpit_samples"]]
    quiet["at_load"] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "how": "bench/orchestration.py first-start: make up, iot deployed, the scheduled runs, HTTP requests",
        "progress_rows_before": figures["progress_rows_before"],
        "load_1min_range": [round(min(loads), 1), round(max(loads), 1)] if loads else None,
        **figures["cockpit_ms"],
    }
    path.write_text(json.dumps(quiet, indent=2) + "\n")


def quality_verdicts(conf: Any) -> list[dict[str, Any]]:
    """Every table check recorded in the lake: table, run, when, and the failed expectations."""
    import polars as pl

    from lakehouse.core.lake import Lake
    from lakehouse.quality.results import QualityLog

    checks = QualityLog(Lake.from_settings(conf)).read().filter(pl.col("origin") == "check")
    verdicts = []
    for (table, run_id), rows in checks.sort("recorded_at").group_by(
        ["table_name", "run_id"], maintain_order=True
    ):
        failed = rows.filter(~pl.col("success").fill_null(False) & (pl.col("action") != "warn"))
        verdicts.append({
            "table": table, "run_id": run_id, "at": rows["recorded_at"].max().isoformat(),
            "verdict": "failed" if failed.height else "passed", "failed": failed["expectation"].to_list(),
        })  # fmt: skip
    return verdicts


def first_start(minutes: float, progress_rows: int) -> None:
    from lakehouse import registry
    from lakehouse.core.config import Settings
    from lakehouse.core.lake import Lake
    from lakehouse.monitoring.ops_tables import read_table
    from lakehouse.orchestration import operations
    from lakehouse.platform.embedded import Platform
    from lakehouse.platform.services import free_port
    from lakehouse.state.control import FlowControl

    golds = [f for f in FLOWS if f.startswith("gold.")]
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **base_env(Path(tmp)),
            "LAKEHOUSE_AIRFLOW_PORT": str(free_port()),
            "LAKEHOUSE_PLATFORM_DIR": str(Path(tmp) / "platform"),
        }
        env.pop("AIRFLOW_HOME")
        if progress_rows:  # an older history, as a platform that has run for a week has
            sys.path.insert(0, str(REPO / "bench"))
            from cockpit import write_progress

            history = Settings(root=env["LAKEHOUSE_ROOT"])
            flows = [
                (p.name, t.name)
                for p in registry.discover(history.pipelines_package).values()
                for t in p.ordered()
            ]
            print(f"writing {progress_rows:,} progress rows of the week before ...", flush=True)
            write_progress(
                Lake.from_settings(history),
                flows,
                progress_rows,
                days=7.0,
                commits=200,
                until_ago=timedelta(minutes=20),
            )
        began = time.monotonic()
        subprocess.run(["make", "-s", "up"], cwd=REPO, env=env, check=True, capture_output=True)
        up_seconds = time.monotonic() - began
        try:
            conf = Settings(
                root=env["LAKEHOUSE_ROOT"], platform_dir=Path(env["LAKEHOUSE_PLATFORM_DIR"]),
                airflow_port=int(env["LAKEHOUSE_AIRFLOW_PORT"]),
            )  # fmt: skip
            platform, control, lake = Platform(conf), FlowControl.of(conf, "iot"), Lake.from_settings(conf)
            token = platform.token()
            triggered_at = datetime.now(UTC)
            trigger_deploy(platform, token)
            triggered = time.monotonic()
            print(f"make up took {up_seconds:.0f} s; iot_stream_deploy triggered; sampling {minutes:g} min")
            loads: list[tuple[float, float]] = []
            cockpit: list[dict[str, Any]] = []
            first_gold = None
            while (elapsed := time.monotonic() - triggered) < minutes * 60:
                loads.append((round(elapsed, 1), os.getloadavg()[0]))
                cockpit.append(
                    {
                        "at": round(elapsed, 1),
                        "load": os.getloadavg()[0],
                        **cockpit_times(platform.url, token),
                    }
                )
                if first_gold is None and all(_rows(read_table, lake, name) for name in golds):
                    first_gold = elapsed
                    print(f"  first gold rows after {first_gold:.0f} s (load {load()})", flush=True)
                if len(loads) % 12 == 0:
                    print(f"  {elapsed:5.0f} s  load {load()}", flush=True)
                time.sleep(5)
            pipeline = registry.get(conf.pipelines_package, "iot")
            leases = [control.running(t.name) for t in pipeline.tables]  # every flow the deploy starts
            health = {h.flow: f"{h.state}: {h.message}" for h in operations.health(conf, pipeline)}
            kept = Path(tempfile.gettempdir()) / f"first-start-{os.getpid()}"  # driver logs, for a look
            shutil.copytree(Path(tmp) / "lake" / "control", kept / "control", dirs_exist_ok=True)
            shutil.copytree(Path(tmp) / "platform" / "logs", kept / "logs", dirs_exist_ok=True)
            runs = platform.api("GET", "/api/v2/dags/~/dagRuns?limit=100", None, token)["dag_runs"]
            figures = {
                "minutes": minutes,
                "make_up_seconds": round(up_seconds, 1),
                "first_gold_row_seconds": round(first_gold, 1) if first_gold is not None else None,
                "load_1min": loads,
                "load_settled_at_or_below_3_after_seconds": _settled(loads, 3.0),
                "drivers_running_the_flows": len({(x.pid, x.jvm_pid) for x in leases if x}),
                "flows_running": sum(1 for x in leases if x and x.trigger == "continuous"),
                "dag_runs_in_first_2_minutes": sorted(
                    r["dag_id"]
                    for r in runs
                    if r.get("start_date") and _at(r["start_date"]) < triggered_at.timestamp() + 120
                ),
                "monitor_run_seconds": [
                    round(_at(r["end_date"]) - _at(r["start_date"]), 1)
                    for r in runs
                    if r["dag_id"] == "iot_stream_monitor" and r.get("end_date") and r.get("start_date")
                ],
                "deploy_run_state": [r["state"] for r in runs if r["dag_id"] == "iot_stream_deploy"],
                "dag_runs": sorted(
                    (r["dag_id"], r["state"], r.get("start_date"), r.get("end_date")) for r in runs
                ),
                "quality_checks": quality_verdicts(conf),
                "progress_rows_before": progress_rows,
                "cockpit_ms": percentiles(cockpit),
                "cockpit_samples": cockpit,
                "health_at_end": health,
                "logs_kept_in": str(kept),
            }
            (RESULTS / "first_start.json").write_text(json.dumps(figures, indent=1))
            record_cockpit_at_load(figures)
            print(
                json.dumps(
                    {
                        k: v
                        for k, v in figures.items()
                        if k not in ("load_1min", "cockpit_samples", "dag_runs")
                    },
                    indent=1,
                )
            )
        finally:
            subprocess.run(["make", "-s", "down"], cwd=REPO, env=env, capture_output=True)


def _rows(read_table, lake, name: str) -> int:
    try:
        return read_table(lake.table(name)).height
    except Exception:  # not created yet
        return 0


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _settled(loads: list[tuple[float, float]], limit: float) -> float | None:
    """Seconds after which the 1-minute load stayed at or below ``limit`` to the end."""
    settled = None
    for at, value in loads:
        if value > limit:
            settled = None
        elif settled is None:
            settled = at
    return settled


def started_since(conf, since: datetime) -> bool:
    import polars as pl

    from lakehouse.core.lake import Lake
    from lakehouse.monitoring.progress import ProgressLog

    events = ProgressLog(Lake.from_settings(conf)).read(since=since)
    return set(events.filter(pl.col("event") == "started")["flow"]) >= set(FLOWS)


def wait(condition, timeout: float):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s")
        time.sleep(0.5)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=["parse", "drivers", "restart", "memory", "first-start", "all"])
    parser.add_argument("--runs", type=int, default=5, help="interpreters per DAG file (parse)")
    parser.add_argument("--settle", type=float, default=60, help="seconds of traffic per layout (drivers)")
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="minutes sampled (first-start: 6 after the deploy; memory: 30)",
    )
    parser.add_argument(
        "--progress-rows", type=int, default=1_000_000,
        help="older progress rows written into the lake before make up (first-start)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.figure in ("parse", "all"):
        parse(args.runs)
    if args.figure in ("drivers", "all"):
        drivers(args.settle)
    if args.figure in ("restart", "all"):
        restart()
    if args.figure in ("memory", "all"):
        memory(args.minutes or 30)
    if args.figure in ("first-start", "all"):
        first_start(args.minutes or 6, args.progress_rows)


if __name__ == "__main__":
    main()
