"""Quarantine replay: a table's quarantined rows judged again by its current expectations (after
one was loosened or fixed). A row that passes now lands in the table and leaves the quarantine; a
row that still fails stays, with the expectations it fails now.

Exactly once, crash-safe, beside the running stream:

1. the replay reads the quarantine as of one version ``v`` (time travel), and records
   ``v`` with its filters in the flow's control directory before it writes anything;
2. the rows that pass are committed to the table by the table's own writer as batch ``v`` of the
   replay's Delta transaction id (``lakehouse-replay:<table>``): a second attempt is skipped;
3. one MERGE into the quarantine, committed under the same id, deletes the rows that landed and
   updates the reasons of the others, matching each row by a hash of all its columns;
4. the record is removed. A replay that finds a record left by a crash finishes that one first
   (same version, same rows, same verdicts; what was committed is skipped).

The stream keeps running: its commits and the replay's are appends and MERGEs on different
rows (a conflict is retried). Backfills, which replace quarantine slices, wait for a replay and
the other way round (the pipeline's backfill lock). Only tables whose rows stand on their own are
replayed: appended or upserted rows (``WriteMode.replays_rows``), not windows, change feeds,
views or scored rows, which their flow recomputes from the input: backfill their range instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from delta.tables import DeltaTable
from pyspark.sql import Column
from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.core.errors import UsageError
from lakehouse.core.lake import Lake
from lakehouse.flows import kind_of
from lakehouse.monitoring import events, lineage
from lakehouse.plan import compatibility
from lakehouse.quality.gate import QualityGate
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.state.control import FlowControl, held_epoch
from lakehouse.writes import FAILED, QUARANTINE_METADATA, Origin, writer_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.config import Settings
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.replay")

ROW_KEY = "_replay_row"  # a hash of all of a quarantine row's columns: its identity in the MERGE
PASSES = "_replay_passes"


@dataclass(frozen=True)
class Replayed:
    """What one replay did: the quarantine version it read, the rows it selected there, those
    that landed in the table and those that stay quarantined; ``resumed``: it finished a replay a
    crash had interrupted."""

    table: str
    version: int
    selected: int
    landed: int
    still_failing: int
    resumed: bool = False


def replay(
    spark: SparkSession,
    settings: Settings,
    pipeline: Pipeline,
    table_name: str,
    slice_: Slice = ALL_TIME,
    reason: str | None = None,
) -> list[Replayed]:
    """Replay ``table_name``'s quarantined rows in ``slice_`` of its event time (that failed
    ``reason``, an expectation's label, if given); see the module doc. One entry per replay run:
    an interrupted one first, if there was one."""
    lake = Lake.from_settings(settings)
    run_id = lineage.new_run_id()
    try:
        done = _replay(spark, settings, pipeline, table_name, slice_, reason)
    except Exception as error:
        events.record(lake, pipeline.name, "replay", "failed", [table_name], str(error)[:2000],
                      range=slice_.label, reason=reason)  # fmt: skip
        _report_lineage(lake, pipeline, table_name, run_id, error=str(error)[:2000])
        raise
    _report_lineage(
        lake,
        pipeline,
        table_name,
        run_id,
        landed=sum(r.landed for r in done),
        versions=[r.version for r in done],
    )
    events.record(
        lake, pipeline.name, "replay", "succeeded", [table_name],
        f"{sum(r.landed for r in done):,} rows landed, {sum(r.still_failing for r in done):,} still quarantined",
        range=slice_.label, reason=reason, quarantine_versions=[r.version for r in done],
    )  # fmt: skip
    return done


def _report_lineage(lake: Lake, pipeline: Pipeline, table_name: str, run_id: str, **facts: Any) -> None:
    """The replay's OpenLineage run (never fails the replay)."""
    lineage.report(  # an unknown table: the replay's own error says so
        lake, f"the replay of {table_name}",
        lambda: lineage.replay_event(lake, pipeline, pipeline.table(table_name), run_id, **facts),
    )  # fmt: skip


