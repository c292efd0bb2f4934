"""The Great Expectations adapter: every place the platform touches GX Core.

- :func:`instantiate` turns a declaration (:class:`~lakehouse.spec.expectations.Expectation`)
  into the real GX expectation, with errors that name the table and the expectation;
- :func:`check_pipeline` does it for every declaration of a pipeline (``lakehouse validate``);
- :func:`row_conditions` asks GX, once per flow, for each row expectation's *unexpected*
  condition as a Spark Column: GX's own metric ``<map_metric>.condition`` plus the domain
  filter GX applies before it (``row_condition``, null filters, ``ignore_row_if``). Streams and
  backfills evaluate those Columns on every row, so what "unexpected" means is GX's definition,
  never a second rule language; tests hold the counts equal to ``batch.validate()``.

Importing this module imports GX (2-3 s): only runners, checks and tests do.
"""

from __future__ import annotations

import difflib
import logging
import threading
import uuid
from functools import reduce
from typing import TYPE_CHECKING, Any

import great_expectations as gx
import great_expectations.expectations as gxe_classes
from great_expectations.core.suite_parameters import build_suite_parameters
from great_expectations.data_context.types.base import ProgressBarsConfig
from great_expectations.execution_engine import SparkDFExecutionEngine
from great_expectations.expectations.expectation import Expectation as GxExpectation
from great_expectations.expectations.legacy_row_conditions import (
    RowConditionParserType,
    parse_condition_to_spark,
)
from great_expectations.expectations.model_field_types import CONDITION_PARSER_SPARK
from great_expectations.expectations.registry import get_metric_kwargs, get_metric_provider
from great_expectations.expectations.row_conditions import (
    Condition,
    PassThroughCondition,
    deserialize_row_condition,
)
from great_expectations.validator.metric_configuration import MetricConfiguration
from great_expectations.validator.validator import Validator
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.spec import SpecError
from lakehouse.spec.expectations import TABLE_REFERENCE, Expectation
from lakehouse.spec.table import PLATFORM_DATABASES

if TYPE_CHECKING:
    import re
    from collections.abc import Mapping, Sequence

    from pyspark.sql import Column, SparkSession
    from pyspark.sql.types import StructType

    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.quality")

# GX keeps process-wide registries and caches; flows of one driver resolve conditions one at a time.
GX_LOCK = threading.RLock()
_WINDOW_CONDITION = "window_condition_fn"
_PLACEHOLDER_LAKE = Lake("/lake")
_ephemeral: Any = None


def _quiet(context: Any) -> Any:

    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def ephemeral_context() -> Any:
    """The process's in-memory GX context, for building row conditions (one per process: each
    new ephemeral context creates a temporary directory)."""
    global _ephemeral
    if _ephemeral is None:
        _ephemeral = _quiet(gx.get_context(mode="ephemeral"))
    return _ephemeral


def file_context(home: str) -> Any:
    """The GX project under ``home`` (suites, validation results, Data Docs), created on first use."""
    context = _quiet(gx.get_context(mode="file", project_root_dir=home))
    context.variables.save()
    return context


def _all_classes() -> dict[str, type[GxExpectation]]:
    return {
        name: value
        for name, value in vars(gxe_classes).items()
        if isinstance(value, type) and issubclass(value, GxExpectation) and value is not GxExpectation
    }


def is_dynamic(declaration: Expectation) -> bool:
    """True when an argument is a GX suite parameter (``{"$PARAMETER": "now() + ..."}``),
    i.e. its value is computed when the expectation is evaluated."""
    return any(isinstance(v, dict) and "$PARAMETER" in v for v in declaration.kwargs.values())


