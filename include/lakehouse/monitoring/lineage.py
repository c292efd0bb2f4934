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

import functools
import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse import __version__
from lakehouse.core import times
from lakehouse.monitoring.ops_tables import LINEAGE_TABLE, append_rows, read_table
from lakehouse.plan.lineage import inputs_of, outputs_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    import polars as pl
    from openlineage.client.event_v2 import RunEvent

    from lakehouse.core.lake import Lake
    from lakehouse.plan.lineage import Column, ColumnLineage
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
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import column_lineage_dataset, schema_dataset

    inputs, outputs = inputs_of(lake, pipeline, table), outputs_of(lake, table)
    tables = {*table.upstream_names, *outputs}  # the datasets that are tables of the lake

    def facets(label: str) -> dict[str, Any]:
        return _table_facets(lake, label) if label in tables else {}

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
            output_facets = _rows_written(rows)
        output_datasets.append(
            OutputDataset(*dataset_name(location), facets=dataset_facets, outputFacets=output_facets)
        )
    return _run_event(
        event_type, run_id, f"{pipeline.name}.{table.name}", ("FLOW", processing), input_datasets,
        output_datasets, error,
    )  # fmt: skip


@dataclass(frozen=True)
class Assertion:
    """One expectation's outcome in a quality run (OpenLineage's data-quality assertion)."""

    assertion: str  # what is asserted: the GX expectation type (``expect_column_values_to_be_unique``)
    name: str  # the expectation's label (its ``name=``, else type and columns)
    success: bool
    column: str | None = None
    severity: str | None = None  # GX's: ``critical``, or ``warning`` for a ``warn`` action
    actual: str | None = None  # what was found (unexpected rows, the observed value)


def quality_event(
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    run_id: str,
    assertions: list[Assertion],
    *,
    rows: int | None = None,
    version: int | None = None,
    error: str | None = None,
) -> RunEvent:
    """The OpenLineage event of a table's quality run (job ``<pipeline>.<table>.quality``): the
    table as its input with a data-quality assertion per expectation and its row count, at the
    Delta version the run read; FAIL when the run could not check (``error``), else COMPLETE
    (the assertions say what passed)."""
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dqa
    from openlineage.client.facet_v2 import data_quality_metrics_input_dataset as dqm

    checked: dict[str, Any] = {
        "dataQualityAssertions": dqa.DataQualityAssertionsDatasetFacet(
            assertions=[
                dqa.Assertion(
                    assertion=a.assertion,
                    name=a.name,
                    success=a.success,
                    column=a.column,
                    severity=a.severity,
                    actual=a.actual,
                )
                for a in assertions
            ]
        )
    }
    if rows is not None:
        checked["dataQualityMetrics"] = dqm.DataQualityMetricsInputDatasetFacet(
            rowCount=rows, columnMetrics={}
        )
    dataset = InputDataset(
        *dataset_name(lake.table(table.name)),
        facets=_table_facets(lake, table.name, version),
        inputFacets=checked,
    )
    return _run_event(
        "FAIL" if error else "COMPLETE", run_id, f"{pipeline.name}.{table.name}.quality",
        ("QUALITY", "BATCH"), [dataset], [], error,
    )  # fmt: skip


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


def replay_event(
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    run_id: str,
    *,
    landed: int | None = None,
    versions: list[int] | None = None,
    error: str | None = None,
) -> RunEvent:
    """The OpenLineage event of a quarantine replay (job ``<pipeline>.<table>.replay``): the
    quarantine as its input (at the versions replayed), the table and the quarantine as its
    outputs, the rows that landed in the table; COMPLETE, or FAIL with ``error``."""
    from openlineage.client.event_v2 import InputDataset, OutputDataset

    quarantine = dataset_name(lake.table(table.quarantine))
    version = max(versions) if versions else None
    return _run_event(
        "FAIL" if error else "COMPLETE", run_id, f"{pipeline.name}.{table.name}.replay", ("REPLAY", "BATCH"),
        [InputDataset(*quarantine, facets=_table_facets(lake, table.quarantine, version))],
        [
            OutputDataset(
                *dataset_name(lake.table(table.name)), facets=_table_facets(lake, table.name),
                outputFacets=_rows_written(landed),
            ),
            OutputDataset(*quarantine, facets=_table_facets(lake, table.quarantine)),
        ],
        error,
    )  # fmt: skip


def _table_facets(lake: Lake, name: str, version: int | None = None) -> dict[str, Any]:
    """A lake table's dataset facets: a symlink to its name, and the Delta version read."""
    from openlineage.client.facet_v2 import dataset_version_dataset, symlinks_dataset

    namespace, _ = dataset_name(lake.table(name))
    identifier = symlinks_dataset.Identifier(namespace=namespace, name=name, type="TABLE")
    facets: dict[str, Any] = {"symlinks": symlinks_dataset.SymlinksDatasetFacet(identifiers=[identifier])}
    if version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))
    return facets


