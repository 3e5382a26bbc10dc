"""Node conditions nodegc owns, in the shape of core/v1 NodeCondition (as node-problem-detector sets them)."""

from __future__ import annotations

from dataclasses import dataclass

RECLAIM_BLOCKED = "ResidueReclaimBlocked"
IP_RANGE_PRESSURE = "PodIPRangePressure"
CONDITION_TYPES = (RECLAIM_BLOCKED, IP_RANGE_PRESSURE)


@dataclass(frozen=True)
class NodeCondition:
    type: str
    status: str
    """"True" while the problem lasts, "False" once its cause is gone."""
    reason: str
    message: str

    @property
    def active(self) -> bool:
        return self.status == "True"
