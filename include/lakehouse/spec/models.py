"""A model a pipeline trains from one of its tables and scores rows with, declared like the rest:
by name, with its functions named by reference, no ML library imported.

The functions live in the pipeline's package (``"models:fit_baselines"``), all pure:

- ``train(rows: DataFrame) -> dict``: the model learned from the training range of
  ``trained_on``, as a JSON-serializable artifact (parameters);
- ``score(rows: DataFrame, artifact: dict) -> DataFrame``: ``rows`` with the model's columns added
  (row by row: the same rows and artifact give the same scores in a stream and a backfill);
- ``evaluate(scored: DataFrame, labels: DataFrame | None) -> dict[str, float]``: metrics on the
  held-out range (``labels``: the ``labels`` lookup, the ground truth when there is one).

A table scored by the model declares ``model="<name>"``; its transform then receives the model
in force (``lakehouse.models.scoring.ModelInForce``: ``model.score(rows)``) as its last argument.
"""

from __future__ import annotations

import operator
import re
from typing import TYPE_CHECKING, Literal

from attrs import field, frozen

from lakehouse.spec.durations import NAME, SpecError, parse_duration

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import timedelta

MODEL_COLUMNS = ("_model", "_model_version")  # what every scored row carries
_CONDITION = re.compile(r"^\s*(>=|<=|>|<|==)\s*(-?\d+(?:\.\d+)?)\s*$")
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}


def _conditions(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


@frozen
class Model:
    """A model of the pipeline (see the module doc).

    - ``name``: the registry name (``lakehouse models``), unique in the lake.
    - ``trained_on``: the table whose rows it learns from; ``event_time`` slices its ranges.
    - ``train``, ``score``, ``evaluate``: ``"module:function"`` references (module doc).
    - ``labels``: a lookup of the pipeline holding ground truth for ``evaluate``.
    - ``promote_when``: metric conditions a version must meet to be promoted
      (``{"f1": ">= 0.8", "alert_rate": "<= 0.05"}``).
    - ``alias``: the alias whose version streams score with (``champion``).
    - ``unavailable``: what a flow does when no version is promoted or it cannot be loaded:
      ``fail`` (the flow stops, naming the model) or ``quarantine`` (its rows go to the table's
      quarantine, unscored, with the reason).
    - ``train_window``, ``eval_window``: the default ranges: evaluation over the last
      ``eval_window`` of ``trained_on``, training over the ``train_window`` before it.
    """

    name: str
    trained_on: str
    train: str
    score: str
    evaluate: str | None = None
    labels: str | None = None
    promote_when: dict[str, str] = field(factory=dict, converter=_conditions)
    alias: str = "champion"
    unavailable: Literal["fail", "quarantine"] = "fail"
    train_window: str = "7 days"
    eval_window: str = "1 day"

    def __attrs_post_init__(self) -> None:
        if not NAME.match(self.name):
            raise SpecError(f"model name {self.name!r} must be lower_snake_case")
        for kind in ("train", "score", "evaluate"):
            ref = getattr(self, kind)
            if ref is not None and ":" not in ref:
                raise SpecError(f"model {self.name!r}: {kind}={ref!r} must look like 'module:function'")
        if self.unavailable not in ("fail", "quarantine"):
            raise SpecError(
                f"model {self.name!r}: unavailable={self.unavailable!r} is not 'fail' or 'quarantine'"
            )
        if self.promote_when and not self.evaluate:
            raise SpecError(
                f"model {self.name!r}: promote_when needs evaluate= to compute the metrics it checks"
            )
        for metric, condition in self.promote_when.items():
            if not _CONDITION.match(condition):
                raise SpecError(
                    f"model {self.name!r}: promote_when[{metric!r}] = {condition!r}; write a comparison "
                    "with a number, e.g. '>= 0.8'"
                )
        parse_duration(self.train_window, f"model {self.name!r} train_window")
        parse_duration(self.eval_window, f"model {self.name!r} eval_window")

    @property
    def train_delta(self) -> timedelta:
        return parse_duration(self.train_window, "train_window")

    @property
    def eval_delta(self) -> timedelta:
        return parse_duration(self.eval_window, "eval_window")

    def gate(self, metrics: Mapping[str, float]) -> list[str]:
        """The promotion conditions ``metrics`` fail (empty: the version may be promoted)."""
        failed = []
        for metric, condition in self.promote_when.items():
            match = _CONDITION.match(condition)
            assert match is not None
            value = metrics.get(metric)
            if value is None or not _OPERATORS[match[1]](float(value), float(match[2])):
                failed.append(f"{metric} {condition} (got {value})")
        return failed
