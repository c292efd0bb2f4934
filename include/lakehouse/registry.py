"""Pipeline discovery: every sub-package of the pipelines package that declares a ``Pipeline``.

A pipeline lives in ``jobs/pipelines/<name>/pipeline.py`` (module attribute of type
:class:`~lakehouse.spec.Pipeline`). Adding a directory adds a pipeline; the platform does not
change. Discovery imports only ``pipeline.py`` modules, which must stay free of pyspark so that
DAG files can use the registry at parse time.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import TYPE_CHECKING, Any

from lakehouse.spec import Pipeline, SpecError, TransformRef

if TYPE_CHECKING:
    from collections.abc import Callable


def discover(package: str) -> dict[str, Pipeline]:
    """All pipelines under ``package``, keyed by name; table names must be globally unique."""
    try:
        root = importlib.import_module(package)
    except ModuleNotFoundError as exc:
        raise SpecError(
            f"pipelines package {package!r} cannot be imported ({exc}); "
            "set LAKEHOUSE_PIPELINES_PACKAGE or install the project (make bootstrap)"
        ) from exc
    pipelines: dict[str, Pipeline] = {}
    owners: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        module_name = f"{package}.{info.name}.pipeline"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # a helper package without a pipeline
            raise
        found = [v for v in vars(module).values() if isinstance(v, Pipeline)]
        if len(found) != 1:
            raise SpecError(f"{module_name} must define exactly one Pipeline, found {len(found)}")
        pipeline = found[0].with_package(f"{package}.{info.name}")
        if pipeline.name in pipelines:
            raise SpecError(f"two packages declare pipeline {pipeline.name!r}")
        for table in pipeline.table_names:
            if table in owners:
                raise SpecError(
                    f"table {table!r} is declared by pipelines {owners[table]!r} and "
                    f"{pipeline.name!r}; table names are global (they are catalog names)"
                )
            owners[table] = pipeline.name
        pipelines[pipeline.name] = pipeline
    return pipelines


def get(package: str, name: str) -> Pipeline:
    pipelines = discover(package)
    if name not in pipelines:
        known = ", ".join(sorted(pipelines)) or "none"
        raise SpecError(f"no pipeline named {name!r} in package {package!r} (known: {known})")
    return pipelines[name]


def resolve(pipeline: Pipeline, ref: TransformRef) -> Callable[..., Any]:
    """Turn ``"module:function"`` into the callable; ``module`` is looked up inside the pipeline
    package first (``"transforms:clean"`` -> ``pipelines.iot.transforms.clean``), then absolutely."""
    if callable(ref):
        return ref
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise SpecError(f"reference {ref!r} must look like 'module:function'")
    candidates = [f"{pipeline.package}.{module_name}"] if pipeline.package else []
    candidates.append(module_name)
    for candidate in candidates:
        try:
            module = importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            if exc.name and (candidate == exc.name or candidate.startswith(exc.name + ".")):
                continue  # this candidate does not exist; try the next
            raise
        found = getattr(module, attr, None)
        if not callable(found):
            raise SpecError(f"reference {ref!r}: {candidate} has no function {attr!r}")
        return found
    raise SpecError(f"reference {ref!r}: no module {' or '.join(candidates)}")


def check_transforms(pipeline: Pipeline) -> None:
    """Every transform resolves and accepts one argument per upstream and lookup (and the model,
    for scored tables), in order; every model's functions resolve and take what they are given."""
    for table in pipeline.tables:
        if table.transform is None:
            continue
        inputs = [*table.upstream_names, *table.lookups] or [f"{table.name} source rows"]
        if table.model is not None:
            inputs.append(f"the model {table.model!r}")
        _check_signature(pipeline, table.transform, inputs, f"table {table.name!r}: transform")
    for model in pipeline.models:
        where = f"model {model.name!r}:"
        _check_signature(pipeline, model.train, [f"the rows of {model.trained_on}"], f"{where} train")
        _check_signature(pipeline, model.score, ["the rows", "the artifact"], f"{where} score")
        if model.evaluate:
            _check_signature(pipeline, model.evaluate, ["the scored rows", "the labels"], f"{where} evaluate")


def _check_signature(pipeline: Pipeline, ref: TransformRef, inputs: list[str], what: str) -> None:
    function = resolve(pipeline, ref)
    try:
        inspect.signature(function).bind(*inputs)
    except TypeError:
        raise SpecError(
            f"{what} {ref!r} must accept {len(inputs)} positional argument(s) ({', '.join(inputs)}), "
            f"but its signature is {inspect.signature(function)}"
        ) from None
