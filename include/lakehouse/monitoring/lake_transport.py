"""An OpenLineage transport into ``ops.lineage``, for OpenLineage clients other than the flows'.

Airflow's OpenLineage provider sends its DAG-run and task events through it when the user
configured no backend of their own (the platform sets ``AIRFLOW__OPENLINEAGE__TRANSPORT`` to it),
so a deploy's or a backfill's Airflow runs land beside the flow runs they started, each flow run
naming its task as parent. Its own module: importing ``openlineage.client`` costs a quarter of a
second, which only the processes that use this transport pay.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from openlineage.client.transport.transport import Config, Transport

from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.lineage import LineageLog

if TYPE_CHECKING:
    from openlineage.client.client import Event

log = logging.getLogger("lakehouse.lineage")

TRANSPORT = f"{__name__}.LakeTransport"  # the ``type`` an OpenLineage transport configuration names


class LakeTransportConfig(Config):
    """No options: the lake is the one the process's settings name (``LAKEHOUSE_ROOT``)."""

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> LakeTransportConfig:
        return cls()


class LakeTransport(Transport):
    kind = "lakehouse"
    config_class = LakeTransportConfig

    def __init__(self, config: LakeTransportConfig) -> None:
        self.log = LineageLog(Lake.from_settings(settings()))

    def emit(self, event: Event) -> None:
        if not hasattr(event, "run"):  # a dataset or job event (no run): ops.lineage keeps runs
            log.debug("not kept in ops.lineage (not a run event): %s", type(event).__name__)
            return
        self.log.emit(event)  # type: ignore[arg-type]
