"""What an idle continuous flow costs: CPU of the driver's JVM while a stream with a 0-second
trigger has nothing to read, for a Delta source (a silver or gold flow) and for a landing
directory of 1,000 files (a bronze flow), at Spark's 10 ms polling and at the platform's
(``spark.sql.streaming.pollingDelay``, see ``lakehouse.state.session``).

Each case runs in a fresh driver process (``local[2]``), catches up, then samples the JVM's CPU
time from ``/proc`` for ``--seconds``. Writes ``bench/results/idle.json``; figures are printed,
never asserted. Usage: ``.venv/bin/python bench/idle.py [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.state.session import POLLING_DELAY

RESULTS = Path(__file__).resolve().parent / "results"
SPARK_DEFAULT = "10ms"


def jvm_cpu_seconds() -> float:
    """CPU seconds so far of this process's child JVMs (the embedded driver)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and "java" in Path(f"/proc/{pid}/comm").read_text():
                total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def one_case(source: str, delay: str, seconds: float) -> float:
    """Cores the idle stream's JVM uses (run inside a fresh process)."""
    from lakehouse.core.config import Settings
    from lakehouse.state.session import spark_session

    work = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    spark = spark_session(
        Settings(root=str(work / "spark"), spark_master="local[2]", shuffle_partitions=2, spark_ui=False,
                 spark_log_level="ERROR", spark_conf={"spark.sql.streaming.pollingDelay": delay}), "bench-idle",
    )  # fmt: skip
    if source == "delta":
        for _ in range(30):
            spark.range(10).write.format("delta").mode("append").save(str(work / "table"))
        df = spark.readStream.format("delta").load(str(work / "table"))
    else:
        (work / "landing").mkdir()
        for i in range(1000):
            (work / "landing" / f"f{i:04d}.json").write_text('{"a": 1}\n')
        df = spark.readStream.format("text").load(str(work / "landing"))
    query = (
        df.writeStream.foreachBatch(lambda _batch, _id: None)
        .trigger(processingTime="0 seconds")
        .option("checkpointLocation", str(work / "checkpoint"))
        .start()
    )
    query.processAllAvailable()
    time.sleep(3)
    cpu, wall = jvm_cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    cores = (jvm_cpu_seconds() - cpu) / (time.monotonic() - wall)
    query.stop()
    spark.stop()
    return cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--case", nargs=2, metavar=("SOURCE", "DELAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:  # a child: one measurement, printed as JSON
        print(json.dumps(one_case(args.case[0], args.case[1], args.seconds)))
        return
    figures: dict[str, dict[str, float]] = {}
    for source in ("delta", "landing_1000_files"):
        for delay in (SPARK_DEFAULT, POLLING_DELAY):
            child = subprocess.run(
                [sys.executable, __file__, "--seconds", str(args.seconds), "--case", source, delay],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            cores = round(float(child.stdout.strip().splitlines()[-1]), 3)
            figures.setdefault(source, {})[f"polling_{delay}"] = cores
            print(f"  idle {source}, polling every {delay}: {cores} cores", flush=True)
    summary = {
        "cores_while_idle": figures,
        "trigger": "0 seconds",
        "seconds_sampled": args.seconds,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "idle.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
