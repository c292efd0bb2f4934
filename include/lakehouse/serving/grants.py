"""Read grants of the SQL server: which catalog tables each login may read.

An operator writes ``LAKEHOUSE_SQL_GRANTS_FILE``, a JSON object from login to what it may read,
by pipeline (its tables, their quarantines and change logs), schema or table; ``"*"`` as a login is what
every login may read (named logins get it too), ``"*"`` as a schema every table::

    {
      "*":       {"schemas": ["gold"]},
      "alice":   {"pipelines": ["iot"]},
      "bob":     {"tables": ["silver.device_events"]},
      "auditor": {"schemas": ["*"]}
    }

``lakehouse serve`` resolves it to table names (a pipeline's tables follow its spec, a schema's
the catalog) into a file the server's JVM reads (``ReadGrants.java``), and again after each
catalog refresh, so new tables and edited grants apply without a restart. Without the setting,
every login reads every table. Spark-free.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.core.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from lakehouse.spec import Pipeline

log = logging.getLogger("lakehouse.grants")

ANYONE = "*"
KINDS = ("pipelines", "schemas", "tables")
SYSTEM_PROPERTY = "lakehouse.sql.grantsFile"  # ReadGrants.FILE


class GrantsError(UsageError):
    """The grants file cannot be used; the message says what, where and how to fix it."""


@dataclass(frozen=True)
class Grant:
    """What one login may read, as the operator wrote it."""

    pipelines: frozenset[str] = frozenset()
    schemas: frozenset[str] = frozenset()
    tables: frozenset[str] = frozenset()


def read_grants(path: Path) -> dict[str, Grant]:
    """The operator's grants file, checked for shape (names are checked by :func:`resolve`)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise GrantsError(
            f"the grants file {path} does not exist; create it or unset LAKEHOUSE_SQL_GRANTS_FILE"
        ) from None
    except json.JSONDecodeError as exc:
        raise GrantsError(
            f'{path} is not JSON ({exc}); write an object like {{"alice": {{"schemas": ["gold"]}}}}'
        ) from None
    if not isinstance(raw, dict):
        raise GrantsError(f"{path} must hold a JSON object from login to grant, not {type(raw).__name__}")
    grants: dict[str, Grant] = {}
    for user, grant in raw.items():
        where = f"{path}, login {user!r}"
        if not isinstance(grant, dict) or set(grant) - set(KINDS):
            raise GrantsError(
                f"{where}: a grant is an object with some of {', '.join(KINDS)}, got {json.dumps(grant)}"
            )
        lists: dict[str, frozenset[str]] = {}
        for kind in KINDS:
            names = grant.get(kind, [])
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise GrantsError(f"{where}: {kind!r} must be a list of names, got {json.dumps(names)}")
            lists[kind] = frozenset(n.lower() for n in names)
        bad = sorted(t for t in lists["tables"] if t.count(".") != 1)
        if bad:
            raise GrantsError(f"{where}: tables are named schema.table, got {', '.join(bad)}")
        grants[user] = Grant(**lists)
    return grants


def resolve(
    grants: Mapping[str, Grant], pipelines: Mapping[str, Pipeline], catalog: Iterable[str]
) -> tuple[dict[str, list[str]], list[str]]:
    """Each login's readable tables (``"*"``'s included), and warnings for names that match nothing.

    ``catalog`` is every table name the server may register (declared and platform tables)."""
    known = {t.lower() for t in catalog} | {t.name.lower() for p in pipelines.values() for t in p.tables}
    by_pipeline = {
        name.lower(): {n.lower() for t in p.tables for n in (t.name, t.quarantine, t.changes)}
        for name, p in pipelines.items()
    }
    warnings: list[str] = []

    def tables_of(user: str, grant: Grant) -> set[str]:
        out: set[str] = set()
        for name in sorted(grant.pipelines):
            if name not in by_pipeline:
                warnings.append(f"{user}: no pipeline {name!r} (pipelines: {', '.join(sorted(by_pipeline))})")
            out |= by_pipeline.get(name, set())
        for schema in sorted(grant.schemas):
            matched = {t for t in known if schema in (ANYONE, t.split(".", 1)[0])}
            if not matched:
                warnings.append(f"{user}: no table in schema {schema!r} yet")
            out |= matched
        for table in sorted(grant.tables):
            if table not in known:
                warnings.append(f"{user}: no table {table!r} yet")
            out.add(table)
        return out

    everyone = tables_of(ANYONE, grants[ANYONE]) if ANYONE in grants else set()
    resolved = {ANYONE: sorted(everyone)}
    for user, grant in grants.items():
        if user != ANYONE:
            resolved[user] = sorted(everyone | tables_of(user, grant))
    return resolved, warnings


class Publisher:
    """Keeps the server's resolved grants file in step with the operator's file and the catalog."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self._last: tuple[dict[str, list[str]], tuple[str, ...]] | None = None

    def publish(self, pipelines: Mapping[str, Pipeline], catalog: Iterable[str]) -> bool:
        """Write the resolution when it changed (atomically: the JVM may read at any moment);
        True when it did. A broken file raises :class:`GrantsError` and keeps the last one."""
        resolved, warnings = resolve(read_grants(self.source), pipelines, catalog)
        if self._last is not None and self._last == (resolved, tuple(warnings)):
            return False
        for warning in warnings:
            log.warning("read grants (%s): %s", self.source, warning)
        handle, temporary = tempfile.mkstemp(dir=self.target.parent, prefix=".grants-")
        with os.fdopen(handle, "w") as out:
            json.dump(resolved, out, indent=1, sort_keys=True)
        Path(temporary).replace(self.target)
        self._last = (resolved, tuple(warnings))
        log.info(
            "read grants from %s: %s",
            self.source,
            "; ".join(f"{user}: {len(tables)} tables" for user, tables in sorted(resolved.items())),
        )
        return True
