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
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lakehouse.spec import Pipeline, SpecError, TransformRef

if TYPE_CHECKING:
    from collections.abc import Callable

    from lakehouse.core.config import Settings


@frozen
class LoadFailure:
    """A pipeline that cannot be loaded: its declaration module failed to import (a syntax error,
    a ``SpecError``, an exception raised by a module it imports) or clashes with another pipeline.
    It breaks only itself: discovery carries on with the others, and this says where and why."""

    name: str
    """The pipeline's directory name (its declared name is unknown when its module fails)."""
    module: str
    file: str
    error: str
    """The exception, ``"<type>: <message>"``, with the line of a syntax error."""

    @property
    def message(self) -> str:
        """What an operator reads (an Airflow import error, the cockpit's card, the CLI)."""
        return (
            f"pipeline {self.name!r} cannot be loaded from {self.file}: {self.error}. "
            f"Fix {self.file} (run `lakehouse validate {self.name}` to check it); its DAGs are left "
            "out until then, and every other pipeline runs on."
        )


@frozen
class Discovery:
    """What discovery found under a pipelines package: the pipelines that load, the ones that do
    not, and the deprecation warnings each loaded pipeline's declaration raised."""

    pipelines: dict[str, Pipeline]
    failures: dict[str, LoadFailure]
    deprecations: dict[str, tuple[str, ...]]


def load(package: str) -> Discovery:
    """Every pipeline under ``package``, each loaded on its own: one whose module fails to import,
    or whose pipeline or table names clash with one loaded before it (in name order), is a
    :class:`LoadFailure` and the others load. Table names are global (catalog names)."""
    try:
        root = importlib.import_module(package)
    except ModuleNotFoundError as exc:
        raise SpecError(
            f"pipelines package {package!r} cannot be imported ({exc}); "
            "set LAKEHOUSE_PIPELINES_PACKAGE or install the project (make bootstrap)"
        ) from exc
    pipelines: dict[str, Pipeline] = {}
    failures: dict[str, LoadFailure] = {}
    deprecations: dict[str, tuple[str, ...]] = {}
    owners: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        module_name = f"{package}.{info.name}.pipeline"
        file = _file_of(info, module_name)
        try:
            pipeline, warned = _load_one(package, info.name, module_name)
        except _NoPipeline:
            continue
        except Exception as exc:  # any failure of a user's module is that pipeline's own
            failures[info.name] = LoadFailure(info.name, module_name, file, _describe(exc))
            continue
        clash = _clash(pipeline, pipelines, owners)
        if clash:
            failures[info.name] = LoadFailure(info.name, module_name, file, f"SpecError: {clash}")
            continue
        for table in pipeline.table_names:
            owners[table] = pipeline.name
        pipelines[pipeline.name] = pipeline
        if warned:
            deprecations[pipeline.name] = warned
    return Discovery(pipelines, failures, deprecations)


def discover(package: str) -> dict[str, Pipeline]:
    """The pipelines under ``package`` that load, keyed by name (see :func:`load`; the ones that
    do not are left out, each with its reason in ``load(package).failures``)."""
    return load(package).pipelines


def deployed(conf: Settings) -> dict[str, Pipeline]:
    """The pipelines of ``conf`` that load, as this deployment runs them: each table's source of
    ``conf.ingest``, Kafka's brokers, the tables it cannot run set aside (``Pipeline.configured``)."""
    return {
        name: pipeline.configured(conf.ingest, conf.kafka_bootstrap_servers)
        for name, pipeline in discover(conf.pipelines_package).items()
    }


class _NoPipeline(Exception):
    """A helper package without a ``pipeline.py``."""


def _load_one(package: str, directory: str, module_name: str) -> tuple[Pipeline, tuple[str, ...]]:
    """The pipeline a module declares, and the deprecation warnings its import raised (recorded
    once, at its first import: they would be hidden outside ``__main__`` otherwise). A module
    already imported is taken as it is: catching warnings swaps process-wide state, which threads
    discovering at once (the cockpit's requests) must not do after the first import."""
    module = sys.modules.get(module_name)
    caught: list[warnings.WarningMessage] = []
    if module is None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name == module_name:
                    raise _NoPipeline from None
                raise
    for warning in caught:  # given back to the caller's filters (pytest, -W error, ...)
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    found = [v for v in vars(module).values() if isinstance(v, Pipeline)]
    if len(found) != 1:
        raise SpecError(f"{module_name} must define exactly one Pipeline, found {len(found)}")
    warned = tuple(
        f"{w.filename}:{w.lineno}: {w.message}" for w in caught if issubclass(w.category, DeprecationWarning)
    )
    return found[0].with_package(f"{package}.{directory}"), warned


def _clash(pipeline: Pipeline, pipelines: dict[str, Pipeline], owners: dict[str, str]) -> str | None:
    """Why ``pipeline`` cannot join those loaded before it, if it cannot."""
    if pipeline.name in pipelines:
        return f"two packages declare pipeline {pipeline.name!r}"
    for table in pipeline.table_names:
        if table in owners:
            return (
                f"table {table!r} is declared by pipelines {owners[table]!r} and {pipeline.name!r}; "
                "table names are global (they are catalog names): rename it in one of them"
            )
    return None


def _file_of(info: pkgutil.ModuleInfo, module_name: str) -> str:
    """The declaration's file, for messages (found without importing it)."""
    finder = info.module_finder
    path = getattr(finder, "path", None)
    return str(Path(path, info.name, "pipeline.py")) if path else module_name


def _describe(exc: BaseException) -> str:
    """``"<type>: <message>"``; a syntax error with its file and line."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}"


def get(package: str, name: str) -> Pipeline:
    """The named pipeline; loads however broken the others are."""
    found = load(package)
    if name in found.pipelines:
        return found.pipelines[name]
    if name in found.failures:
        raise SpecError(found.failures[name].message)
    known = ", ".join(sorted(found.pipelines)) or "none"
    raise SpecError(f"no pipeline named {name!r} in package {package!r} (known: {known})")


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
        except Exception as exc:  # the user's module raised, or misses a module: said where
            missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
            if missing and (candidate == missing or candidate.startswith(missing + ".")):
                continue  # this candidate does not exist; try the next
            raise SpecError(f"reference {ref!r}: {candidate} cannot be imported: {_describe(exc)}") from exc
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
