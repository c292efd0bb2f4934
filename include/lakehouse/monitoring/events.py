"""``ops.events``: what happened to each pipeline, in order, queryable like any other table.

Deploys, stops, restarts by the monitor, plans, resets, backfills, replays, rescues, quality
verdicts, alerts and recoveries, missed freshness objectives: one row each, with who or what did
it (the Airflow user who triggered the DAG run, the scheduler, the monitor, or the person at the
``lakehouse`` command line), when, which flows or tables, the outcome, and links (the DAG run,
commit versions). Written Spark-free (delta-rs) where the operation happens, so the CLI and the
DAGs record alike; recording is idempotent (an event's id is a hash of what it says, and a row
with a taken id is not added again) and never fails the operation it records. Upkeep expires it
with the other ``ops`` tables; the cockpit shows a pipeline's events as a timeline.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import random
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import CommitFailedError

from lakehouse.core import times
from lakehouse.monitoring.ops_tables import APPEND_ATTEMPTS, EVENTS_TABLE, insert_unless_taken, read_table

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from lakehouse.core.lake import Lake

log = logging.getLogger("lakehouse.events")

SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("pipeline", pa.string()),
        ("kind", pa.string()),  # deploy, stop, restart, plan, reset, backfill, replay, rescue, quality, ...
        ("flows", pa.list_(pa.string())),
        ("outcome", pa.string()),  # succeeded, failed, missed, recovered, ...
        ("actor", pa.string()),
        ("dag_id", pa.string()),
        ("run_id", pa.string()),
        ("message", pa.string()),
        ("details", pa.string()),  # JSON: versions, ranges, counts
    ]
)


@dataclass(frozen=True)
class Actor:
    """Who or what acts: an Airflow DAG run (and the user who triggered it) or a command line."""

    name: str
    dag_id: str | None = None
    run_id: str | None = None


def current_actor() -> Actor:
    """The Airflow task this process runs (its DAG run's triggering user, else its run type), or
    the person at the command line."""
    dag_id, run_id = os.environ.get("AIRFLOW_CTX_DAG_ID"), os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    if dag_id:
        name = "Airflow"
        if "airflow.sdk" not in sys.modules:  # a process a task started (a driver): the run is known
            return Actor(name, dag_id, run_id)
        try:
            from airflow.sdk import get_current_context  # inside a task process only

            run = get_current_context()["dag_run"]
            user = getattr(run, "triggering_user_name", None)
            kind = getattr(run, "run_type", "run")
            name = f"{user} (Airflow)" if user else f"Airflow ({getattr(kind, 'value', kind)} run)"
        except Exception:  # a process a task started (a driver): the DAG run is still known
            log.debug("no Airflow context in this process", exc_info=True)
        return Actor(name, dag_id, run_id)
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return Actor(f"{user}@{socket.gethostname()} (lakehouse CLI)")


@dataclass(frozen=True)
class Event:
    pipeline: str
    kind: str
    outcome: str
    flows: Sequence[str] = ()
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    at: datetime | None = None
    actor: Actor | None = None

    def row(self) -> dict[str, Any]:
        actor = self.actor or current_actor()
        at = self.at or times.now()
        row = {
            "at": at,
            "pipeline": self.pipeline,
            "kind": self.kind,
            "flows": list(self.flows),
            "outcome": self.outcome,
            "actor": actor.name,
            "dag_id": actor.dag_id,
            "run_id": actor.run_id,
            "message": self.message[:10_000],
            "details": json.dumps(self.details, sort_keys=True, default=str),
        }
        said = json.dumps({k: v for k, v in row.items() if k != "at"}, sort_keys=True, default=str)
        # the same event recorded twice (a task's retry of the same step) is one row: its id is
        # what it says, and when, to the second
        row["event_id"] = hashlib.sha256(f"{at:%Y-%m-%dT%H:%M:%S}|{said}".encode()).hexdigest()[:24]
        return row


class EventLog:
    """Records to and reads ``ops.events``."""

    def __init__(self, lake: Lake) -> None:
        self.path = lake.table(EVENTS_TABLE)

    def record(self, event: Event) -> bool:
        """Add the event (unless recorded already); never raises: the operation it describes
        happened either way. True if it was added."""
        row = event.row()
        problem: Exception | None = None
        for attempt in range(1, APPEND_ATTEMPTS + 1):
            try:
                added = insert_unless_taken(self.path, SCHEMA, row, ("event_id",))
            except CommitFailedError as error:  # another writer committed first: read, insert again
                problem = error
                time.sleep(random.uniform(0.01, 0.05) * attempt)
                continue
            except Exception as error:
                problem = error
                break
            log.debug("event %s %s %s by %s", event.pipeline, event.kind, event.outcome, row["actor"])
            return added
        log.warning(
            "could not record the %s event of %s in %s: %s", event.kind, event.pipeline, EVENTS_TABLE, problem
        )
        return False

    def read(self, pipeline: str | None = None, since: datetime | None = None) -> pl.DataFrame:
        where = None
        if since is not None:
            where = pc.field("at") >= pa.scalar(since, SCHEMA.field("at").type)
        if pipeline is not None:
            same = pc.field("pipeline") == pipeline
            where = same if where is None else where & same
        return read_table(self.path, SCHEMA, where).sort("at")


def record(
    lake: Lake,
    pipeline: str,
    kind: str,
    outcome: str,
    flows: Sequence[str] = (),
    message: str = "",
    **details: Any,
) -> None:
    """Record one event of ``pipeline`` (see :class:`Event`) as the current actor."""
    EventLog(lake).record(Event(pipeline, kind, outcome, tuple(flows), message, details))


def last_outcome(lake: Lake, pipeline: str, kind: str, flow: str) -> str | None:
    """The outcome of the latest ``kind`` event of ``flow`` (None: none recorded, or the log
    cannot be read: the caller then records its event)."""
    try:
        recorded = EventLog(lake).read(pipeline)
    except Exception:
        log.warning("could not read %s", EVENTS_TABLE, exc_info=True)
        return None
    mine = recorded.filter((pl.col("kind") == kind) & pl.col("flows").list.contains(flow))
    return mine["outcome"][-1] if mine.height else None