def _rows_written(rows: int | None) -> dict[str, Any]:
    from openlineage.client.facet_v2 import output_statistics_output_dataset as statistics

    return (
        {}
        if rows is None
        else {"outputStatistics": statistics.OutputStatisticsOutputDatasetFacet(rowCount=rows)}
    )


def _run_event(
    event_type: str,
    run_id: str,
    job: str,
    kind: tuple[str, str],
    inputs: list[Any],
    outputs: list[Any],
    error: str | None,
) -> RunEvent:
    """A run event of job ``lakehouse``/``job``; ``kind``: its job type and processing type."""
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import job_type_job

    job_type, processing = kind
    facets = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType=processing, integration="LAKEHOUSE", jobType=job_type
        )
    }
    return RunEvent(
        eventType=RunState[event_type],
        eventTime=times.now().isoformat(),
        run=Run(runId=run_id, facets=_run_facets(error)),
        job=Job(namespace=JOB_NAMESPACE, name=job, facets=facets),
        inputs=inputs,
        outputs=outputs,
        producer=PRODUCER,
    )


def _run_facets(error: str | None) -> dict[str, Any]:
    """A run's facets: the Airflow task that started it, the error it ended with."""
    from openlineage.client.facet_v2 import error_message_run, parent_run

    facets: dict[str, Any] = {}
    if found := parent():
        (namespace, name, run_id), (root_namespace, root_name, root_run_id) = found
        facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=run_id),
            job=parent_run.Job(namespace=namespace, name=name),
            root=parent_run.Root(
                run=parent_run.RootRun(runId=root_run_id),
                job=parent_run.RootJob(namespace=root_namespace, name=root_name),
            ),
        )
    if error:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="python"
        )
    return facets


PARENT_VARIABLES = ("OPENLINEAGE_PARENT_ID", "OPENLINEAGE_ROOT_PARENT_ID")


def parent() -> tuple[tuple[str, str, str], tuple[str, str, str]] | None:
    """The run that started this process and its root, as (namespace, job, run id): the Airflow
    task and DAG run the launching task named in ``OPENLINEAGE_PARENT_ID`` and
    ``OPENLINEAGE_ROOT_PARENT_ID`` (``<namespace>/<job>/<run id>``, the convention OpenLineage's
    integrations share; Airflow's OpenLineage provider makes the ids), else the DAG run in
    Airflow's ``AIRFLOW_CTX_*`` variables (job ``airflow``/``<dag id>``, run id derived from its
    run id); ``None`` outside Airflow."""
    named = [os.environ.get(v, "").split("/") for v in PARENT_VARIABLES]
    if len(named[0]) == 3 and all(named[0]):
        direct = (named[0][0], named[0][1], named[0][2])
        root = (named[1][0], named[1][1], named[1][2]) if len(named[1]) == 3 and all(named[1]) else direct
        return direct, root
    dag_id, run_id = os.environ.get("AIRFLOW_CTX_DAG_ID"), os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    if not dag_id or not run_id:
        return None
    dag_run = ("airflow", dag_id, str(uuid.uuid5(uuid.NAMESPACE_URL, f"airflow/{dag_id}/{run_id}")))
    return dag_run, dag_run


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


def _configuration() -> tuple[str, ...]:
    """What OpenLineage's client reads its configuration from: its variables and the working
    directory (``openlineage.yml``). A client is made once per process and configuration."""
    return (os.getcwd(), *sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("OPENLINEAGE")))


@functools.lru_cache(maxsize=4)
def _client(configuration: tuple[str, ...]) -> Any:  # configuration: the cache's key
    """The OpenLineage client the user configured, or ``None`` when they configured none."""
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.noop import NoopConfig, NoopTransport

    if not os.environ.get("OPENLINEAGE_URL"):
        quiet = logging.getLogger("openlineage.client.client")
        level = quiet.level
        quiet.setLevel(logging.WARNING)  # the probe's "will use noop transport"
        try:
            if not OpenLineageClient(transport=NoopTransport(NoopConfig())).config.transport:
                return None
        finally:
            quiet.setLevel(level)
    before = set(os.environ)
    try:
        return OpenLineageClient()
    finally:  # the client turns OPENLINEAGE_URL into OPENLINEAGE__TRANSPORT__* variables of the
        for added in set(os.environ) - before:  # process, which would outlive a change of the URL
            del os.environ[added]


def configured() -> bool:
    """Whether the user configured an OpenLineage transport of their own."""
    return _client(_configuration()) is not None


