"""Cost of one micro-batch as a table grows: silver (keyed append) and gold (windowed MERGE).

A stream that runs for months must not slow down every day. For the ``iot`` pipeline's
``silver.device_events`` (``Append(keys)``) and ``gold.device_type_stats`` (``Aggregate``), this
builds each table at 1x and 10x its base size (rows in event-time order, as streams write them),
then times the same small micro-batch written through the platform's writer
(``lakehouse.writes.TableWriter.write_batch``), median of ``--repeats``. For comparison it also
times what the writer did before: an insert-only MERGE on the keys into silver, and an unbounded
MERGE into gold (both scan every file of the table).

Writes ``bench/results/growth.json`` and ``growth.png``; prints the ratios (10x / 1x). Figures
are printed, never asserted. Usage: ``.venv/bin/python bench/growth.py [--base 200000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse import delta, registry
from lakehouse.core.lake import Lake
from lakehouse.writes import Origin, TableWriter

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

RESULTS = Path(__file__).resolve().parent / "results"
START = datetime(2026, 1, 1, tzinfo=UTC)
TYPES = ("thermostat", "humidity", "pressure", "vibration", "power")
CORES = 2


def silver_rows(spark: SparkSession, first: int, count: int, seconds_apart: float) -> DataFrame:
    """``count`` device events, ids from ``first``, one every ``seconds_apart`` from START."""
    return spark.sql(
        f"""
        SELECT uuid() AS event_id, concat('dev-', lpad(CAST(id % 50 AS STRING), 4, '0')) AS device,
               element_at(array{TYPES!r}, CAST(id % {len(TYPES)} AS INT) + 1) AS device_type,
               rand(7) * 100 AS signal,
               timestamp_seconds({int(START.timestamp())} + id * {seconds_apart}) AS event_time,
               to_date(timestamp_seconds({int(START.timestamp())} + id * {seconds_apart})) AS event_date
        FROM range({first}, {first + count})
        """
    )


def gold_rows(spark: SparkSession, first_window: int, windows: int) -> DataFrame:
    """Five-minute windows (one row per device type), from window number ``first_window``."""
    return spark.sql(
        f"""
        SELECT timestamp_seconds({int(START.timestamp())} + w.id * 300) AS window_start,
               timestamp_seconds({int(START.timestamp())} + w.id * 300 + 600) AS window_end,
               t.device_type, 100L AS events, rand(3) * 50 AS avg_signal, rand(5) * 100 AS max_signal
        FROM range({first_window}, {first_window + windows}) w
        CROSS JOIN (SELECT explode(array{TYPES!r}) AS device_type) t
        """
    )


def build(df: DataFrame, writer: TableWriter, order_by: str, files: int) -> None:
    writer.ensure(df)
    df.repartitionByRange(files, order_by).sortWithinPartitions(order_by).write.format("delta").mode(
        "append"
    ).save(writer.path)


def sink(df: DataFrame, write: Callable[[DataFrame], object]) -> None:
    """Write ``df`` as a stream's sink does: the batch materialized in memory first."""
    df.persist()
    df.count()
    write(df)
    df.unpersist()


