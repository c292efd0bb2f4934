"""The model registry: versions and aliases of every model, as two Delta tables of the lake that
anyone reads without Spark (delta-rs), and analysts query by name.

``models.versions``: one row per trained version (name, version, when and by whom, the table and
its Delta version it learned from, the training and evaluation ranges and row counts, the
metrics, the artifact as JSON with its SHA-256). Immutable: a version is never changed.

``models.aliases``: one row per move of an alias (``champion`` -> version 3, when, by whom, the
metrics that passed the gate, the version before). The latest move of an alias is where it
points; the rest is its history, so a backfill can tell which version was in force when.

The concepts are MLflow's (name, version, alias, metrics, lineage); MLflow itself does not
install beside the pinned stack (docs/design/models.md), and these tables need no server.
A version number is taken by a conditional commit (:func:`insert_unless_taken`): trainings that
run at once (two DAG runs, a CLI beside the DAG) get distinct numbers, the later one the next free.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
from deltalake.exceptions import CommitFailedError

from lakehouse.core.errors import UsageError
from lakehouse.monitoring.ops_tables import append_rows, insert_unless_taken, read_table

if TYPE_CHECKING:
    from lakehouse.core.lake import Lake
    from lakehouse.spec import Model

log = logging.getLogger("lakehouse.models")

REGISTER_ATTEMPTS = 100  # numbers tried before giving up: one per registration that got in first

VERSIONS_TABLE = "models.versions"
ALIASES_TABLE = "models.aliases"
_TS = pa.timestamp("us", tz="UTC")
VERSIONS_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("version", pa.int64()),
        ("created_at", _TS),
        ("created_by", pa.string()),
        ("pipeline", pa.string()),
        ("trained_on", pa.string()),
        ("trained_on_version", pa.int64()),
        ("train_start", _TS),
        ("train_end", _TS),
        ("eval_start", _TS),
        ("eval_end", _TS),
        ("train_rows", pa.int64()),
        ("eval_rows", pa.int64()),
        ("metrics", pa.string()),
        ("artifact", pa.string()),
        ("artifact_sha256", pa.string()),
    ]
)
ALIASES_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("alias", pa.string()),
        ("version", pa.int64()),
        ("previous", pa.int64()),
        ("set_at", _TS),
        ("set_by", pa.string()),
        ("reason", pa.string()),
    ]
)


class ModelUnavailable(UsageError):
    """No version of a model is promoted, or the version asked for does not exist."""


UNAVAILABLE = "model_unavailable"  # the quarantine's reason of a row waiting for a model version


class PromotionRefused(UsageError):
    """A version does not meet its model's promotion conditions (nothing was changed)."""


@dataclass(frozen=True)
class ModelVersion:
    name: str
    version: int
    created_at: datetime
    created_by: str
    pipeline: str | None = None
    trained_on: str | None = None
    trained_on_version: int | None = None
    train_start: datetime | None = None
    train_end: datetime | None = None
    eval_start: datetime | None = None
    eval_end: datetime | None = None
    train_rows: int = 0
    eval_rows: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    artifact: dict[str, Any] = field(default_factory=dict)
    artifact_sha256: str = ""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ModelVersion:
        values = {
            **row,
            "metrics": json.loads(row["metrics"] or "{}"),
            "artifact": json.loads(row["artifact"]),
        }
        return cls(**values)


@dataclass(frozen=True)
class AliasMove:
    name: str
    alias: str
    version: int
    previous: int | None
    set_at: datetime
    set_by: str
    reason: str


def artifact_text(artifact: dict[str, Any]) -> str:
    """The artifact as stored: JSON with sorted keys (its hash does not depend on dict order)."""
    return json.dumps(artifact, sort_keys=True, separators=(",", ":"))


