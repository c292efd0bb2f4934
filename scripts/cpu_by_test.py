"""Where a test run's CPU goes: sample every process on the machine every few seconds and add
its CPU time to the test it serves and to the kind of process it is.

Run it beside ``make test`` (or any pytest-xdist run), stop it with Ctrl-C when the run ends:

    .venv/bin/python scripts/cpu_by_test.py --out /tmp/cpu.json &
    make test; kill -INT %1

A process counts for the test its pytest-xdist worker runs at the time (the worker's process
title names it; a process is matched through its parents); processes that left their worker's
tree (the platform ``make up`` starts, detached drivers) count as ``detached``. Processes that
start and end between two samples are missed. Why: wall time on two shared cores says little;
CPU seconds by test file and by kind (Spark JVMs, Airflow, Python) say what a change would save.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import time
from collections import defaultdict
from pathlib import Path

KINDS = (  # (pattern of the command line, kind), first match wins
    (r"^\S*java\b.*(?:s3proxy)", "java: S3Proxy"),
    (r"^\S*java\b.*kafka\.Kafka", "java: Kafka"),
    (r"^\S*java\b.*deploy\.(?:master|worker)", "java: Spark master/worker"),
    (r"^\S*java\b.*CoarseGrainedExecutor", "java: Spark executor"),
    (r"^\S*java\b.*SparkSubmit", "java: Spark driver or session"),
    (r"^\S*java\b", "java: other"),
    (r"^\[pytest-xdist|exec\(eval\(sys\.stdin", "python: pytest worker"),
    (r"airflow (scheduler|api-server|dag-processor|triggerer)", "python: airflow {0}"),
    (r"airflow|supervisor", "python: airflow other"),
    (r"run_dag\.py", "python: dag.test()"),
    (r"jobs/driver\.py", "python: driver"),
    (r"bin/lakehouse (\w+)", "python: lakehouse {0}"),
    (r"postgres", "postgres"),
    (r"chrom", "chromium"),
    (r"python", "python: other"),
)
WORKER = re.compile(r"^\[pytest-xdist running\] (\S+?)::")


def kind_of(command: str) -> str:
    for pattern, kind in KINDS:
        if match := re.search(pattern, command):
            return kind.format(*match.groups())
    return "other"


def sample() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds so far, command line) of every process now."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rfind(")") + 2 :].split()
            command = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except OSError:
            continue
        found[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, command)
    return found


def test_of(pid: int, processes: dict[int, tuple[int, float, str]]) -> str:
    """The test file whose worker ``pid`` descends from, else ``detached``."""
    for _ in range(40):
        if pid not in processes:
            break
        parent, _, command = processes[pid]
        if match := WORKER.match(command):
            return match.group(1)
        pid = parent
    return "detached"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=Path("cpu_by_test.json"), help="JSON written every 30 s and at the end"
    )
    parser.add_argument("--every", type=float, default=4.0, help="seconds between samples (default 4)")
    args = parser.parse_args()
    stop = False

    def finish(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, finish)
    signal.signal(signal.SIGTERM, finish)
    by_test: dict[str, float] = defaultdict(float)
    by_kind: dict[str, float] = defaultdict(float)
    began, written = time.monotonic(), 0.0
    before = {pid: cpu for pid, (_, cpu, _) in sample().items()}  # what ran before the run: not counted

    def write() -> None:
        ordered = lambda d: dict(sorted(((k, round(v, 1)) for k, v in d.items()), key=lambda kv: -kv[1]))  # noqa: E731
        args.out.write_text(json.dumps({
            "seconds": round(time.monotonic() - began), "cpu_seconds": round(sum(by_kind.values()), 1),
            "by_test": ordered(by_test), "by_kind": ordered(by_kind),
        }, indent=1))  # fmt: skip

    while not stop:
        time.sleep(args.every)
        now = sample()
        for pid, (_, cpu, command) in now.items():
            spent = cpu - before.get(pid, 0.0)
            if spent > 0:
                by_test[test_of(pid, now)] += spent
                by_kind[kind_of(command)] += spent
        before = {pid: cpu for pid, (_, cpu, _) in now.items()}
        if time.monotonic() - written > 30:
            write()
            written = time.monotonic()
    write()
    total = sum(by_kind.values())
    print(f"{total:,.0f} CPU-s in {time.monotonic() - began:,.0f} s; by kind:")
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {seconds:8.1f}  {100 * seconds / total:4.1f} %  {kind}")
    print("by test file:")
    for test, seconds in sorted(by_test.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {seconds:8.1f}  {test}")


if __name__ == "__main__":
    main()
