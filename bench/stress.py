"""Fault-injection stress test of exactly-once through bronze, silver and gold (iot pipeline).

In the style of Spark's ``StreamTest.runStressTest``: a seeded random script of ``steps`` actions
against a real continuous driver (``lakehouse run iot --trigger continuous``, a subprocess):

- ``land``: an hour of generated traffic (late events within the watermark, retried duplicates,
  malformed lines, events the expectations quarantine);
- ``too_late``: a few events 15 to 60 minutes behind the latest, beyond the watermark;
- ``kill``: SIGKILL of the driver's process group (Python and JVM), either between commits (at a
  random moment after one) or while a micro-batch is in flight (an offset is logged and its
  commit is not: the Delta commit of the batch is being written or about to be); a backfill
  running then is waited for first (joined), so that kills are not skipped;
- ``restart``: a new driver, resuming from the checkpoints (after a running backfill, likewise);
- ``backfill``: what the scheduled ``iot_backfill`` DAG runs (every flow, ``--downstream``) over
  a random day, in this process, while the driver streams, lags behind, and new hours, late and
  too-late events keep landing: the flows pause for it (``lakehouse.run.coordination``).

At the end every flow drains, then the verdict, against an oracle of its own
(``bench/stress_oracle.py``: plain Python from the producers' record of what they wrote, the
generator's ``Summary`` and this script's too-late events, never from a table or the platform's
plan): every landed line exactly once in bronze or its quarantine, by identity; silver's rows and
values; silver's quarantine; each gold table recomputed by hand. Events beyond the watermark may
be missing from silver only as counted late drops (``ops.stream_progress``), and must be there
when a backfill of their day started after they landed.

With ``--store`` the lake and the control plane live on an S3-compatible server (S3Proxy on
127.0.0.1, started for the run): every kill, restart and backfill then goes through S3A, the
conditional Delta log store and the control records on the store.

Usage: ``.venv/bin/python bench/stress.py --steps 100 [--seed 7] [--store]`` (``make stress N=100``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse import registry
from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import read_table
from lakehouse.plan.generators import Landing
from lakehouse.spec import quarantine_name
from lakehouse.state import objects
from pipelines.iot.generator import device_name, generate, registry_csv

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the oracle beside this file
import stress_oracle as oracle

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

    from lakehouse.spec import Pipeline

REPO = Path(__file__).resolve().parents[1]
# the CLI that jobs/driver.py runs under spark-submit (there, leases also record the JVM, this
# process would be taken for it: the driver is started as the plain command instead)
LAKEHOUSE = Path(sys.executable).parent / "lakehouse"
START = datetime(2026, 3, 1, tzinfo=UTC)
SILVER, BRONZE = "silver.device_events", "bronze.device_events"
GOLD = ("gold.device_type_stats", "gold.device_status")
SCORES = "gold.device_anomaly_scores"


@dataclass
class Figures:
    seed: int
    steps: int = 0
    kills: int = 0
    kills_in_flight: int = 0  # while a micro-batch had logged its offsets and not its commit
    kills_between: int = 0  # between commits
    kills_after_a_backfill: int = 0  # that waited for a running backfill first
    restarts: int = 0
    backfills: int = 0
    files: int = 0
    lines: int = 0
    events: int = 0
    too_late_sent: int = 0
    too_late_restored_by_backfill: int = 0  # must be in silver: a backfill of their day came after
    too_late_kept_by_stream: int = 0  # in silver though no backfill had to restore them
    too_late_dropped: int = 0
    late_drops_counted: int = 0
    bronze_rows: int = 0
    bronze_quarantined: int = 0
    silver_rows: int = 0
    silver_quarantined: int = 0
    gold_windows: int = 0
    gold_devices: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)


def lake_env(lake: Lake) -> dict[str, str]:
    return {
        **os.environ,
        "LAKEHOUSE_ROOT": lake.root,
        "LAKEHOUSE_SPARK_MASTER": "local[2]",
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_LEASE_TTL_SECONDS": "30",
        "PYTHONUNBUFFERED": "1",
    }


class Driver:
    """The continuous driver of every iot flow, as a killable subprocess (its own process group)."""

    def __init__(self, lake: Lake, flows: tuple[str, ...], log_dir: Path) -> None:
        self.lake, self.flows, self.log_dir = lake, flows, log_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.starts += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / f"driver-{self.starts}.log", "wb") as out:
            self.process = subprocess.Popen(
                [str(LAKEHOUSE), "run", "iot", "--trigger", "continuous", "--interval", "1 second"],
                env=lake_env(self.lake), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
            )  # fmt: skip

    def kill(self) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    def stop(self) -> None:
        """Graceful: SIGTERM lets each flow finish its micro-batch."""
        if self.alive:
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.kill()

    def in_flight(self) -> bool:
        """A micro-batch has logged its offsets but not its commit (it is computing or writing)."""
        for flow in self.flows:
            root = self.lake.checkpoint("iot", flow)
            offsets, commits = _last(f"{root}/offsets"), _last(f"{root}/commits")
            if offsets is not None and offsets != commits:
                return True
        return False

    def running(self) -> bool:
        """Every flow's query has started in this driver (its log says so)."""
        path = self.log_dir / f"driver-{self.starts}.log"
        text = " ".join(path.read_text(errors="replace").split()) if path.exists() else ""
        return all(f"iot.{flow} started" in text for flow in self.flows)

    def log_tail(self, lines: int = 30) -> str:
        path = self.log_dir / f"driver-{self.starts}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def _last(directory: str) -> int | None:
    """The highest numbered file of a checkpoint's log (local or on the store)."""
    return max((int(name) for name in objects.names(directory) if name.isdigit()), default=None)