def _replay(
    spark: SparkSession,
    settings: Settings,
    pipeline: Pipeline,
    table_name: str,
    slice_: Slice,
    reason: str | None,
) -> list[Replayed]:
    table = pipeline.table(table_name)
    refuse(pipeline, table)
    if not slice_.is_full and not table.time_expression:
        raise UsageError(f"{table.name} has no event_time: replay all of its quarantine (no --start/--end)")
    lake = Lake.from_settings(settings)
    control = FlowControl.of(settings, pipeline.name)
    quarantine = lake.table(table.quarantine)
    done = []
    with control.backfill_lock():
        if reason is not None:
            _check_reason(spark, table, quarantine, reason)
        pending = control.pending_replay(table.name)
        if pending is not None:
            log.warning("%s: finishing the replay a crash interrupted: %s", table.name, pending)
            done.append(_run(spark, lake, pipeline, table, control, pending, resumed=True))
        if delta.exists(spark, quarantine):
            intent = {
                "version": delta.latest_version(spark, quarantine),
                "start": slice_.start.isoformat() if slice_.start else None,
                "end": slice_.end.isoformat() if slice_.end else None,
                "reason": reason,
            }
            done.append(_run(spark, lake, pipeline, table, control, intent))
    return done


def refuse(pipeline: Pipeline, table: Table) -> None:
    """Refuse a table whose quarantined rows cannot be written again on their own."""
    if not table.replays_quarantine:
        what = kind_of(table).rows_described(table)
        raise UsageError(
            f"{table.name}: its {what} are computed by its flow from its input, so its quarantined "
            "rows cannot be written again on their own; recompute their range instead: "
            f"lakehouse backfill {pipeline.name} --flow {table.name} --start ... --end ..."
        )


def _check_reason(spark: SparkSession, table: Table, quarantine: str, reason: str) -> None:
    """``reason`` names one of the table's expectations, or one (since removed) that quarantined
    rows failed: else it is a typo, which would replay nothing."""
    if reason in {e.label for e in table.expectations}:
        return
    known: set[str] = set()
    if delta.exists(spark, quarantine):
        rows = spark.read.format("delta").load(quarantine).select(F.explode(FAILED)).distinct().collect()
        known = {r[0] for r in rows}
    if reason not in known:
        labels = ", ".join(sorted(known | {e.label for e in table.expectations})) or "none"
        raise UsageError(
            f"{table.name}: no expectation and no quarantined row is named {reason!r}; "
            f"--reason takes one of: {labels}"
        )


