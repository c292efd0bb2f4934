"""How a table is written: one typed write mode per table, each carrying only what it needs.

==============================  ==================================================================
``Append()``                    insert every row once
``Append(keys=[...])``          insert once per key: deduplicated within the watermark
``Upsert(keys, sequence_by)``   keep the latest row per key, whatever order rows arrive in
``Aggregate(window, group_by)`` event-time windows, updated in place as late rows arrive
``Scd1(keys, sequence_by)``     a change feed applied as the current state of each key (type 1)
``Scd2(keys, sequence_by)``     a change feed applied as the history of each key (type 2)
``Recompute(keys)``             the transform over its upstreams' current contents (a
                                materialized view), recomputed when they change
==============================  ==================================================================

A write mode is a plugin: its declaration is one module here (a subclass of :class:`WriteMode`,
Spark-free, overriding only what differs from the defaults) and its writer one module of
``lakehouse.writes``, named by the declaration's ``writer``. Nothing else in the platform
branches on a mode's type: it asks the mode (``table.write``) through this protocol. A mode of
your own is a subclass in your package whose ``writer`` names your writer class.
"""

from lakehouse.spec.modes.aggregate import Aggregate
from lakehouse.spec.modes.append import Append
from lakehouse.spec.modes.base import CHANGE_OPERATIONS, Declared, OutputMode, Window, WriteMode
from lakehouse.spec.modes.recompute import Recompute
from lakehouse.spec.modes.scd import ChangeMode, Scd1, Scd2
from lakehouse.spec.modes.upsert import Upsert

__all__ = [
    "CHANGE_OPERATIONS",
    "Aggregate",
    "Append",
    "ChangeMode",
    "Declared",
    "OutputMode",
    "Recompute",
    "Scd1",
    "Scd2",
    "Upsert",
    "Window",
    "WriteMode",
]
