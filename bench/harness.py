"""What the bench scripts share: a local Spark session on two cores in a temporary directory,
the figures written (JSON), charted (PNG) and printed, and a backfill's phases per layer, as
figures and as a chart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from pyspark.sql import SparkSession

    from lakehouse.run.batch import BackfillStep

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
CORES = 2  # local[2]


@contextmanager
def local_spark(name: str) -> Iterator[tuple[SparkSession, Path]]:
    """A ``local[CORES]`` session (no UI, errors only) and the temporary directory it works in."""
    from lakehouse.core.config import Settings
    from lakehouse.state.session import spark_session

    with tempfile.TemporaryDirectory(prefix=f"lakehouse-{name}-") as tmp:
        settings = Settings(root=f"{tmp}/spark", spark_master=f"local[{CORES}]", shuffle_partitions=CORES,
                            spark_ui=False, spark_log_level="ERROR")  # fmt: skip
        yield spark_session(settings, app_name=f"lakehouse-{name}"), Path(tmp)


def backfill_process(root: str, pipeline: str, start: str, end: str) -> float:
    """Seconds of ``lakehouse backfill <pipeline> --start --end`` as a user runs it: a process of
    its own (its Spark session's start included) on ``root`` (``local[CORES]``, the bench's
    pipelines)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")])),
        "LAKEHOUSE_ROOT": root,
        "LAKEHOUSE_PIPELINES_PACKAGE": "benchpipelines",
        "LAKEHOUSE_SPARK_MASTER": f"local[{CORES}]",
        "LAKEHOUSE_SHUFFLE_PARTITIONS": str(CORES),
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_SPARK_LOG_LEVEL": "ERROR",
        "COLUMNS": "160",
    }
    lakehouse = Path(sys.executable).with_name("lakehouse")
    began = time.perf_counter()
    done = subprocess.run(
        [str(lakehouse), "backfill", pipeline, "--start", start, "--end", end],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - began
    if done.returncode:
        raise RuntimeError(f"lakehouse backfill failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds


def plain_process(job: str, root: str) -> tuple[float, dict[str, float]]:
    """Seconds of the hand-written batch jobs ``job`` (``bench/plain_jobs.py``) as a user runs
    them: a Python process building its own session (Delta's jars, ``local[CORES]``), and the
    seconds of each layer within it."""
    import shlex

    from lakehouse.core.config import Settings
    from lakehouse.state.session import PLATFORM_JAR, class_archive_options, jars

    delta_jars = ",".join(str(j) for j in jars(Settings()) if j.name != PLATFORM_JAR)
    # the JVM the platform's drivers start with: its class-data archive, if built (make bootstrap)
    java_options = shlex.join(class_archive_options(Settings()))
    command = [
        sys.executable,
        str(BENCH / "plain_jobs.py"),
        job,
        root,
        "--jars",
        delta_jars,
        "--cores",
        str(CORES),
    ]
    began = time.perf_counter()
    done = subprocess.run(
        [*command, f"--java-options={java_options}"], capture_output=True, text=True, check=False
    )  # fmt: skip
    seconds = time.perf_counter() - began
    if done.returncode:
        raise RuntimeError(f"plain_jobs.py {job} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])["layers"]


def interleaved(
    runs: int, plain: Callable[[int], float], cli: Callable[[int], float]
) -> tuple[list[float], list[float]]:
    """``runs`` pairs of (``plain(i)``, ``cli(i)``) seconds, the pair's order alternating (plain
    first, then the platform first, ...): whoever runs second on a machine that just warmed its
    page cache, or while another tenant is busy, does not always profit or pay."""
    plains: list[float] = []
    clis: list[float] = []
    for i in range(runs):
        if i % 2 == 0:
            plains.append(plain(i))
            clis.append(cli(i))
        else:
            clis.append(cli(i))
            plains.append(plain(i))
    return plains, clis


def process_figures(plain_seconds: list[float], cli_seconds: list[float], rows: int) -> dict[str, Any]:
    """The figures of the hand-written jobs and ``lakehouse backfill``, each a process of its
    own (:func:`plain_process`, :func:`backfill_process`) over ``rows`` landing rows, run in
    interleaved pairs (:func:`interleaved`): medians, each pair's ratio, and their spread."""
    from statistics import median

    plain, cli = median(plain_seconds), median(cli_seconds)
    pairs = [round(p / c, 3) for p, c in zip(plain_seconds, cli_seconds, strict=True)]
    return {
        "process_runs": len(pairs),
        "plain_batch_process_seconds": round(plain, 2),
        "cli_backfill_seconds": round(cli, 2),
        "cli_backfill_ratio": round(median(pairs), 3),
        "cli_backfill_ratio_spread": [min(pairs), max(pairs)],
        "cli_backfill_ratio_pairs": pairs,
        "plain_batch_process_seconds_all": [round(s, 2) for s in plain_seconds],
        "cli_backfill_seconds_all": [round(s, 2) for s in cli_seconds],
        "plain_batch_process_rows_per_s_per_core": round(rows / plain / CORES, 1),
        "cli_backfill_rows_per_s_per_core": round(rows / cli / CORES, 1),
    }


def publish(
    results: dict[str, Any], out: Path, name: str, chart: Callable[[dict[str, Any], Path], None],
    unprinted: Sequence[str] = (),
) -> None:  # fmt: skip
    """``<out>/<name>.json`` and its chart ``<name>.png``; every figure printed (but ``unprinted``)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    chart(results, out / f"{name}.png")
    for key, value in results.items():
        if key not in unprinted:
            print(f"{key:<34} {value}")
    print(f"wrote {out / f'{name}.json'} and {out / f'{name}.png'}")


def phases_per_layer(steps: list[BackfillStep], seconds: float) -> dict[str, dict[str, float]]:
    """Where a backfill's ``seconds`` went: per layer (the table's), the phases its steps recorded
    (plan, guard, compute, gate, write; ``catch-up`` for a flow that never streamed, computed once
    as its stream) and ``other`` (the rest of the step: reading the table's state, the
    accounting); ``coordination``: what no step holds (leases, the streams' catch-up
    and cut, query starts)."""
    layers: dict[str, dict[str, float]] = {}
    for step in steps:
        layer = layers.setdefault(step.table.split(".", 1)[0], {})
        for phase, spent in step.phases.items():
            layer[phase] = round(layer.get(phase, 0.0) + spent, 3)
        layer["other"] = round(layer.get("other", 0.0) + step.seconds - sum(step.phases.values()), 3)
    layers["coordination"] = {"other": round(seconds - sum(step.seconds for step in steps), 3)}
    return layers


PHASE_COLORS = {  # a backfill step's phases (lakehouse.run.batch.BackfillStep), then the rest
    "plan": "#9467bd", "guard": "#8c564b", "compute": "#ff7f0e", "gate": "#d62728", "write": "#2ca02c",
    "catch-up": "#17becf", "other": "#c7c7c7",
}  # fmt: skip


def backfill_phases(axis: Any, name: str, figures: dict[str, Any]) -> None:
    """Per layer: the hand-written batch job's seconds beside the two backfills' phases, stacked;
    the coordinated backfill's catch-up and cut as a fourth group."""
    layers = ["bronze", "silver", "gold", "coordination"]
    runs = [None, "backfill_phases", "user_backfill_phases"]  # None: the plain job
    width = 0.8 / len(runs)
    labelled: set[str] = set()
    for k, key in enumerate(runs):
        for x, layer in enumerate(layers):
            position = x + k * width
            if key is None:
                spent = figures["plain_batch_layers"].get(layer, 0.0)
                axis.bar(
                    position, spent, width, color="#888", label=None if "plain" in labelled else "plain job"
                )
                labelled.add("plain")
                continue
            bottom = 0.0
            for phase, spent in figures[key].get(layer, {}).items():
                color = PHASE_COLORS.get(phase, "#000")
                axis.bar(position, spent, width, bottom=bottom, color=color,
                         label=None if phase in labelled else phase, hatch="//" if k == 2 else None)  # fmt: skip
                labelled.add(phase)
                bottom += spent
    axis.set_xticks([x + 0.4 - width / 2 for x in range(len(layers))], layers)
    axis.set_ylabel("seconds")
    axis.set_title(
        f"backfill, {name}: plain job | backfill | lakehouse backfill (hatched)\n"
        f"{figures['plain_batch_seconds']:.1f} s | {figures['backfill_seconds']:.1f} s | "
        f"{figures['user_backfill_seconds']:.1f} s",
        fontsize=9,
    )
    axis.legend(fontsize=7)