def report(lake: Lake, what: str, build: Callable[[], RunEvent]) -> None:
    """Build the event of ``what`` (a run's) and :func:`emit` it: lineage is a report on a run,
    so an error in either is logged and never fails the run."""
    try:
        event = build()
    except Exception as exc:
        log.warning("no lineage event for %s: %s", what, exc)
        return
    emit(lake, event)


def emit(lake: Lake, event: RunEvent) -> None:
    """Send ``event`` where OpenLineage is configured, else to ``ops.lineage``; log, never raise."""
    try:
        if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
            return
        client = _client(_configuration())
        if client is not None:
            client.emit(event)
        else:
            LineageLog(lake).emit(event)
    except Exception as exc:  # lineage is a report on the flow: it never stops one
        log.warning("could not emit the lineage event of %s: %s", event.job.name, exc)


# ---------------------------------------------------------------------------- reading it back


@dataclass
class ColumnGraph:
    """The columns of a pipeline's tables and where each comes from, as the newest lineage event
    of each flow says. A column is (dataset, column): a dataset is a table's name, else the
    label its flow names it by (``reference/devices``, a source's landing folder or topic)."""

    inputs: dict[Column, dict[Column, str]] = field(default_factory=dict)  # -> its direct inputs
    selected_by: dict[str, dict[Column, list[str]]] = field(default_factory=dict)  # table -> rows' deciders
    schemas: dict[str, list[str]] = field(default_factory=dict)  # table -> its columns, in order

    def upstream(self, column: Column) -> list[Column]:
        """Every column ``column`` is computed from, through the tables in between."""
        return _reach(column, lambda c: self.inputs.get(c, {}))

    def downstream(self, column: Column) -> list[Column]:
        """Every column computed from ``column``, through the tables in between."""
        readers: dict[Column, list[Column]] = {}
        for output, found in self.inputs.items():
            for source in found:
                readers.setdefault(source, []).append(output)
        return _reach(column, lambda c: readers.get(c, []))


def _reach(start: Column, step: Callable[[Column], Iterable[Column]]) -> list[Column]:
    seen: dict[Column, None] = {}
    todo = list(step(start))
    while todo:
        column = todo.pop(0)
        if column not in seen and column != start:
            seen[column] = None
            todo.extend(step(column))
    return list(seen)


def column_graph(lake: Lake, pipeline: Pipeline) -> ColumnGraph:
    """``pipeline``'s column graph from ``ops.lineage``: per table, the newest event of its flow
    that carries column lineage (a stream's start, a backfill step); empty where none is there
    (lineage sent to another backend, or a flow that never ran)."""
    import polars as pl

    events = LineageLog(lake).read().filter(pl.col("event").str.contains('"columnLineage"', literal=True))
    newest = {r["job"]: r["event"] for r in events.sort("event_time").iter_rows(named=True)}
    graph = ColumnGraph()
    for table in pipeline.ordered():
        text = newest.get(f"{JOB_NAMESPACE}/{pipeline.name}.{table.name}")
        if text is None:
            continue
        event = json.loads(text)
        labels = _labels(lake, pipeline, table, event)
        output = next((o for o in event.get("outputs", []) if "columnLineage" in o.get("facets", {})), None)
        if output is None:
            continue
        facets = output["facets"]
        graph.schemas[table.name] = [f["name"] for f in facets.get("schema", {}).get("fields", [])]
        for column, found in facets["columnLineage"].get("fields", {}).items():
            graph.inputs[(table.name, column)] = {
                (labels(f), f["field"]): f["transformations"][0].get("subtype", "")
                for f in found.get("inputFields", [])
            }
        selected: dict[Column, list[str]] = {}
        for f in facets["columnLineage"].get("dataset", []):
            selected.setdefault((labels(f), f["field"]), []).append(
                f["transformations"][0].get("subtype", "")
            )
        graph.selected_by[table.name] = selected
    return graph


def _labels(lake: Lake, pipeline: Pipeline, table: Table, event: dict[str, Any]) -> Callable[[dict], str]:
    """A function naming an input field's dataset: a table by its symlink, else by the label the
    declaration gives that location, else as OpenLineage names it."""
    by_name = {dataset_name(location): label for label, location in inputs_of(lake, pipeline, table).items()}
    for dataset in event.get("inputs", []):
        for identifier in dataset.get("facets", {}).get("symlinks", {}).get("identifiers", []):
            by_name[(dataset["namespace"], dataset["name"])] = identifier["name"]

    def label(input_field: dict[str, Any]) -> str:
        key = (input_field["namespace"], input_field["name"])
        return by_name.get(key, f"{key[0]}/{key[1]}")

    return label
