"""Training a model: learn from a range of a table, evaluate on a later held-out range, register
the version with its metrics and lineage, promote it when asked and its metrics allow.

What ``lakehouse train`` and the ``<pipeline>_train`` DAG run (a Spark driver). The table is read
at one Delta version (recorded with the model, so the training is reproducible by time travel).
By default, evaluation covers the last ``eval_window`` of the table's event time and training the
``train_window`` before it.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from lakehouse import delta, registry
from lakehouse.models.store import AliasMove, ModelStore, ModelVersion
from lakehouse.slices import Slice
from lakehouse.sources import read_lookup
from lakehouse.spec import SpecError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Model, Pipeline

log = logging.getLogger("lakehouse.models")


@dataclass(frozen=True)
class Trained:
    version: ModelVersion
    promoted: AliasMove | None
    refused: list[str]  # the promotion conditions it failed (when promotion was asked)


def default_ranges(spark: SparkSession, df: DataFrame, model: Model, time: str) -> tuple[Slice, Slice]:
    """Evaluation over the last ``eval_window`` of the table's event time, training over the
    ``train_window`` before it."""
    latest = df.agg(F.max(time)).collect()[0][0]
    if latest is None:
        raise SpecError(f"model {model.name!r}: {model.trained_on!r} has no rows to train on yet")
    end = latest.replace(microsecond=0) + timedelta(seconds=1)
    evaluation = Slice(end - model.eval_delta, end)
    assert evaluation.start is not None
    return Slice(evaluation.start - model.train_delta, evaluation.start), evaluation


def train(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    model: Model,
    *,
    train_range: Slice | None = None,
    eval_range: Slice | None = None,
    promote: bool = False,
    by: str = "lakehouse train",
) -> Trained:
    """Train, evaluate and register a version of ``model``; promote it if asked and its metrics
    meet ``promote_when``."""
    table = pipeline.table(model.trained_on)
    if not table.event_time:
        raise SpecError(f"model {model.name!r}: {table.name!r} has no event_time to take ranges of")
    path = lake.table(table.name)
    if not delta.exists(spark, path):
        raise SpecError(f"model {model.name!r}: {table.name!r} does not exist yet; run its flow first")
    at = max(delta.commit_times(spark, path))
    rows = spark.read.format("delta").option("versionAsOf", at).load(path)
    time = f"`{table.event_time}`"
    if train_range is None or eval_range is None:
        default_train, default_eval = default_ranges(spark, rows, model, time)
        train_range, eval_range = train_range or default_train, eval_range or default_eval
    training, held_out = rows.where(train_range.condition(time)), rows.where(eval_range.condition(time))
    counts = (training.count(), held_out.count())
    if not counts[0]:
        raise SpecError(
            f"model {model.name!r}: no rows of {table.name!r} in the training range {train_range.label}"
        )
    log.info(
        "model %s: training on %s rows of %s %s", model.name, f"{counts[0]:,}", table.name, train_range.label
    )
    artifact = registry.resolve(pipeline, model.train)(training)
    try:
        json.dumps(artifact)
    except TypeError as exc:
        raise SpecError(
            f"model {model.name!r}: {model.train} must return a JSON-serializable dict ({exc})"
        ) from None
    metrics = evaluate(spark, lake, pipeline, model, held_out, artifact) if counts[1] else {}
    store = ModelStore(lake)
    version = store.register(
        model.name, artifact, created_by=by, pipeline=pipeline.name, trained_on=table.name,
        trained_on_version=at, train_start=train_range.start, train_end=train_range.end,
        eval_start=eval_range.start, eval_end=eval_range.end, train_rows=counts[0], eval_rows=counts[1],
        metrics=metrics,
    )  # fmt: skip
    if not promote:
        return Trained(version, None, [])
    refused = model.gate(metrics)
    promoted = None if refused else store.promote(model, version.version, by=by)
    return Trained(version, promoted, refused)


def evaluate(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    model: Model,
    rows: DataFrame,
    artifact: dict[str, Any],
) -> dict[str, float]:
    """The model's metrics on held-out ``rows`` (with its labels, when it declares them)."""
    if not model.evaluate:
        return {}
    scored = registry.resolve(pipeline, model.score)(rows, artifact)
    labels = read_lookup(spark, lake, pipeline, pipeline.lookup(model.labels)) if model.labels else None
    metrics = registry.resolve(pipeline, model.evaluate)(scored, labels)
    clean = {str(k): float(v) for k, v in metrics.items() if v is not None and not math.isnan(float(v))}
    log.info("model %s: metrics %s", model.name, clean)
    return clean
