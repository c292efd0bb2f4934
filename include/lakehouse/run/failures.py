"""What a failed flow's error means for its operator: Spark's errors that have one known cause
and one known way out, said in a paragraph instead of a stack trace.

A flow whose lease passed to another process (it was frozen or cut off from the store longer
than the lease's time to live, and a successor took the flow over and fenced its tables) stops
with what the lease says, not with the stack trace of the refused commit.

A flow whose stateful operators changed (a key added to an aggregate's
``group_by``, another window, watermark or deduplication key) cannot restart on its checkpoint:
Spark refuses the state it stored for the old plan. Its own advice (turning
``spark.sql.streaming.stateStore.stateSchemaCheck`` off) would have the new plan misread that
state, so the way out is ``lakehouse reset``: new checkpoints, and the table and what reads it
rebuilt.
"""

from __future__ import annotations

import re

from lakehouse.plan import compatibility

# A foreachBatch function's LeaseLost, as the query's error carries it (with the Python traceback).
LEASE_LOST = re.compile(r"\bLeaseLost: ([^\n]+)")

# Spark's error classes for state that no longer matches the query's stateful operators.
INCOMPATIBLE_STATE = re.compile(
    r"\b(STATE_STORE_[A-Z_]*SCHEMA[A-Z_]*|STREAMING_STATEFUL_OPERATOR_[A-Z_]+|"
    r"STATE_STORE_[A-Z_]*OPERATOR[A-Z_]*|STATE_SCHEMA_[A-Z_]+)\b"
)


def explain(pipeline: str, flow: str, checkpoint: str, error: str) -> str:
    """``error`` (a failed query's exception text) with what to do, when its cause is known;
    else ``error`` unchanged."""
    if lost := LEASE_LOST.search(error):
        return (
            f"it stopped: {lost.group(1).strip()}; another process runs it now, and Delta refuses "
            "this one's commits from the moment the successor fenced the table (nothing was "
            "committed after that)"
        )
    found = INCOMPATIBLE_STATE.search(error)
    if found is None:
        return error
    return (
        "its stateful operators changed (a group_by key, window, watermark or deduplication "
        f"key?) and no longer match the state in its checkpoint {checkpoint} "
        f"(Spark: {found.group(1)}). It cannot restart there with the new code; do not turn "
        "Spark's state schema check off, the new plan would misread the old state. To run the "
        f"new code, {compatibility.rebuild(pipeline, flow)}."
    )