def _run(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    control: FlowControl,
    intent: dict[str, object],
    *,
    resumed: bool = False,
) -> Replayed:
    version = int(str(intent["version"]))
    slice_ = Slice(*(datetime.fromisoformat(str(b)) if b else None for b in (intent["start"], intent["end"])))
    code = compatibility.code_version(pipeline, table)
    if resumed and intent.get("code") != code:
        # judged again under other code, the rows the interrupted run landed would be settled by
        # other verdicts: a row landed then and failing now would be in the table and the
        # quarantine, one failing then and passing now would be marked landed and never written
        raise UsageError(
            f"{table.name}: a replay of quarantine version {version} was interrupted after it "
            f"started writing, under code version {intent.get('code')}; this code is {code}. "
            "Finishing it under other code could land rows twice or lose them. Put the flow's "
            "declaration, transforms and expectations back as they were, run `lakehouse replay "
            f"{pipeline.name} --flow {table.name}` to finish it (it says so), then change the code"
        )
    rows = _selected(spark, lake, table, version, slice_, intent["reason"] and str(intent["reason"]))
    columns = [c for c in rows.columns if c != ROW_KEY]
    selected = rows.count()
    if not selected:
        control.end_replay(table.name)
        return Replayed(table.name, version, 0, 0, 0, resumed)
    origin = Origin(
        "replay", run_id=f"lakehouse-replay:{table.name}", batch_id=version, code_version=code,
        epoch=held_epoch(table.name),
    )  # fmt: skip
    data = [c for c in columns if c not in QUARANTINE_METADATA]
    no_reasons = F.array().cast("array<string>")
    gate = QualityGate.for_table(lake, pipeline, table)
    if gate is None:
        kept, failing = rows, rows.where(F.lit(False)).withColumn(FAILED, no_reasons)
        still = 0
    else:  # judged first: a 'fail' expectation stops the replay before anything is recorded
        verdict = gate.judge(rows.select(*[F.col(f"`{c}`") for c in data], ROW_KEY), origin)
        kept = verdict.kept
        failing = verdict.rejected
        assert verdict.outcome is not None
        still = verdict.outcome.quarantined
        if failing is None:
            failing = kept.where(F.lit(False)).withColumn(FAILED, no_reasons)
    control.begin_replay(table.name, {**intent, "code": code})
    # (the session's commits record who wrote them; the batch's own carry its replay ids)
    with delta.committing(
        spark, delta.Commit(f"replay of {table.name}", code_version=code, epoch=origin.epoch)
    ):
        landing = kept.select(*[F.col(f"`{c}`") for c in data])
        writer = writer_for(lake, table)
        writer.ensure(landing)
        writer.write_batch(landing, origin)
        verdicts = kept.select(
            ROW_KEY, F.lit(True).alias(PASSES), F.lit(None).cast("array<string>").alias(FAILED)
        )
        verdicts = (
            verdicts.unionByName(failing.select(ROW_KEY, F.lit(False).alias(PASSES), FAILED))
            .dropDuplicates([ROW_KEY])
            .withColumn(FAILED, F.array_compact(FAILED))
        )  # as the gate types it
        quarantine = lake.table(table.quarantine)
        delta.once(
            spark, lambda: _settle(spark, quarantine, columns, verdicts), path=quarantine,
            commit=origin.commit(f"quarantine of {table.name} ({origin.label})"),
        )  # fmt: skip
    control.end_replay(table.name)
    log.info(
        "%s: replayed %d quarantined row(s) of version %d: %d landed, %d still fail",
        table.name, selected, version, selected - still, still,
    )  # fmt: skip
    return Replayed(table.name, version, selected, selected - still, still, resumed)


def _selected(
    spark: SparkSession, lake: Lake, table: Table, version: int, slice_: Slice, reason: str | None
) -> DataFrame:
    """The quarantine's rows at ``version`` in ``slice_`` (failed ``reason``), each with its
    :data:`ROW_KEY`."""
    rows = spark.read.format("delta").option("versionAsOf", version).load(lake.table(table.quarantine))
    if not slice_.is_full:
        assert table.time_expression is not None
        rows = rows.where(slice_.condition(table.time_expression))
    if reason is not None:
        rows = rows.where(F.array_contains(FAILED, reason))
    return rows.withColumn(ROW_KEY, _row_key("", rows.columns))


def _row_key(alias: str, columns: list[str]) -> Column:
    """A hash of all ``columns`` of a row (of table ``alias``, if given): identical rows share it."""
    prefix = f"{alias}." if alias else ""
    return F.sha2(F.to_json(F.struct(*[F.col(f"{prefix}`{c}`").alias(c) for c in columns])), 256)


def _settle(spark: SparkSession, quarantine: str, columns: list[str], verdicts: DataFrame) -> None:
    """Delete the rows that landed from the quarantine, and give the others their reasons now
    (rows matched on the ``columns`` the replay read)."""
    table = DeltaTable.forPath(spark, quarantine)
    (
        table.alias("t")
        .merge(verdicts.alias("s"), _row_key("t", columns) == F.col(f"s.{ROW_KEY}"))
        .whenMatchedDelete(F.col(f"s.{PASSES}"))
        .whenMatchedUpdate(set={FAILED: F.col(f"s.`{FAILED}`")})
        .execute()
    )
