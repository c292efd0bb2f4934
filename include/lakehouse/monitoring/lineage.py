"""OpenLineage events of the flows: where each table's rows and columns come from.

A flow's run is an OpenLineage job run (namespace ``lakehouse``, name ``<pipeline>.<table>``):
its inputs (the source's files or topic, upstream tables, lookups) and outputs (the table, its
quarantine) named as OpenLineage's naming convention says for their storage (``file`` + path,
``s3://bucket`` + key, ``kafka://brokers`` + topic), each table with a symlink to its name
(``silver.device_events``), its schema, and its column lineage (``lakehouse.plan.lineage``,
from Spark's analyzed plan). Built with ``openlineage-python``; sent where the user configured
OpenLineage (``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, ``openlineage.yml`` or
``OPENLINEAGE__TRANSPORT__*``: Marquez, DataHub, OpenMetadata, Kafka...), else into the
``ops.lineage`` table, queryable like the other ``ops`` tables. Emitting never fails a flow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse import __version__
from lakehouse.core import times
from lakehouse.monitoring.ops_tables import LINEAGE_TABLE, append_rows, read_table
from lakehouse.plan.lineage import inputs_of, outputs_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import polars as pl
    from openlineage.client.event_v2 import RunEvent

    from lakehouse.core.lake import Lake
    from lakehouse.plan.lineage import ColumnLineage
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.lineage")

JOB_NAMESPACE = "lakehouse"
PRODUCER = f"https://github.com/lakehouse/lakehouse/tree/v{__version__}"
SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("event_type", pa.string()),
        ("job", pa.string()),
        ("run_id", pa.string()),
        ("inputs", pa.list_(pa.string())),
        ("outputs", pa.list_(pa.string())),
        ("event", pa.string()),  # the OpenLineage event, as JSON
    ]
)


def dataset_name(location: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a storage location (its naming convention)."""
    if location.startswith("kafka://"):
        brokers, _, topic = location.removeprefix("kafka://").partition("/")
        return f"kafka://{brokers}", topic
    for scheme in ("s3a://", "s3n://", "s3://", "gs://", "abfss://"):
        if location.startswith(scheme):
            bucket, _, key = location.removeprefix(scheme).partition("/")
            return f"{'s3' if scheme.startswith('s3') else scheme[:-3]}://{bucket}", key
    return "file", location.removeprefix("file://").removeprefix("file:")


