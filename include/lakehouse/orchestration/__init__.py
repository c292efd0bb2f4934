"""Airflow orchestration: the DAG factory and the tasks it schedules (deploy, monitor, stop)."""

# The factory's DAGs of a pipeline, ``<pipeline>_<kind>`` (lakehouse.orchestration.dags): the cockpit
# triggers them, alerts and events name the pipeline a DAG belongs to by them.
DAG_KINDS = (
    "stream_deploy",
    "stream_stop",
    "stream_monitor",
    "backfill",
    "incremental",
    "quality",
    "reset",
    "replay",
)


def pipeline_of(dag_id: str) -> str | None:
    """The pipeline a generated DAG id belongs to (None: not one of the factory's)."""
    return next((dag_id[: -len(kind) - 1] for kind in DAG_KINDS if dag_id.endswith(f"_{kind}")), None)