def _height(lake: Lake, table: str) -> int:
    return read_table(lake.table(table)).height


class Script:
    """The state of one stress run: what was landed, and the oracle of what the tables must hold."""

    def __init__(self, spark: SparkSession, lake: Lake, seed: int, events_per_hour: int, logs: Path) -> None:
        self.spark, self.lake, self.rng = spark, lake, random.Random(seed)
        self.pipeline: Pipeline = registry.get("pipelines", "iot").configured("files")
        self.landing = Landing(lake, self.pipeline)
        self.events_per_hour = events_per_hour
        self.figures = Figures(seed=seed)
        self.driver = Driver(lake, tuple(self.pipeline.table_names), logs)
        self.hours = 0
        self.latest = START
        self.record = oracle.Record()  # what was produced, as the producers recorded it
        self.too_late: dict[str, datetime] = {}  # too-late event id -> its time
        self.backfill_thread: threading.Thread | None = None
        self.backfill_error: list[str] = []

    # ------------------------------------------------------------------ actions
    def land(self) -> None:
        start = START + timedelta(hours=self.hours)
        summary = generate(
            self.landing, events=self.rng.randint(self.events_per_hour // 2, self.events_per_hour),
            files=self.rng.randint(1, 2), seed=self.rng.randrange(10**6), start=start,
            end=start + timedelta(hours=1), late_fraction=0.1, duplicate_fraction=0.05,
            malformed_fraction=0.02, unregistered_fraction=0.02, out_of_range_fraction=0.01,
            null_device_fraction=0.01, far_future_fraction=0.005, write_registry=False,
            file_prefix=f"hour-{self.hours:04d}",
        )  # fmt: skip
        self.hours += 1
        self.latest = max(self.latest, datetime.fromisoformat(summary.last_event_time.replace("Z", "+00:00")))
        self.figures.files += len(summary.files)
        self.figures.lines += summary.lines
        self.figures.events += summary.events
        self.record.events.extend(summary.records)
        self.record.malformed.update(summary.malformed_lines)
        for path, lines in summary.landed.items():
            self.record.landed[str(path)] = lines

    def send_too_late(self) -> None:
        rows = []
        for _ in range(self.rng.randint(1, 4)):
            event_id = f"too-late-{uuid.UUID(int=self.rng.getrandbits(128))}"
            when = self.latest - timedelta(minutes=self.rng.uniform(15, 60))
            event = {
                "event_id": event_id,
                "device": device_name(4 * self.rng.randrange(5) + 3),
                "device_type": "humidity",
                "signal": 50.0,  # registered, within the sensor's range
                "event_time": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
            rows.append(json.dumps(event))
            self.record.events.append(event)
            self.record.too_late.add(event_id)
            self.too_late[event_id] = when
        path = self.landing.write_lines(BRONZE, f"too-late-{len(self.too_late):05d}.json", rows)
        self.record.landed[str(path)] = rows
        self.figures.files += 1
        self.figures.lines += len(rows)
        self.figures.events += len(rows)
        self.figures.too_late_sent += len(rows)

    def kill(self, in_flight: bool) -> None:
        """SIGKILL once the driver runs its queries: at a random moment after a commit, or while
        a micro-batch is in flight (new data is landed first, so that there is one). A running
        backfill is waited for first (the flows are paused for it: there would be nothing to hit)."""
        self.figures.kills_after_a_backfill += self.join_backfill()
        if in_flight:
            self.land()
        began, since = time.monotonic(), self._commits()
        while self.driver.alive and time.monotonic() - began < 300:
            if self.driver.in_flight() or (not in_flight and self._commits() != since):
                break
            time.sleep(0.01)
        if not in_flight:
            time.sleep(self.rng.uniform(0, 2))
        hit = self.driver.in_flight()
        self.driver.kill()
        self.figures.kills += 1
        self.figures.kills_in_flight += hit
        self.figures.kills_between += not hit

    def restart(self) -> None:
        self.join_backfill()  # the backfill holds the flows: the monitor leaves them to it
        self.driver.start()
        self.figures.restarts += 1

    def backfill(self) -> None:
        """What the scheduled backfill DAG runs (every flow, downstream) over a random day of
        what landed, beside the running (and maybe lagging) stream."""
        from lakehouse.core.config import Settings
        from lakehouse.run.coordination import backfill
        from lakehouse.slices import Slice

        day = self.rng.randrange(0, self.hours // 24 + 1)
        slice_ = Slice(START + timedelta(days=day), START + timedelta(days=day + 1))
        settings = Settings(root=self.lake.root, lease_ttl_seconds=30)
        # landed before it started: it reads them (it catches the streams up first), so it
        # restores those of its day the stream dropped
        self.record.restored |= {i for i, t in self.too_late.items() if slice_.start <= t < slice_.end}

        def run() -> None:
            try:
                backfill(self.spark, settings, self.pipeline, slice_, downstream=True, pause_timeout=600)
            except Exception as exc:  # reported as a violation: a backfill must succeed
                self.backfill_error.append(f"backfill {slice_.label} failed: {exc}")

        self.backfill_thread = threading.Thread(target=run, name="stress-backfill")
        self.backfill_thread.start()
        self.figures.backfills += 1

    # ------------------------------------------------------------------ waiting
    def join_backfill(self) -> bool:
        """Wait for the running backfill; whether one was running."""
        running = self.backfill_thread is not None and self.backfill_thread.is_alive()
        if self.backfill_thread is not None:
            self.backfill_thread.join()
            self.backfill_thread = None
        return running

    def settle(self, timeout: float = 600) -> None:
        """Wait until the (restarted if dead) driver runs every flow and has carried every landed
        line to gold (a backfill may have written them all already: the streams must still run)."""
        if not self.driver.alive:
            self.restart()
        deadline = time.monotonic() + timeout
        stable_since, last, bronze = time.monotonic(), None, None
        while time.monotonic() < deadline:
            if not self.driver.alive:
                raise RuntimeError(f"the driver died on its own:\n{self.driver.log_tail()}")
            stamp = (self._versions(), self._commits())  # cheap: listings, no table read
            if stamp != last:
                stable_since, last = time.monotonic(), stamp
                try:
                    bronze = _height(self.lake, BRONZE) + _height(self.lake, quarantine_name(BRONZE))
                except Exception:  # a table being created: read again next time
                    bronze, last = None, None
            done = (
                bronze is not None
                and bronze >= self.figures.lines
                and self.driver.running()
                and not self.driver.in_flight()
            )
            if done and time.monotonic() - stable_since > 4:  # 4 quiet 1-second triggers
                return
            time.sleep(0.5)
        raise TimeoutError(f"the stream did not catch up in {timeout:.0f} s:\n{self.driver.log_tail()}")

    def _versions(self) -> tuple[str, ...]:
        """The last commit file of every table the stream writes."""
        tables = (BRONZE, quarantine_name(BRONZE), SILVER, *GOLD)
        return tuple(max((n for n in objects.names(f"{self.lake.table(t)}/_delta_log") if n.endswith(".json")),
                         default="") for t in tables)  # fmt: skip

    def _commits(self) -> tuple[int | None, ...]:
        return tuple(_last(f"{self.lake.checkpoint('iot', f)}/commits") for f in self.driver.flows)

    # ------------------------------------------------------------------ the run
    def applicable(self) -> dict[str, int]:
        """Actions that make sense now, with their weights (like Spark's stress test). A kill or
        a restart while a backfill runs waits for it (``join_backfill``)."""
        busy = self.backfill_thread is not None and self.backfill_thread.is_alive()
        actions = {"land": 3, "too_late": 1}
        actions["kill" if self.driver.alive else "restart"] = 4
        if not busy:
            actions["backfill"] = 2
        return actions

    def run(self, steps: int, progress: bool = False) -> Figures:
        began = time.monotonic()
        self.record.registry = registry_csv(20)
        self.landing.write_reference("devices", self.record.registry)
        for _ in range(3):
            self.land()
        self.restart()
        for step in range(1, steps + 1):
            action = self.rng.choices(*zip(*self.applicable().items(), strict=False))[0]
            if action == "land":
                self.land()
            elif action == "too_late":
                self.send_too_late()
            elif action == "kill":
                self.kill(in_flight=self.rng.random() < 0.6)
            elif action == "restart":
                self.restart()
            else:
                self.backfill()
            self.figures.steps += 1
            if progress:
                print(f"step {step:4d}/{steps}  {action:<18} driver {'up' if self.driver.alive else 'down'}  "
                      f"{time.monotonic() - began:6.1f} s", flush=True)  # fmt: skip
            time.sleep(self.rng.uniform(0, 2))  # let the stream reach a random point
        self.join_backfill()
        self.settle()
        self.driver.stop()
        if progress:
            print(f"settled and stopped at {time.monotonic() - began:6.1f} s; verifying", flush=True)
        self.verify()
        self.figures.seconds = round(time.monotonic() - began, 1)
        return self.figures

    # ------------------------------------------------------------------ the verdict
    def verify(self) -> None:
        """The tables against the oracle of the producers' record (``stress_oracle``)."""
        from lakehouse.monitoring.progress import ProgressLog

        def rows(name: str) -> list[dict[str, Any]]:
            return read_table(self.lake.table(name)).to_dicts()

        tables = oracle.Tables(
            bronze=rows(BRONZE), bronze_quarantine=rows(quarantine_name(BRONZE)), silver=rows(SILVER),
            silver_quarantine=rows(quarantine_name(SILVER)), type_stats=rows(GOLD[0]), status=rows(GOLD[1]),
            scores=rows(SCORES), scores_quarantine=rows(quarantine_name(SCORES)),
        )  # fmt: skip
        figures = self.figures
        figures.late_drops_counted = (
            ProgressLog(self.lake).totals("iot").get(SILVER, {}).get("dropped_late", 0)
        )
        violations, truth = oracle.differences(
            self.record, tables, datetime.now(UTC), figures.late_drops_counted
        )
        figures.violations.extend(self.backfill_error)
        figures.violations.extend(violations)
        figures.bronze_rows, figures.bronze_quarantined = len(tables.bronze), len(tables.bronze_quarantine)
        figures.silver_rows, figures.silver_quarantined = len(tables.silver), len(tables.silver_quarantine)
        figures.gold_windows, figures.gold_devices = len(tables.type_stats), len(tables.status)
        sent = self.record.too_late
        figures.too_late_restored_by_backfill = len(sent & self.record.restored)
        figures.too_late_dropped = len(truth.dropped_late)
        figures.too_late_kept_by_stream = (
            len(sent) - len(sent & self.record.restored) - len(truth.dropped_late)
        )


def stress(spark: SparkSession, root: str, steps: int, seed: int, events_per_hour: int = 150,
           progress: bool = False, logs: Path | None = None) -> Figures:  # fmt: skip
    """One stress run in a fresh lake under ``root``; the driver is always stopped at the end.
    ``logs``: where the drivers' logs go (default ``<root>/driver-logs``, for a local root)."""
    script = Script(spark, Lake(root), seed, events_per_hour, logs or Path(root) / "driver-logs")
    try:
        return script.run(steps, progress)
    finally:
        if script.driver.alive:
            script.driver.kill()
        script.join_backfill()


@contextlib.contextmanager
def object_store_lake(home: Path) -> Iterator[str]:
    """A lake on a fresh S3Proxy: this process and the drivers it starts get the bucket's S3A
    settings (``LAKEHOUSE_SPARK_CONF``); yields the lake's root."""
    from lakehouse.core.config import settings
    from lakehouse.platform.objectstore import ObjectStore

    store = ObjectStore.start(home)
    try:
        bucket = store.create_bucket("stress")
        conf = {**json.loads(os.environ.get("LAKEHOUSE_SPARK_CONF", "{}")), **store.spark_conf("stress")}
        os.environ["LAKEHOUSE_SPARK_CONF"] = json.dumps(conf)
        settings.cache_clear()
        objects.s3.cache_clear()
        print(f"the lake on the object store {store.endpoint}: {bucket}/lake", flush=True)
        yield f"{bucket}/lake"
    finally:
        store.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="random actions to run (default 100)")
    parser.add_argument(
        "--seed", type=int, default=7, help="seed of the script: the same seed, the same actions"
    )
    parser.add_argument("--events-per-hour", type=int, default=300, help="events per landed hour of traffic")
    parser.add_argument(
        "--out", type=Path, default=None,
        help="where the figures are written (JSON; default bench/results/stress.json, or "
        "stress-objectstore.json with --store), beside the other benchmarks' results",
    )  # fmt: skip
    parser.add_argument(
        "--store", action="store_true",
        help="put the lake and the control plane on an S3-compatible server (S3Proxy, started for the run)",
    )  # fmt: skip
    args = parser.parse_args()
    args.out = args.out or REPO / "bench" / "results" / (
        "stress-objectstore.json" if args.store else "stress.json"
    )
    from lakehouse.core.config import Settings
    from lakehouse.state.session import spark_session

    with tempfile.TemporaryDirectory(prefix="lakehouse-stress-") as tmp, contextlib.ExitStack() as running:
        root = f"{tmp}/lake"
        if args.store:
            root = running.enter_context(object_store_lake(Path(tmp) / "objectstore"))
        settings = Settings(root=f"{tmp}/spark", spark_master="local[2]", shuffle_partitions=2, spark_ui=False,
                            spark_log_level="ERROR", s3a_connector=args.store)  # fmt: skip
        spark = spark_session(settings, app_name="lakehouse-stress")
        figures = stress(spark, root, args.steps, args.seed, args.events_per_hour, progress=True,
                         logs=Path(tmp) / "driver-logs")  # fmt: skip
        spark.stop()
    data: dict[str, Any] = {
        "lake": "object store (S3Proxy)" if args.store else "local disk",
        **asdict(figures),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), **data}, indent=2) + "\n"
    )
    width = max(map(len, data))
    for key, value in data.items():
        if key != "violations":
            print(f"{key:<{width}}  {value}")
    print(f"{'violations':<{width}}  {len(figures.violations)}")
    for violation in figures.violations:
        print(f"  - {violation}")
    print(f"figures in {args.out}")
    sys.exit(1 if figures.violations else 0)


if __name__ == "__main__":
    main()