def flow_event(
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    event_type: str,
    run_id: str,
    *,
    processing: str = "STREAMING",
    columns: ColumnLineage | None = None,
    schema: Mapping[str, str] | None = None,
    rows: int | None = None,
    error: str | None = None,
) -> RunEvent:
    """One OpenLineage run event of ``table``'s flow (``event_type``: START, RUNNING, COMPLETE,
    FAIL, ABORT)."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import (
        column_lineage_dataset,
        error_message_run,
        job_type_job,
        output_statistics_output_dataset,
        parent_run,
        schema_dataset,
        symlinks_dataset,
    )

    inputs, outputs = inputs_of(lake, pipeline, table), outputs_of(lake, table)
    tables = {*table.upstream_names, *outputs}  # the datasets that are tables of the lake

    def facets(label: str) -> dict[str, Any]:
        if label not in tables:
            return {}
        namespace, _ = dataset_name(lake.table(label))
        return {
            "symlinks": symlinks_dataset.SymlinksDatasetFacet(
                identifiers=[symlinks_dataset.Identifier(namespace=namespace, name=label, type="TABLE")]
            )
        }

    input_datasets = [
        InputDataset(*dataset_name(location), facets=facets(label)) for label, location in inputs.items()
    ]
    output_datasets = []
    for label, location in outputs.items():
        dataset_facets = facets(label)
        output_facets: dict[str, Any] = {}
        if label == table.name:
            if schema:
                dataset_facets["schema"] = schema_dataset.SchemaDatasetFacet(
                    fields=[
                        schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in schema.items()
                    ]
                )
            if columns is not None:
                dataset_facets["columnLineage"] = _column_facet(column_lineage_dataset, columns, inputs)
            if rows is not None:
                output_facets["outputStatistics"] = (
                    output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=rows)
                )
        output_datasets.append(
            OutputDataset(*dataset_name(location), facets=dataset_facets, outputFacets=output_facets)
        )
    run_facets: dict[str, Any] = {}
    if parent := _airflow_parent():
        run_facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent[1]), job=parent_run.Job(namespace="airflow", name=parent[0])
        )
    if error:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="python"
        )
    job_facets = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType=processing, integration="LAKEHOUSE", jobType="FLOW"
        )
    }
    return RunEvent(
        eventType=RunState[event_type],
        eventTime=times.now().isoformat(),
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=JOB_NAMESPACE, name=f"{pipeline.name}.{table.name}", facets=job_facets),
        inputs=input_datasets,
        outputs=output_datasets,
        producer=PRODUCER,
    )


def _column_facet(module: Any, columns: ColumnLineage, inputs: Mapping[str, str]) -> Any:
    def field(label: str, name: str, kind: str, subtype: str) -> Any:
        namespace, dataset = dataset_name(inputs[label])
        return module.InputField(
            namespace=namespace,
            name=dataset,
            field=name,
            transformations=[module.Transformation(type=kind, subtype=subtype)],
        )

    fields = {
        column: module.Fields(
            inputFields=[
                field(label, name, "DIRECT", subtype) for (label, name), subtype in sorted(found.items())
            ]
        )
        for column, found in columns.fields.items()
        if found
    }
    dataset = [
        field(label, name, "INDIRECT", subtype)
        for (label, name), subtypes in sorted(columns.dataset.items())
        for subtype in sorted(subtypes)
    ]
    return module.ColumnLineageDatasetFacet(fields=fields, dataset=dataset)


def _airflow_parent() -> tuple[str, str] | None:
    """The Airflow DAG run that started this process (its dag id and a run id derived from its
    run id), if one did."""
    dag_id, run_id = os.environ.get("AIRFLOW_CTX_DAG_ID"), os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    if not dag_id or not run_id:
        return None
    return dag_id, str(uuid.uuid5(uuid.NAMESPACE_URL, f"airflow/{dag_id}/{run_id}"))


# How often a running stream reports that its lineage run goes on (a RUNNING event, after a commit).
HEARTBEAT_SECONDS = 600.0


class Heartbeat:
    """Calls ``send`` after a commit when ``every`` seconds passed since the run started or
    last reported: a stream that runs for weeks shows as running, not as started once."""

    def __init__(self, send: Callable[[], None], every: float = HEARTBEAT_SECONDS) -> None:
        self.send, self.every = send, every
        self.last = time.monotonic()

    def beat(self) -> None:
        if time.monotonic() - self.last >= self.every:
            self.last = time.monotonic()
            self.send()


def new_run_id() -> str:
    """A run id as OpenLineage asks (a UUID, time-ordered)."""
    from openlineage.client.uuid import generate_new_uuid

    return str(generate_new_uuid())


class LineageLog:
    """``ops.lineage``: OpenLineage events, one row each, when no other transport is configured."""

    def __init__(self, lake: Lake) -> None:
        self.path = lake.table(LINEAGE_TABLE)

    def emit(self, event: RunEvent) -> None:
        from openlineage.client.serde import Serde

        text = Serde.to_json(event)
        row = {
            "event_id": hashlib.sha256(text.encode()).hexdigest()[:32],
            "event_time": times.parse_iso(event.eventTime),
            "event_type": event.eventType.value,
            "job": f"{event.job.namespace}/{event.job.name}",
            "run_id": event.run.runId,
            "inputs": [f"{d.namespace}/{d.name}" for d in event.inputs or []],
            "outputs": [f"{d.namespace}/{d.name}" for d in event.outputs or []],
            "event": text,
        }
        append_rows(self.path, SCHEMA, [row])

    def read(self) -> pl.DataFrame:
        return read_table(self.path, SCHEMA)

    def events(self) -> list[dict[str, Any]]:
        """The events, as the JSON documents they are, oldest first."""
        return [json.loads(text) for text in self.read().sort("event_time")["event"].to_list()]


def configured() -> bool:
    """Whether the user configured an OpenLineage transport of their own."""
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.noop import NoopConfig, NoopTransport

    if os.environ.get("OPENLINEAGE_URL"):
        return True
    quiet = logging.getLogger("openlineage.client.client")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # the probe's "will use noop transport", once per event
    try:
        probe = OpenLineageClient(transport=NoopTransport(NoopConfig()))
        return bool(probe.config.transport)
    finally:
        quiet.setLevel(level)


def emit(lake: Lake, event: RunEvent) -> None:
    """Send ``event`` where OpenLineage is configured, else to ``ops.lineage``; log, never raise."""
    try:
        if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
            return
        if configured():
            from openlineage.client import OpenLineageClient

            OpenLineageClient().emit(event)
        else:
            LineageLog(lake).emit(event)
    except Exception as exc:  # lineage is a report on the flow: it never stops one
        log.warning("could not emit the lineage event of %s: %s", event.job.name, exc)
