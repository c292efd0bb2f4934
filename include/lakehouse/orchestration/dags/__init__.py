"""The DAG factory: every registered pipeline gets the same DAGs, built from its declaration.

For pipeline ``iot``:

======================  ===========================================================================
``iot_stream_deploy``   manual: start the continuous flows' Spark driver (spark-submit, detached)
``iot_stream_monitor``  every few minutes: restart dead drivers; health and figures of each flow
``iot_stream_stop``     manual: stop flows gracefully (the running micro-batch completes)
``iot_incremental``     scheduled: availableNow runs of every flow, in dependency order
``iot_backfill``        daily data intervals = event-time slices; manual runs with start/end/flows
``iot_quality``         after table updates: the Great Expectations checks (if it declares some)
``iot_train``           manual: train, evaluate, register (and promote) its models (if it declares some)
``iot_reset``           manual: stop flows, rebuild them with their new code, deploy them again
``iot_replay``          manual: quarantined rows judged again by the current expectations
======================  ===========================================================================

and, for the whole lake, ``lakehouse_maintenance``. Another kind of DAG is one builder appended
to :data:`PIPELINE_BUILDERS` (``pipeline -> DAGs``) or :data:`LAKE_BUILDERS` (``pipelines -> DAGs``);
what they share is in :mod:`~lakehouse.orchestration.dags.kit`.

Parse time stays pure: no pyspark, no connection, no database query, no data read. Task bodies
import what they need when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse import registry
from lakehouse.core.config import Settings, settings
from lakehouse.orchestration.dags.changes import replay_dags, reset_dags
from lakehouse.orchestration.dags.maintenance import maintenance_dags
from lakehouse.orchestration.dags.quality import quality_dags
from lakehouse.orchestration.dags.runs import backfill_dags, incremental_dags, train_dags
from lakehouse.orchestration.dags.streams import deploy_dags, monitor_dags, stop_dags

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from airflow.sdk import DAG

    from lakehouse.spec import Pipeline

PIPELINE_BUILDERS: list[Callable[[Pipeline, Settings], list[DAG]]] = [
    deploy_dags,
    monitor_dags,
    stop_dags,
    incremental_dags,
    backfill_dags,
    quality_dags,
    train_dags,
    reset_dags,
    replay_dags,
]
"""One function per kind of DAG, each called with every registered pipeline."""

LAKE_BUILDERS: list[Callable[[Sequence[Pipeline], Settings], list[DAG]]] = [maintenance_dags]
"""One function per kind of lake-wide DAG, called once with all pipelines."""


def build(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    """The DAGs of one pipeline."""
    return [dag for builder in PIPELINE_BUILDERS for dag in builder(pipeline, conf)]


def build_all(conf: Settings | None = None) -> dict[str, DAG]:
    """Every DAG of every registered pipeline that loads and of the lake, by dag id (for a DAG
    file's ``globals()``); the pipelines that do not load are :func:`raise_load_failures`'s."""
    conf = conf or settings()
    pipelines = list(registry.deployed(conf).values())
    dags = [dag for p in pipelines for dag in build(p, conf)]
    dags += [dag for builder in LAKE_BUILDERS for dag in builder(pipelines, conf)]
    return {dag.dag_id: dag for dag in dags}


class PipelinesNotLoaded(Exception):  # its name heads the import error Airflow shows
    """Pipelines whose declaration cannot be loaded: each with its file, its error and the fix."""


def raise_load_failures(conf: Settings | None = None) -> None:
    """Raise :class:`PipelinesNotLoaded` if a pipeline cannot be loaded, for a DAG file of its own.

    Airflow records an exception raised by a DAG file as that file's import error, and marks
    every DAG the file declares as having import errors (the scheduler then runs none of them):
    raised from the file that builds the other pipelines' DAGs, one team's mistake would stop
    them all. From a file that declares no DAG, it is shown alone, as Airflow shows any broken
    DAG file.
    """
    conf = conf or settings()
    failures = registry.load(conf.pipelines_package).failures
    if failures:
        names = ", ".join(sorted(failures))
        lines = "\n".join(f"- {failure.message}" for _, failure in sorted(failures.items()))
        raise PipelinesNotLoaded(f"{len(failures)} pipeline(s) cannot be loaded ({names}):\n{lines}")