def median_seconds(work: Callable[[int], None], repeats: int) -> float:
    times = []
    for i in range(repeats):
        started = time.perf_counter()
        work(i)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(spark: SparkSession, root: Path, base: int, batch: int, repeats: int) -> dict[str, Any]:
    pipeline = registry.get("pipelines", "iot")
    silver_table, gold_table = (
        pipeline.table("silver.device_events"),
        pipeline.table("gold.device_type_stats"),
    )
    out: dict[str, Any] = {"base_rows": base, "batch_rows": batch, "repeats": repeats}
    for scale in (1, 10):
        lake = Lake(str(root / f"x{scale}"))
        rows = base * scale
        # silver: one event every 2 s per table row; the batch is the newest events
        silver = TableWriter(lake, silver_table)
        build(silver_rows(spark, 0, rows, 2.0), silver, "event_time", files=max(4, rows // 50_000))
        run_id = str(uuid.uuid4())

        def silver_now(i: int, silver: TableWriter = silver, rows: int = rows, run_id: str = run_id) -> None:
            origin = Origin("stream", run_id, batch_id=i)
            sink(
                silver_rows(spark, rows + i * batch, batch, 2.0),
                lambda df: silver.write_batch(df, None, origin),
            )

        def silver_before(i: int, silver: TableWriter = silver, rows: int = rows) -> None:
            on = "t.`event_id` <=> s.`event_id`"
            sink(silver_rows(spark, rows + (repeats + i) * batch, batch, 2.0),
                 lambda df: delta.merge(df, silver.path, on=on, update=False))  # fmt: skip

        out[f"silver_{scale}x_rows"] = rows
        out[f"silver_{scale}x_append_s"] = round(median_seconds(silver_now, repeats), 3)
        out[f"silver_{scale}x_insert_merge_s"] = round(median_seconds(silver_before, repeats), 3)
        # gold: windows of 5 minutes x 5 types; the batch updates the newest 3 windows
        windows = rows // len(TYPES)  # as many gold rows as silver rows: a year of windows at 10x
        gold = TableWriter(lake, gold_table)
        build(gold_rows(spark, 0, windows), gold, "window_start", files=max(4, rows // 50_000))

        def gold_now(i: int, gold: TableWriter = gold, windows: int = windows, run_id: str = run_id) -> None:
            origin = Origin("stream", run_id + "-gold", batch_id=i)
            sink(gold_rows(spark, windows - 3 + i, 3), lambda df: gold.write_batch(df, None, origin))

        def gold_before(i: int, gold: TableWriter = gold, windows: int = windows) -> None:
            on = "t.`window_start` <=> s.`window_start` AND t.`device_type` <=> s.`device_type`"
            sink(
                gold_rows(spark, windows - 3 + i, 3),
                lambda df: delta.merge(df, gold.path, on=on, update=True),
            )

        out[f"gold_{scale}x_rows"] = windows * len(TYPES)
        out[f"gold_{scale}x_bounded_merge_s"] = round(median_seconds(gold_now, repeats), 3)
        out[f"gold_{scale}x_unbounded_merge_s"] = round(median_seconds(gold_before, repeats), 3)
        print(f"{scale}x: " + ", ".join(f"{k} {v}" for k, v in out.items() if k.startswith(f"silver_{scale}x")
                                       or k.startswith(f"gold_{scale}x")), flush=True)  # fmt: skip
    for name in ("silver_append", "silver_insert_merge", "gold_bounded_merge", "gold_unbounded_merge"):
        table, how = name.split("_", 1)
        out[f"{name}_growth"] = round(out[f"{table}_10x_{how}_s"] / out[f"{table}_1x_{how}_s"], 2)
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    out["spark"] = spark.version
    out["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return out


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, table, now, before in (
        (axes[0], "silver", "append", "insert_merge"),
        (axes[1], "gold", "bounded_merge", "unbounded_merge"),
    ):
        sizes = [results[f"{table}_{s}x_rows"] for s in (1, 10)]
        for how, style in ((now, "o-"), (before, "s--")):
            values = [results[f"{table}_{s}x_{how}_s"] for s in (1, 10)]
            label = f"{how.replace('_', ' ')} (x{results[f'{table}_{how}_growth']} at 10x)"
            ax.plot(sizes, values, style, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("table rows")
        ax.set_ylabel("seconds per micro-batch")
        ax.set_title(f"{table}: one micro-batch as the table grows")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=200_000, help="Silver rows at 1x.")
    parser.add_argument("--batch", type=int, default=2_000, help="Rows per silver micro-batch.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from lakehouse.core.config import Settings
    from lakehouse.state.session import spark_session

    with tempfile.TemporaryDirectory(prefix="lakehouse-growth-") as tmp:
        settings = Settings(root=f"{tmp}/spark", spark_master=f"local[{CORES}]", shuffle_partitions=CORES,
                            spark_ui=False, spark_log_level="ERROR")  # fmt: skip
        spark = spark_session(settings, app_name="lakehouse-growth")
        results = measure(spark, Path(tmp), args.base, args.batch, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "growth.json").write_text(json.dumps(results, indent=2) + "\n")
    chart(results, args.out / "growth.png")
    for key, value in results.items():
        print(f"{key:<34} {value}")
    print(f"wrote {args.out / 'growth.json'} and {args.out / 'growth.png'}")
    return results


if __name__ == "__main__":
    main()
