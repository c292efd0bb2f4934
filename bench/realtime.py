"""The real-time lane against its floor: end-to-end latency, Kafka to Kafka.

Timestamped readings are produced to the project's KRaft broker at a steady rate; the output
topic is read back and each record's latency is the output record's timestamp minus the time it
was sent (one machine, one clock). Three ways, in one run, interleaved over ``--rounds``:

- ``platform``: the ``rtbench`` pipeline's ``RealtimeFlow`` (bench/benchpipelines/realtime) as
  a deployment runs it, ``lakehouse run --trigger continuous`` (the lane and its Delta twin in one
  driver);
- ``floor``: the same query written by hand in plain PySpark (``from_json``, the same column,
  the same filter, ``to_json``, Kafka sink, ``trigger(realTime=...)``), in a process of its own
  with the same session settings and task slots;
- ``micro_batch``: the same transform and filter as the platform's micro-batch flow alone
  (``silver.hot_batches``, an ``Ingest`` run with a 0 s trigger, its own process), each record
  seen by polling its Delta table every 20 ms.

The lane runs as deployed: its twin beside it at the flow's interval (5 s).

Goals (issue 69): the lane's p99 at most 1.25x the floor's; the lane at least 20x faster than the
micro-batch flow at p50. Writes bench/results/realtime.json and .png; prints every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import BENCH, CORES, RESULTS, publish

SCHEMA = "device STRING, temperature DOUBLE, sent_ms BIGINT"
FLOW = "silver.hot_readings"
BATCHES = "silver.hot_batches"
WAYS = ("floor", "platform", "micro_batch")
PARTITIONS = 2


# ---------------------------------------------------------------------------- the floor
def floor(servers: str, source: str, sink: str, checkpoint: str, interval: str) -> None:
    """The hand-written query (run as ``realtime.py --floor``), until SIGTERM."""
    from pyspark.sql import functions as F

    from lakehouse.core.config import Settings
    from lakehouse.state.session import spark_session

    settings = Settings(root=str(Path(checkpoint).parent), spark_master=f"local[{CORES}]", spark_ui=False,
                        spark_log_level="ERROR", shuffle_partitions=CORES)  # fmt: skip
    spark = spark_session(settings, "bench-realtime-floor", held_slots=PARTITIONS)  # as the platform's driver
    records = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers).option("subscribe", source)
        .option("startingOffsets", "earliest").load()
    )  # fmt: skip
    rows = records.select(
        F.col("key").cast("string").alias("key"),
        F.from_json(F.col("value").cast("string"), SCHEMA).alias("r"),
    )
    rows = rows.select("key", "r.*").withColumn("fahrenheit", F.col("temperature") * 9 / 5 + 32)
    out = rows.where("temperature > 90").select(
        "key", F.to_json(F.struct("device", "temperature", "sent_ms", "fahrenheit")).alias("value")
    )
    query = (
        out.writeStream.format("kafka").option("kafka.bootstrap.servers", servers).option("topic", sink)
        .option("checkpointLocation", checkpoint).outputMode("update").trigger(realTime=interval).start()
    )  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: query.stop())
    query.awaitTermination()


# ---------------------------------------------------------------------------- measuring
def create_topics(servers: str, *names: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=servers)
    admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names])
    admin.close()


def start(way: str, servers: str, source: str, sink: str, work: Path, interval: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")])),
        "LAKEHOUSE_ROOT": str(work / "lake"),
        "LAKEHOUSE_PIPELINES_PACKAGE": "benchpipelines",
        "LAKEHOUSE_SPARK_MASTER": f"local[{CORES}]",
        "LAKEHOUSE_SHUFFLE_PARTITIONS": str(CORES),
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_SPARK_LOG_LEVEL": "ERROR",
        "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": servers,
        "BENCH_RT_SOURCE": source,
        "BENCH_RT_SINK": sink,
    }
    lakehouse = [
        str(Path(sys.executable).with_name("lakehouse")),
        "run",
        "rtbench",
        "--trigger",
        "continuous",
    ]
    if way == "platform":
        command = [*lakehouse, "--flow", FLOW, "--interval", interval]
    elif way == "micro_batch":
        command = [*lakehouse, "--flow", BATCHES, "--interval", "0 seconds"]
    else:
        command = [
            sys.executable,
            __file__,
            "--floor",
            servers,
            source,
            sink,
            str(work / "floor-checkpoint"),
            interval,
        ]
    log = (work / f"{way}.log").open("ab")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


class Twin:
    """When each device first shows in the Delta twin (polled every 20 ms)."""

    def __init__(self, path: str) -> None:
        self.path, self.seen, self.stopped = path, {}, threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        from deltalake import DeltaTable

        version = -1
        while not self.stopped.is_set():
            try:
                table = DeltaTable(self.path)
                if table.version() != version:
                    version = table.version()
                    now = time.time()
                    for device in table.to_pyarrow_table(columns=["device"])["device"].to_pylist():
                        self.seen.setdefault(device, now)
            except Exception:  # not created yet
                pass
            time.sleep(0.02)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)


def run(
    way: str, servers: str, work: Path, records: int, rate: float, interval: str
) -> dict[str, list[float]]:
    """One run of ``way``: latencies (ms) of ``records`` readings through the lane (and, for the
    platform, into its twin)."""
    from kafka import KafkaConsumer, KafkaProducer

    tag = uuid.uuid4().hex[:8]
    source, sink = f"bench-readings-{tag}", f"bench-hot-{tag}"
    create_topics(servers, source, sink, f"{sink}.quarantine")
    work = work / f"{way}-{tag}"
    work.mkdir(parents=True)
    producer = KafkaProducer(bootstrap_servers=servers, linger_ms=0)
    consumer = KafkaConsumer(
        sink, bootstrap_servers=servers, auto_offset_reset="earliest", fetch_max_wait_ms=10
    )

    sent: dict[str, int] = {}  # device -> when it was sent (ms)

    def send(device: str) -> None:
        reading = {"device": device, "temperature": 95.0, "sent_ms": int(time.time() * 1000)}
        sent[device] = reading["sent_ms"]
        producer.send(source, key=device.encode(), value=json.dumps(reading).encode())
        producer.flush()

    process = start(way, servers, source, sink, work, interval)
    table = Twin(str(work / "lake" / "tables" / "silver" / "hot_batches")) if way == "micro_batch" else None
    out: dict[str, float] = {}

    def arrived() -> dict[str, float]:
        """Latency (ms) of each record out so far: on the output topic, or seen in the table."""
        if table is not None:
            return {d: seen * 1000 - sent[d] for d, seen in list(table.seen.items()) if d in sent}
        for batch in consumer.poll(timeout_ms=200).values():
            for message in batch:
                value = json.loads(message.value)
                out.setdefault(value["device"], message.timestamp - value["sent_ms"])
        return out

    try:
        deadline = time.monotonic() + 240
        while not arrived():  # warm-up: until the first record comes out
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{way} did not start: {(work / f'{way}.log').read_text()[-3000:]}")
            send(f"warm-{uuid.uuid4().hex[:6]}")
            time.sleep(0.3)
        for i in range(records):
            send(f"r{i}")
            time.sleep(1 / rate)
        deadline, timed = time.monotonic() + 120, {}
        while len(timed) < records and time.monotonic() < deadline:
            timed = {d: ms for d, ms in arrived().items() if d.startswith("r")}
            time.sleep(0.1)
        if len(timed) < records:
            raise SystemExit(f"{way}: {len(timed)} of {records} records came out")
        return list(timed.values())
    finally:
        if table is not None:
            table.close()
        stop(process)
        producer.close()
        consumer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 0.50), 1),
        "p95_ms": round(percentile(values, 0.95), 1),
        "p99_ms": round(percentile(values, 0.99), 1),
        "records": len(values),
    }


def bench(servers: str, work: Path, records: int = 200, rate: float = 20.0, rounds: int = 2,
          interval: str = "5 seconds") -> dict[str, Any]:  # fmt: skip
    """Every way ``rounds`` times, the order alternating; figures per way (pooled), per run."""
    pooled: dict[str, list[float]] = {way: [] for way in WAYS}
    runs: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for way in WAYS if round_ % 2 == 0 else WAYS[::-1]:
            print(f"round {round_ + 1}/{rounds}: {way} ...", flush=True)
            values = run(way, servers, work, records, rate, interval)
            pooled[way] += values
            runs.append({"round": round_ + 1, "way": way, **figures(values)})
    result: dict[str, Any] = {name: figures(values) for name, values in pooled.items() if values}
    result.update(
        records_per_run=records, rate_per_s=rate, rounds=rounds, interval=interval, partitions=PARTITIONS,
        cores=CORES, runs=runs,
        # goals: p99 at most 1.25x the floor's; the lane 20x faster than micro-batches at p50
        p99_vs_floor=round(result["platform"]["p99_ms"] / max(result["floor"]["p99_ms"], 0.1), 2),
        micro_batch_vs_lane_p50=round(result["micro_batch"]["p50_ms"] / max(result["platform"]["p50_ms"], 0.1), 1),
        latencies_ms={name: [round(v, 1) for v in values] for name, values in pooled.items()},
        load_average_1m=round(os.getloadavg()[0], 2),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )  # fmt: skip
    return result


def chart(results: dict[str, Any], path: Path) -> None:
    """Each way's latencies as a distribution (log scale), its p50 and p99 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(8, 4.5))
    colors = {"platform": "#1f77b4", "floor": "#7f7f7f", "micro_batch": "#ff7f0e"}
    for name, values in results["latencies_ms"].items():
        if not values:
            continue
        ordered = sorted(max(v, 0.1) for v in values)
        shares = [(i + 1) / len(ordered) for i in range(len(ordered))]
        label = f"{name}: p50 {results[name]['p50_ms']:g} ms, p99 {results[name]['p99_ms']:g} ms"
        axis.step(ordered, shares, where="post", color=colors[name], label=label)
    axis.set_xscale("log")
    axis.set_xlabel("end-to-end latency, ms (log)")
    axis.set_ylabel("share of records")
    axis.set_title(f"Kafka to Kafka: the real-time lane vs plain PySpark (floor) vs micro-batches\n"
                   f"{results['records_per_run']} records at {results['rate_per_s']:g}/s x {results['rounds']} rounds, "
                   f"{results['cores']} cores; p99 vs floor {results['p99_vs_floor']}")  # fmt: skip
    axis.legend(loc="lower right")
    axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--floor":
        floor(*sys.argv[2:7])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200, help="Timed records per run.")
    parser.add_argument("--rate", type=float, default=20.0, help="Records per second.")
    parser.add_argument("--rounds", type=int, default=2, help="Runs of each way, interleaved.")
    parser.add_argument("--servers", help="A Kafka broker to use (default: start the project's own).")
    args = parser.parse_args()
    from lakehouse.core.config import Settings
    from lakehouse.platform import stack as topology

    with tempfile.TemporaryDirectory(prefix="bench-realtime-") as tmp:
        work = Path(tmp)
        with contextlib.ExitStack() as running:
            servers = args.servers
            if not servers:
                servers = running.enter_context(
                    topology.running(Settings(stack_dir=work / "stack"), ["kafka"])
                ).kafka_servers
            results = bench(servers, work / "runs", args.records, args.rate, args.rounds)
    publish(results, RESULTS, "realtime", chart, unprinted=("latencies_ms", "runs"))


if __name__ == "__main__":
    main()