class ModelStore:
    """Versions and aliases of the lake's models (see the module doc)."""

    def __init__(self, lake: Lake) -> None:
        self.versions_path = lake.table(VERSIONS_TABLE)
        self.aliases_path = lake.table(ALIASES_TABLE)

    # ------------------------------------------------------------------ versions
    def versions(self, name: str | None = None) -> list[ModelVersion]:
        """Every version (of ``name``), oldest first."""
        frame = read_table(self.versions_path, VERSIONS_SCHEMA)
        if name is not None:
            frame = frame.filter(pl.col("name") == name)
        return [ModelVersion.from_row(row) for row in frame.sort("name", "version").iter_rows(named=True)]

    def version(self, name: str, version: int) -> ModelVersion:
        found = [v for v in self.versions(name) if v.version == version]
        if not found:
            known = ", ".join(str(v.version) for v in self.versions(name)) or "none"
            raise ModelUnavailable(f"model {name!r} has no version {version} (versions: {known})")
        return found[0]

    def register(
        self, name: str, artifact: dict[str, Any], *, created_by: str, **lineage: Any
    ) -> ModelVersion:
        """Record a new version of ``name`` (the next free number) with its artifact and lineage."""
        text = artifact_text(artifact)
        for _ in range(REGISTER_ATTEMPTS):
            number = max((v.version for v in self.versions(name)), default=0) + 1
            row = {
                "name": name,
                "version": number,
                "created_at": datetime.now(UTC),
                "created_by": created_by,
                **lineage,
                "metrics": json.dumps(lineage.get("metrics") or {}, sort_keys=True),
                "artifact": text,
                "artifact_sha256": hashlib.sha256(text.encode()).hexdigest(),
            }
            try:
                if insert_unless_taken(self.versions_path, VERSIONS_SCHEMA, row, ("name", "version")):
                    log.info("model %s: registered version %d", name, number)
                    return ModelVersion.from_row(row)
            except CommitFailedError as exc:  # another registration committed meanwhile
                log.info(
                    "model %s: version %d was being taken by another registration (%s)", name, number, exc
                )
        raise UsageError(
            f"model {name!r}: no version number could be taken in {REGISTER_ATTEMPTS} attempts, as other "
            f"registrations kept committing first; retry the training when they are done ({self.versions_path})"
        )

    # ------------------------------------------------------------------ aliases
    def moves(self, name: str | None = None, alias: str | None = None) -> list[AliasMove]:
        """Every move of the aliases (of ``name``, of ``alias``), oldest first."""
        frame = read_table(self.aliases_path, ALIASES_SCHEMA)
        if name is not None:
            frame = frame.filter(pl.col("name") == name)
        if alias is not None:
            frame = frame.filter(pl.col("alias") == alias)
        return [AliasMove(**row) for row in frame.sort("set_at").iter_rows(named=True)]

    def aliased(self, name: str, alias: str) -> int | None:
        """The version ``alias`` points at, ``None`` if it was never set."""
        moves = self.moves(name, alias)
        return moves[-1].version if moves else None

    def in_force(self, name: str, alias: str) -> ModelVersion:
        """The version ``alias`` points at, loaded; :class:`ModelUnavailable` if there is none."""
        number = self.aliased(name, alias)
        if number is None:
            raise ModelUnavailable(
                f"model {name!r} has no version promoted to {alias!r}: train one (`lakehouse train "
                f"<pipeline>` or the <pipeline>_train DAG), then promote it (`lakehouse models promote "
                f"{name} <version>`)"
            )
        return self.version(name, number)

    def promote(
        self, model: Model, version: int, *, by: str, force: bool = False, alias: str | None = None
    ) -> AliasMove:
        """Point the model's alias at ``version`` if its metrics meet ``promote_when`` (or with
        ``force``): :class:`PromotionRefused` otherwise, and nothing changes."""
        alias = alias or model.alias
        chosen = self.version(model.name, version)
        failed = model.gate(chosen.metrics)
        if failed and not force:
            raise PromotionRefused(
                f"model {model.name!r} version {version} does not meet promote_when: {'; '.join(failed)}. "
                f"Nothing changed ({alias!r} stays at {self.aliased(model.name, alias)}); "
                "train a better version, or promote anyway with --force"
            )
        reason = {"metrics": chosen.metrics, "conditions": dict(model.promote_when), "forced": bool(failed)}
        move = AliasMove(
            name=model.name, alias=alias, version=version, previous=self.aliased(model.name, alias),
            set_at=datetime.now(UTC), set_by=by, reason=json.dumps(reason, sort_keys=True),
        )  # fmt: skip
        append_rows(self.aliases_path, ALIASES_SCHEMA, [move.__dict__])
        log.info("model %s: %s -> version %d (was %s), by %s", model.name, alias, version, move.previous, by)
        return move
