"""``lakehouse train`` (a Spark driver) and ``lakehouse models`` (versions, aliases, promotion;
Spark-free): the models pipelines declare (``Pipeline(models=[...])``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table as RichTable

from lakehouse.cli.kit import (
    PipelineArgument,
    UserError,
    all_pipelines,
    commands,
    console,
    load_pipeline,
    moment,
)
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.models.store import ModelStore
from lakehouse.slices import Slice
from lakehouse.spec import Model, Pipeline

app = typer.Typer()
models_app = typer.Typer(
    help="Model versions, their metrics and aliases; promote a version (no Spark).",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(models_app, name="models")


def _when(text: str) -> typer.models.OptionInfo:
    return typer.Option(help=f"{text}, UTC, e.g. 2026-03-01 or 2026-03-01T08:00 (empty: the model's window).")


def declared(name: str) -> tuple[Pipeline, Model]:
    """The pipeline declaring model ``name``, and its declaration."""
    for pipeline in all_pipelines().values():
        for model in pipeline.models:
            if model.name == name:
                return pipeline, model
    known = sorted(m.name for p in all_pipelines().values() for m in p.models)
    raise UserError(f"no model named {name!r} is declared (declared: {', '.join(known) or 'none'})")


def _range(start_text: str | None, end_text: str | None, what: str) -> Slice | None:
    start, end = moment(start_text, f"{what}-start"), moment(end_text, f"{what}-end")
    if (start is None) != (end is None):
        raise UserError(f"give both --{what}-start and --{what}-end, or neither (the model's default)")
    return Slice(start, end) if start and end else None


def train(
    pipeline: PipelineArgument,
    model: Annotated[
        str | None, typer.Option(help="Model to train (default: every model of the pipeline).")
    ] = None,
    train_start: Annotated[str | None, _when("Training range start")] = None,
    train_end: Annotated[str | None, _when("Training range end, exclusive")] = None,
    eval_start: Annotated[str | None, _when("Evaluation (held-out) range start")] = None,
    eval_end: Annotated[str | None, _when("Evaluation range end, exclusive")] = None,
    promote: Annotated[
        bool, typer.Option(help="Promote the new version if its metrics meet the model's promote_when.")
    ] = False,
    by: Annotated[str, typer.Option(help="Who trains (recorded with the version).")] = "lakehouse train",
) -> None:
    """Train a model on a range of its table, evaluate it on a later range, register the version.

    The version is recorded with its metrics and lineage (table, Delta version, ranges); with
    --promote it also becomes the one streams score with, if its metrics meet promote_when.
    """
    spec = load_pipeline(pipeline)
    chosen = [spec.model(model)] if model else list(spec.models)
    if not chosen:
        raise UserError(f"pipeline {pipeline!r} declares no model (Pipeline(models=[...]))")
    train_range, eval_range = _range(train_start, train_end, "train"), _range(eval_start, eval_end, "eval")
    from lakehouse.models.training import train as run_training  # deferred: Spark
    from lakehouse.state.session import spark_session

    conf = settings()
    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-train")
    refused = False
    for declaration in chosen:
        trained = run_training(
            spark, Lake.from_settings(conf), spec, declaration,
            train_range=train_range, eval_range=eval_range, promote=promote, by=by,
        )  # fmt: skip
        version = trained.version
        console.print(
            f"{version.name}: version {version.version} trained on {version.train_rows:,} rows of "
            f"{version.trained_on} (Delta version {version.trained_on_version}), evaluated on "
            f"{version.eval_rows:,}: {json.dumps(version.metrics)}"
        )
        if trained.promoted is not None:
            console.print(f"{version.name}: {trained.promoted.alias} -> version {version.version}")
        elif promote:
            refused = True
            console.print(f"{version.name}: not promoted: {'; '.join(trained.refused)}")
    if refused:
        raise typer.Exit(1)


@models_app.callback()
def models(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option("--model", "-m", help="One model (default: all).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the versions as JSON.")] = False,
) -> None:
    """Every version of the lake's models: when, from what, its metrics and aliases (no Spark)."""
    if ctx.invoked_subcommand is not None:
        return
    store = ModelStore(Lake.from_settings(settings()))
    versions = store.versions(name)
    pointing = {(move.name, move.alias): move.version for move in store.moves(name)}  # the latest move wins
    aliases: dict[tuple[str, int], list[str]] = {}
    for (model, alias), number in sorted(pointing.items()):
        aliases.setdefault((model, number), []).append(alias)
    if as_json:
        rows = [
            {**{k: str(v) if isinstance(v, datetime) else v for k, v in version.__dict__.items() if k != "artifact"},
             "aliases": aliases.get((version.name, version.version), [])}
            for version in versions
        ]  # fmt: skip
        typer.echo(json.dumps(rows, indent=1))
        return
    if not versions:
        console.print("no model versions yet: `lakehouse train <pipeline>` (or the <pipeline>_train DAG)")
        return
    view = RichTable(title="model versions", title_justify="left")
    for column in ("model", "version", "aliases", "created", "trained on", "train range", "metrics"):
        view.add_column(column)
    for v in versions:
        view.add_row(
            v.name, str(v.version), ", ".join(aliases.get((v.name, v.version), [])) or "-",
            f"{v.created_at:%Y-%m-%d %H:%M} by {v.created_by}", f"{v.trained_on} @ {v.trained_on_version}",
            Slice(v.train_start, v.train_end).label if v.train_start else "-",
            ", ".join(f"{k} {val:g}" for k, val in sorted(v.metrics.items())) or "-",
        )  # fmt: skip
    console.print(view, markup=False)


def promote(
    name: Annotated[str, typer.Argument(help="Model name, e.g. iot_anomaly.")],
    version: Annotated[int, typer.Argument(help="The version to promote.")],
    alias: Annotated[
        str | None, typer.Option(help="Alias to move (default: the model's, e.g. champion).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Promote even if the metrics miss promote_when.")] = False,
    by: Annotated[
        str, typer.Option(help="Who promotes (recorded with the move).")
    ] = "lakehouse models promote",
) -> None:
    """Point the model's alias (what streams score with) at a version, if its metrics allow.

    The version's metrics must meet the model's promote_when (or --force); running streams pick
    it up at their next micro-batch, without a restart.
    """
    _, model = declared(name)
    move = ModelStore(Lake.from_settings(settings())).promote(model, version, by=by, force=force, alias=alias)
    console.print(f"{name}: {move.alias} -> version {move.version} (was {move.previous})")


commands(app, train)
commands(models_app, promote)