def with_table_paths(
    declaration: Expectation, lake: Lake, versions: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The declaration's arguments with ``{layer.table}`` replaced by ``delta.`<path>```, read at
    the table's version in ``versions`` when it has one (the latest otherwise)."""

    def table(match: re.Match[str]) -> str:
        name = f"{match[1]}.{match[2]}"
        version = (versions or {}).get(name)
        return f"delta.`{lake.table(name)}`" + ("" if version is None else f" VERSION AS OF {version}")

    def substitute(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return TABLE_REFERENCE.sub(table, value)

    return {key: substitute(value) for key, value in declaration.kwargs.items()}


def instantiate(
    declaration: Expectation,
    where: str,
    lake: Lake = _PLACEHOLDER_LAKE,
    *,
    parameters: dict[str, Any] | None = None,
    versions: Mapping[str, int] | None = None,
) -> GxExpectation:
    """The GX expectation a declaration names, tagged with its name and action (``meta``) and
    the matching GX ``severity``. With ``parameters`` (``{}`` for none), suite parameters such
    as ``{"$PARAMETER": "now() + timedelta(days=1)"}`` are evaluated now; tables it names are
    read at their ``versions`` (see :func:`with_table_paths`)."""
    what = f"{where}: {declaration.label!r}"
    classes = _all_classes()
    cls = classes.get(declaration.gx_class)
    if cls is None:
        close = difflib.get_close_matches(declaration.gx_class, list(classes), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (see great_expectations.expectations)"
        raise SpecError(f"{what}: GX Core has no expectation class {declaration.gx_class!r}{hint}")
    kwargs = with_table_paths(declaration, lake, versions)
    if parameters is not None:
        kwargs, _ = build_suite_parameters(expectation_args=kwargs, suite_parameters=parameters)
    meta = {"lakehouse": {"name": declaration.label, "action": declaration.action}}
    try:
        return cls(**kwargs, meta=meta, severity=declaration.severity)
    except Exception as exc:  # pydantic's ValidationError lists every bad or missing argument
        details = "; ".join(line.strip() for line in str(exc).splitlines()[1:] if line.strip()) or str(exc)
        fields = ", ".join(
            sorted(n for n in cls.__fields__ if n not in GxExpectation.__fields__ or n == "row_condition")
        )
        raise SpecError(
            f"{what}: {declaration.gx_class}({', '.join(f'{k}=...' for k in declaration.kwargs)}) "
            f"is not valid: {details}. Its arguments are: {fields}"
        ) from None


def condition_metric(expectation: GxExpectation, where: str) -> str:
    """The GX metric giving a row expectation's per-row *unexpected* condition.

    Only map expectations have one; and those whose condition compares rows with each other
    (a window, like uniqueness) would judge one micro-batch at a time, so they are table checks.
    """
    map_metric = getattr(expectation, "map_metric", None)
    label = expectation.meta["lakehouse"]["name"] if expectation.meta else type(expectation).__name__
    if not map_metric:
        raise SpecError(
            f"{where}: {label!r}: {type(expectation).__name__} measures the table as a whole, not "
            "each row; declare it in checks= (run on the table at rest), not in expectations="
        )
    metric = f"{map_metric}.condition"
    # The registry only looks at the engine's type: an uninitialized one starts no Spark session.
    # (GX's get_metric_function_type unpacks the provider pair in the wrong order, so read both.)
    provider = get_metric_provider(metric, object.__new__(SparkDFExecutionEngine))
    kinds = {str(getattr(getattr(p, "metric_fn_type", None), "value", "")) for p in provider}
    if _WINDOW_CONDITION in kinds:
        raise SpecError(
            f"{where}: {label!r}: {type(expectation).__name__} compares rows with each other, so "
            "inside a stream it would only see one micro-batch; declare it in checks= instead"
        )
    return metric


def check_table(pipeline: Pipeline, table: Table) -> None:
    """Instantiate every declaration of ``table``; row expectations must be per-row."""
    known = {*pipeline.table_names}
    for kind, declarations in (("expectation", table.expectations), ("check", table.checks)):
        where = f"table {table.name!r} {kind}"
        for declaration in declarations:
            for reference in declaration.table_references():
                if reference not in known and reference.split(".", 1)[0] not in PLATFORM_DATABASES:
                    raise SpecError(
                        f"{where} {declaration.label!r} reads {{{reference}}}, which pipeline "
                        f"{pipeline.name!r} does not declare (its tables: {', '.join(sorted(known))})"
                    )
            expectation = instantiate(declaration, where, parameters={} if is_dynamic(declaration) else None)
            if kind == "expectation":
                condition_metric(expectation, where)


def check_pipeline(pipeline: Pipeline) -> None:
    """Every expectation and check of ``pipeline`` is a valid GX expectation (``lakehouse validate``)."""
    with GX_LOCK:
        for table in pipeline.tables:
            check_table(pipeline, table)


# --------------------------------------------------------------------------- row conditions


def _domain_filter(
    engine: SparkDFExecutionEngine, domain: dict[str, Any], schema: StructType
) -> Column | None:
    """The rows GX evaluates an expectation on, as a Column: the filters GX's Spark engine
    applies in ``get_domain_records`` (row_condition, filter_conditions, ignore_row_if)."""

    filters: list[Column] = []
    row_condition = domain.get("row_condition")
    if row_condition:
        if isinstance(row_condition, dict):
            row_condition = deserialize_row_condition(row_condition)
        if isinstance(row_condition, PassThroughCondition):
            filters.append(F.expr(row_condition.pass_through_filter))
        elif isinstance(row_condition, Condition):
            clause = engine.condition_to_filter_clause(row_condition)  # Spark SQL text or a Column
            filters.append(F.expr(clause) if isinstance(clause, str) else clause)
        elif domain.get("condition_parser") == CONDITION_PARSER_SPARK:
            filters.append(F.expr(row_condition))
        else:
            filters.append(parse_condition_to_spark(row_condition, schema=schema))
    for condition in domain.get("filter_conditions") or []:
        if condition.condition_type != RowConditionParserType.SPARK_SQL:
            raise SpecError(f"unsupported GX filter condition {condition!r}")
        filters.append(F.expr(condition.condition))
    ignore = domain.get("ignore_row_if")
    columns = (
        [domain["column_A"], domain["column_B"]] if "column_A" in domain else domain.get("column_list") or []
    )
    if ignore and "column" not in domain and columns:
        missing = [F.col(c).isNull() for c in columns]
        if ignore in ("both_values_are_missing", "all_values_are_missing"):
            filters.append(~reduce(lambda a, b: a & b, missing))
        elif ignore in ("either_value_is_missing", "any_value_is_missing"):
            filters.append(~reduce(lambda a, b: a | b, missing))
        elif ignore not in ("neither", "never"):
            raise SpecError(f"unrecognized ignore_row_if={ignore!r}")
    return reduce(lambda a, b: a & b, filters) if filters else None


def row_conditions(
    spark: SparkSession,
    schema: StructType,
    declarations: Sequence[Expectation],
    where: str,
    lake: Lake = _PLACEHOLDER_LAKE,
) -> dict[str, Column]:
    """Per declaration label, the Column that is true exactly on the rows GX counts as
    unexpected. Resolved by GX on an empty DataFrame of ``schema`` (no data is read); suite
    parameters are evaluated now."""

    with GX_LOCK:
        source = ephemeral_context().data_sources.add_or_update_spark("rows")
        asset = source.add_dataframe_asset(f"rows-{uuid.uuid4()}")
        empty = spark.createDataFrame([], schema)
        batch = asset.add_batch_definition_whole_dataframe("rows").get_batch(
            batch_parameters={"dataframe": empty}
        )
        source.delete_asset(asset.name)
        engine = batch.data.execution_engine
        validator = Validator(execution_engine=engine, batches=[batch])
        configurations: dict[str, MetricConfiguration] = {}
        for declaration in declarations:
            expectation = instantiate(declaration, where, lake, parameters={})
            metric = condition_metric(expectation, where)
            kwargs = get_metric_kwargs(metric, configuration=expectation.configuration)
            configurations[declaration.label] = MetricConfiguration(
                metric, kwargs["metric_domain_kwargs"], kwargs["metric_value_kwargs"]
            )
        try:
            resolved, aborted = validator.compute_metrics(
                list(configurations.values()),
                runtime_configuration={"catch_exceptions": False},
                min_graph_edges_pbar_enable=1_000_000,  # no progress bars in driver logs
            )
        except Exception as exc:
            raise SpecError(f"{where}: GX could not build the row conditions: {exc}") from exc
        if aborted:
            first = next(iter(aborted.values()))
            raise SpecError(f"{where}: GX could not build a row condition: {first}")
        out: dict[str, Column] = {}
        for label, configuration in configurations.items():
            unexpected, compute_domain, accessor_domain = resolved[configuration.id]
            # GX filters the domain with both halves of the domain kwargs (get_compute_domain)
            domain = _domain_filter(engine, {**compute_domain, **accessor_domain}, schema)
            condition = unexpected if domain is None else domain & unexpected
            out[label] = F.coalesce(condition, F.lit(False))
        return out
