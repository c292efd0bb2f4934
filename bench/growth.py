"""Cost of one micro-batch as a table grows: silver (keyed append), gold (windowed MERGE) and a
change feed's tables (type 1 and type 2) as their change log grows.

A stream that runs for months must not slow down every day. For the ``iot`` pipeline's
``silver.device_events`` (``Append(keys)``) and ``gold.device_type_stats`` (``Aggregate``), this
builds each table at 1x and 10x its base size (rows in event-time order, as streams write them),
then times the same small micro-batch written through the platform's writer
(``lakehouse.writes.TableWriter.write_batch``), median of ``--repeats``. For comparison it also
times what the writer did before: an insert-only MERGE on the keys into silver, and an unbounded
MERGE into gold (both scan every file of the table).

For ``Scd1``/``Scd2`` tables (``lakehouse.writes.history``), the change log holds ``--changes``
changes of 20,000 keys at 1x, ten times as many of the same keys at 10x (a history ten times as
long); the batch is ``--change-batch`` new changes of random keys, applied as a stream does with
each key's latest change kept (log, table, latest changes) and as it does while the log is short
(each key recomputed from its whole logged history). Where the two lines cross is what
``ChangeApplier.long_log`` (when a stream starts keeping the latest changes) is set from.

Writes ``bench/results/growth.json`` and ``growth.png``; prints the ratios (10x / 1x). Figures
are printed, never asserted. Usage: ``.venv/bin/python bench/growth.py [--base 200000]
[--gold-base 2000000] [--parts silver,gold,changes]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # harness

from harness import RESULTS, local_spark, publish

from lakehouse import delta, registry
from lakehouse.core.lake import Lake
from lakehouse.plan.changes import normalize
from lakehouse.spec import ApplyChanges, Scd1, Scd2
from lakehouse.writes import Origin, TableWriter
from lakehouse.writes.history import ChangeApplier, table_rows

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

START = datetime(2026, 1, 1, tzinfo=UTC)
TYPES = ("thermostat", "humidity", "pressure", "vibration", "power")
KEYS = 20_000
ALL_PARTS = {"silver", "gold", "changes"}
ROW = "STRUCT<id: BIGINT, name: STRING, segment: STRING>"
CHANGE_TABLES = {
    "scd1": ApplyChanges(
        "silver.current", upstream="bronze.feed", write=Scd1(keys=["id"], sequence_by=["source.lsn"])
    ),
    "scd2": ApplyChanges(
        "silver.history",
        upstream="bronze.feed",
        write=Scd2(keys=["id"], sequence_by=["source.lsn"], track=["segment"]),
    ),
}


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


def change_events(spark: SparkSession, first: int, count: int) -> DataFrame:
    """Debezium updates with sequence numbers ``first`` .. ``first + count - 1`` of random keys
    among ``KEYS``; the tracked segment changes in two of three."""
    return spark.sql(
        f"""
        SELECT 'u' AS op, CAST(NULL AS {ROW}) AS before,
               CAST(named_struct('id', pmod(xxhash64(id), {KEYS}) + 1, 'name', concat('n', id),
                    'segment', element_at(array('a', 'b', 'c'), CAST(pmod(xxhash64(id, 1), 3) AS INT) + 1))
                    AS {ROW}) AS after,
               named_struct('lsn', id, 'ts_ms', {int(START.timestamp() * 1000)} + id * 1000) AS source
        FROM range({first}, {first + count})
        """
    )


def change_costs(spark: SparkSession, root: Path, changes: int, batch: int, repeats: int) -> dict[str, Any]:
    """Seconds of one micro-batch into each change table with its log at 1x and 10x ``changes``."""
    out: dict[str, Any] = {"change_keys": KEYS, "change_batch": batch}
    for mode, table in CHANGE_TABLES.items():
        for scale in (1, 10):
            lake = Lake(str(root / f"{mode}-x{scale}"))
            logged = changes * scale
            applier = ChangeApplier(lake, table)
            applier.long_log = 0  # each key's latest change kept whatever the log's length
            history = normalize(change_events(spark, 0, logged), table)
            applier.ensure(history)
            applier.apply_slice(history, None)  # the log and the table at once
            applier.start_latest_if_long(spark)  # and the latest changes, from the log
            run_id = str(uuid.uuid4())

            def now(
                i: int, applier: ChangeApplier = applier, table=table, first: int = logged, run_id=run_id
            ) -> None:
                rows = normalize(change_events(spark, first + i * batch, batch), table)
                sink(
                    rows,
                    lambda df: applier.apply_batch(
                        df, delta.Commit(f"batch {i}", app_id=run_id, batch=i, replay_possible=i == 0)
                    ),
                )

            def before(
                i: int,
                applier: ChangeApplier = applier,
                table=table,
                first: int = logged,
                run_id: str = run_id,
            ) -> None:
                def recompute(df: DataFrame) -> None:
                    delta.append_once(
                        df, applier.log_path, delta.Commit("before", app_id=f"{run_id}-before", batch=i)
                    )
                    keys = df.select("id").distinct()
                    fresh = table_rows(applier.logged_of(keys), applier.mode)
                    delta.sync_rows(fresh, applier.path, identity=applier.identity, scope=keys)

                sink(normalize(change_events(spark, first + (repeats + i) * batch, batch), table), recompute)

            out[f"{mode}_{scale}x_changes"] = logged
            out[f"{mode}_{scale}x_latest_s"] = round(median_seconds(now, repeats), 3)
            out[f"{mode}_{scale}x_whole_log_s"] = round(median_seconds(before, repeats), 3)
            print(f"{mode} {scale}x ({logged:,} changes): latest changes {out[f'{mode}_{scale}x_latest_s']} s, "
                  f"whole log {out[f'{mode}_{scale}x_whole_log_s']} s", flush=True)  # fmt: skip
        for how in ("latest", "whole_log"):
            out[f"{mode}_{how}_growth"] = round(out[f"{mode}_10x_{how}_s"] / out[f"{mode}_1x_{how}_s"], 2)
    return out


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


def measure(
    spark: SparkSession, root: Path, base: int, batch: int, repeats: int, parts: set[str], gold_base: int
) -> dict[str, Any]:
    """Silver's and gold's micro-batch (those of ``parts``) at 1x and 10x; gold holds ``gold_base``
    rows at 1x."""
    pipeline = registry.get("pipelines", "iot").configured("files")
    silver_table, gold_table = (
        pipeline.table("silver.device_events"),
        pipeline.table("gold.device_type_stats"),
    )
    out: dict[str, Any] = {"base_rows": base, "batch_rows": batch, "repeats": repeats}
    for scale in (1, 10):
        lake = Lake(str(root / f"x{scale}"))
        rows = base * scale
        run_id = str(uuid.uuid4())
        if "silver" in parts:
            out.update(silver_costs(spark, lake, silver_table, rows, batch, repeats, run_id, scale))
        if "gold" in parts:
            out.update(gold_costs(spark, lake, gold_table, gold_base * scale, repeats, run_id, scale))
        print(f"{scale}x: " + ", ".join(f"{k} {v}" for k, v in out.items() if f"_{scale}x_" in k), flush=True)
    for name in ("silver_append", "silver_insert_merge", "gold_bounded_merge", "gold_unbounded_merge"):
        table, how = name.split("_", 1)
        if f"{table}_1x_{how}_s" in out:
            out[f"{name}_growth"] = round(out[f"{table}_10x_{how}_s"] / out[f"{table}_1x_{how}_s"], 2)
    out["spark"] = spark.version
    return out


def silver_costs(
    spark: SparkSession,
    lake: Lake,
    silver_table: Any,
    rows: int,
    batch: int,
    repeats: int,
    run_id: str,
    scale: int,
) -> dict[str, Any]:
    """Silver's micro-batch with the table at ``rows``: the writer's append against an insert MERGE."""
    out: dict[str, Any] = {}
    # silver: one event every 2 s per table row; the batch is the newest events
    silver = TableWriter(lake, silver_table)
    build(silver_rows(spark, 0, rows, 2.0), silver, "event_time", files=max(4, rows // 50_000))

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
    return out


def gold_costs(
    spark: SparkSession, lake: Lake, gold_table: Any, rows: int, repeats: int, run_id: str, scale: int
) -> dict[str, Any]:
    """Gold's micro-batch with the table at ``rows``: the writer's bounded MERGE against an
    unbounded one."""
    out: dict[str, Any] = {}
    # windows of 5 minutes x 5 types; the batch updates the newest 3 windows
    windows = rows // len(TYPES)
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
    return out


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    for ax, table, now, before in (
        (axes[0], "silver", "append", "insert_merge"),
        (axes[1], "gold", "bounded_merge", "unbounded_merge"),
        (axes[2], "scd1", "latest", "whole_log"),
        (axes[3], "scd2", "latest", "whole_log"),
    ):
        if f"{table}_1x_{now}_s" not in results:
            continue
        rows = "changes" if table.startswith("scd") else "rows"
        sizes = [results[f"{table}_{s}x_{rows}"] for s in (1, 10)]
        for how, style in ((now, "o-"), (before, "s--")):
            values = [results[f"{table}_{s}x_{how}_s"] for s in (1, 10)]
            name = "latest changes kept" if how == "latest" else how.replace("_", " ")
            label = f"{name} (x{results[f'{table}_{how}_growth']} at 10x)"
            ax.plot(sizes, values, style, label=label)
        ax.set_xscale("log")
        ax.set_xlabel(f"table {rows}" if rows == "rows" else "changes logged")
        ax.set_ylabel("seconds per micro-batch")
        grows = "its change log" if rows == "changes" else "the table"
        ax.set_title(f"{table}: one micro-batch as {grows} grows")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=200_000, help="Silver rows at 1x.")
    parser.add_argument("--batch", type=int, default=2_000, help="Rows per silver micro-batch.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--changes", type=int, default=200_000, help="Changes logged at 1x.")
    parser.add_argument("--change-batch", type=int, default=2_000, help="Changes per micro-batch.")
    parser.add_argument(
        "--gold-base", type=int, default=2_000_000,
        help="Gold rows at 1x (a size where an unbounded MERGE grows with the table).",
    )  # fmt: skip
    parser.add_argument(
        "--parts", default="silver,gold,changes",
        help="What to measure (comma-separated: silver, gold, changes); the others' figures are kept.",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with local_spark("growth") as (spark, tmp):
        parts = set(args.parts.split(","))
        kept = args.out / "growth.json"
        results = json.loads(kept.read_text()) if parts != ALL_PARTS and kept.exists() else {}
        if parts & {"silver", "gold"}:
            results.update(measure(spark, tmp, args.base, args.batch, args.repeats, parts, args.gold_base))
        if "changes" in parts:
            results.update(change_costs(spark, tmp, args.changes, args.change_batch, args.repeats))
        results["load_average_1m"] = round(os.getloadavg()[0], 2)
        results["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    publish(results, args.out, "growth", chart)
    return results


if __name__ == "__main__":
    main()
