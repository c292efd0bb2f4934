"""The IoT anomaly model (``iot_anomaly``): robust per-device-type baselines of the signal.

Training learns, for each device type, the median signal and its median absolute deviation
(MAD), exactly (``percentile``, not an approximation that depends on partitioning) and robustly:
the anomalies in the training range (a few percent) barely move them. Scoring flags a reading
whose distance from its type's median exceeds ``k`` MADs: in-range spikes the fixed alert
threshold misses, drifting sensors, sensors stuck at a rail. A normal reading (uniform over the
normal range) lies within 2 MADs of the median; ``k = 2.4`` leaves a margin.

Scoring is a broadcast join of the parameters and arithmetic: row by row, no Python UDF, so a
stream and a backfill give the same scores for the same rows and version. A sensor stuck at a
*normal* value, or a slow drift still inside the normal range, cannot be seen from one reading:
that needs features over a device's window of readings, which this reference model leaves out.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

K = 2.4  # MADs from the median beyond which a reading is an anomaly
MIN_READINGS = 30  # a device type with fewer training readings is not scored (unknown)


def fit_baselines(events: DataFrame) -> dict[str, Any]:
    """Silver events of the training range -> per device type: median, MAD, readings."""
    medians = events.groupBy("device_type").agg(
        F.percentile("signal", 0.5).alias("median"), F.count("*").alias("readings")
    )
    spread = (
        events.join(medians, "device_type")
        .groupBy("device_type")
        .agg(F.percentile(F.abs(F.col("signal") - F.col("median")), 0.5).alias("mad"))
    )
    rows = medians.join(spread, "device_type").where(F.col("readings") >= MIN_READINGS).collect()
    return {
        "kind": "robust_signal_baseline",
        "k": K,
        "types": {
            r.device_type: {"median": float(r.median), "mad": float(r.mad), "readings": int(r.readings)}
            for r in sorted(rows, key=lambda r: r.device_type)
            if r.device_type is not None and r.mad > 0
        },
    }


def score_anomalies(events: DataFrame, artifact: dict[str, Any]) -> DataFrame:
    """``events`` with ``anomaly_score`` (MADs from the type's median), ``anomaly`` (score > k) and
    ``anomaly_reason``; readings of a type the model does not know score null, not anomalous."""
    types = artifact["types"]
    baseline = events.sparkSession.createDataFrame(
        [(t, v["median"], v["mad"]) for t, v in sorted(types.items())] or [("", 0.0, 1.0)],
        "_type STRING, _median DOUBLE, _mad DOUBLE",
    )
    k = float(artifact["k"])
    score = F.abs(F.col("signal") - F.col("_median")) / F.col("_mad")
    scored = events.join(F.broadcast(baseline), F.col("device_type") == F.col("_type"), "left").withColumn(
        "anomaly_score", F.round(score, 6)
    )
    anomaly = F.coalesce(F.col("anomaly_score") > k, F.lit(False))
    reason = F.when(
        anomaly,
        F.concat(
            F.lit("signal "),
            F.format_number("signal", 3),
            F.when(F.col("signal") > F.col("_median"), F.lit(" above ")).otherwise(F.lit(" below ")),
            F.lit("the "),
            F.col("device_type"),
            F.lit(" median by "),
            F.format_number("anomaly_score", 1),
            F.lit(" MADs"),
        ),
    )
    return (
        scored.withColumn("anomaly", anomaly)
        .withColumn("anomaly_reason", reason)
        .drop("_type", "_median", "_mad")
    )


def evaluate_anomalies(scored: DataFrame, labels: DataFrame | None) -> dict[str, float]:
    """Precision, recall and F1 of ``anomaly`` against the generator's labels; the alert rate;
    recall per kind of anomaly; what the fixed alert threshold (``signal > alert_threshold``)
    catches and how much of what it misses the model catches."""
    if labels is None:
        return {
            "alert_rate": float(scored.agg(F.avg(F.col("anomaly").cast("double"))).collect()[0][0] or 0.0)
        }
    joined = scored.join(labels.select("event_id", "kind").dropDuplicates(["event_id"]), "event_id", "left")
    labelled, flagged = F.col("kind").isNotNull(), F.col("anomaly")
    threshold = F.coalesce(F.col("signal") > F.col("alert_threshold"), F.lit(False))
    kinds = sorted(r.kind for r in joined.where(labelled).select("kind").distinct().collect())
    row = joined.agg(
        F.count("*").alias("rows"),
        F.count_if(flagged).alias("flagged"),
        F.count_if(flagged & labelled).alias("tp"),
        F.count_if(labelled).alias("labelled"),
        F.count_if(labelled & threshold).alias("threshold_caught"),
        F.count_if(labelled & ~threshold).alias("threshold_missed"),
        F.count_if(labelled & ~threshold & flagged).alias("model_caught_of_missed"),
        *[F.count_if(F.col("kind") == k).alias(f"n_{k}") for k in kinds],
        *[F.count_if((F.col("kind") == k) & flagged).alias(f"tp_{k}") for k in kinds],
    ).collect()[0]

    def ratio(a: float, b: float) -> float:
        return float(a) / float(b) if b else 0.0

    precision, recall = ratio(row.tp, row.flagged), ratio(row.tp, row.labelled)
    metrics = {
        "precision": precision,
        "recall": recall,
        "f1": ratio(2 * precision * recall, precision + recall),
        "alert_rate": ratio(row.flagged, row.rows),
        "labelled": float(row.labelled),
        "threshold_recall": ratio(row.threshold_caught, row.labelled),
        "recall_where_threshold_missed": ratio(row.model_caught_of_missed, row.threshold_missed),
    }
    metrics.update({f"recall_{k}": ratio(row[f"tp_{k}"], row[f"n_{k}"]) for k in kinds})
    return {name: round(value, 4) for name, value in metrics.items()}
