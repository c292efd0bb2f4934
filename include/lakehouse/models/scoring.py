"""Scoring a table's rows with a model: the version in force, picked up at each micro-batch
boundary, the same scores in a backfill.

A table declared with ``model=`` runs its transform on each micro-batch (``foreachBatch``), not in
the streaming plan: the transform receives the batch, the lookups, and the model version in force
when the batch starts (:class:`ModelInForce`; ``model.score(rows)`` adds the model's columns and
``_model``/``_model_version``). A version promoted meanwhile is used from the next batch on, with
no restart. The version a batch used is recorded in the flow's checkpoint once it has scored the
batch, before anything is written, so a batch replayed after a crash is scored with the same
version; a batch that a version failed to score records nothing, and its replay takes the version
in force then (the one promoted to mend it).

A backfill scores each row with the version recorded on it (found by the table's keys): the same
input and version give the same scores in a stream and a backfill. Rows the table never held
(not processed yet, or dropped by the transform) get the version in force now; ``version=``
chooses one version for all.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from lakehouse import registry
from lakehouse.models.store import ModelStore, ModelUnavailable
from lakehouse.plan import purity
from lakehouse.sources import read_lookup
from lakehouse.spec import SpecError
from lakehouse.spec.models import MODEL_COLUMNS
from lakehouse.state import storage

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.models")

MODEL, MODEL_VERSION = MODEL_COLUMNS
KEPT_RECORDS = 100  # versions of the last micro-batches kept in the checkpoint


@dataclass(frozen=True)
class ModelInForce:
    """One version of a model, ready to score rows: what a scored table's transform receives."""

    name: str
    version: int
    artifact: dict[str, Any]
    scorer: Callable[[DataFrame, dict[str, Any]], DataFrame]

    def score(self, rows: DataFrame) -> DataFrame:
        """``rows`` with the model's columns, and the model's name and version on each row."""
        scored = self.scorer(rows, self.artifact)
        return scored.withColumn(MODEL, F.lit(self.name)).withColumn(
            MODEL_VERSION, F.lit(self.version).cast("bigint")
        )


class ScoredFlow:
    """The transform of a table scored by a model, run on batches of its upstream's rows."""

    def __init__(self, spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table) -> None:
        assert table.model is not None and table.transform is not None
        self.spark, self.lake, self.pipeline, self.table = spark, lake, pipeline, table
        self.model = pipeline.model(table.model)
        self.store = ModelStore(lake)
        self.transform = registry.resolve(pipeline, table.transform)
        self._loaded: dict[int, ModelInForce] = {}

    def load(self, version: int | None = None) -> ModelInForce:
        """``version`` of the model, or the one its alias points at now (cached per version)."""
        try:
            chosen = (
                self.store.version(self.model.name, version)
                if version is not None
                else self.store.in_force(self.model.name, self.model.alias)
            )
            if chosen.version not in self._loaded:
                scorer = registry.resolve(self.pipeline, self.model.score)
                self._loaded[chosen.version] = ModelInForce(
                    self.model.name, chosen.version, chosen.artifact, scorer
                )
                log.info("%s: scoring with %s version %d", self.table.name, self.model.name, chosen.version)
            return self._loaded[chosen.version]
        except ModelUnavailable:
            raise
        except Exception as exc:  # an artifact that does not load, a scorer that does not resolve
            raise ModelUnavailable(f"model {self.model.name!r} cannot be loaded: {exc}") from exc

    def apply(self, rows: DataFrame, model: ModelInForce) -> DataFrame:
        """The table's transform over ``rows`` with ``model``."""
        lookups = [
            read_lookup(self.spark, self.lake, self.pipeline, self.pipeline.lookup(n))
            for n in self.table.lookups
        ]
        try:
            out = purity.call(self.transform, rows, *lookups, model, table=self.table.name)
        except purity.ImpureTransform:
            raise  # the transform's own fault, not the model's
        except Exception as exc:
            raise ModelUnavailable(
                f"model {self.model.name!r} version {model.version} failed to score: {exc}"
            ) from exc
        if MODEL_VERSION not in out.columns:
            raise SpecError(
                f"table {self.table.name!r}: its transform must return the rows model.score(rows) gives "
                f"(with {', '.join(MODEL_COLUMNS)}): every scored row says which model version scored it"
            )
        return out

    # ---------------------------------------------------------------- streams
    def micro_batch(self, checkpoint: str) -> Callable[[DataFrame, int], DataFrame]:
        """The sink's step for micro-batch ``batch_id``: the transform with the version in force
        at its start, or the one an earlier attempt recorded (a replay); the rows come back
        computed and cached."""
        records = f"{checkpoint.rstrip('/')}/models"

        def score(batch: DataFrame, batch_id: int) -> DataFrame:
            record = f"{records}/{batch_id}"
            text = storage.read_text(self.spark, record)
            model = self.load(json.loads(text)["version"]) if text is not None else self.load()
            scored = self.apply(batch, model).persist()  # the caller unpersists it after the write
            try:
                scored.count()  # a scorer that fails while running fails here, before the record
            except Exception:
                scored.unpersist()
                raise
            if text is None:
                storage.write_text(
                    self.spark, record, json.dumps({"model": model.name, "version": model.version})
                )
                storage.remove_tree(self.spark, f"{records}/{batch_id - KEPT_RECORDS}")
            return scored

        return score

    # ---------------------------------------------------------------- backfills
    def rescore(self, inputs: DataFrame, held: DataFrame | None, version: int | None = None) -> DataFrame:
        """``inputs`` (a slice of the upstream) scored as the stream did: each row with the
        version recorded on its row in ``held`` (the table's slice), others with the version in
        force now; with ``version``, all with that one."""
        if version is not None or held is None:
            return self.apply(inputs, self.load(version))
        keys = list(self.table.keys)
        if missing := [k for k in keys if k not in inputs.columns]:
            raise SpecError(
                f"table {self.table.name!r}: its keys {missing} are not columns of its upstream, so a "
                "backfill cannot find the version each row was scored with; pass --model-version"
            )
        recorded = held.select(*keys, F.col(MODEL_VERSION).alias("_recorded")).dropDuplicates(keys)
        tagged = inputs.join(recorded, keys, "left")
        versions = sorted(
            {r[0] for r in tagged.select("_recorded").distinct().collect()}, key=lambda v: (v is None, v)
        )
        if not versions:
            return self.apply(inputs, self.load())
        parts = [
            self.apply(
                tagged.where(F.col("_recorded").eqNullSafe(F.lit(number))).drop("_recorded"),
                self.load(number),
            )
            for number in versions
        ]
        out = parts[0]
        for part in parts[1:]:
            out = out.unionByName(part)
        return out
