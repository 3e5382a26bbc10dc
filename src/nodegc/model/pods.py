"""The desired state: pods the API says are bound to this node."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class OwnerState(StrEnum):
    LIVE = "live"
    PENDING = "pending"
    TERMINAL = "terminal"
    ABSENT = "absent"
    UNKNOWN = "unknown"


TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_STATE_OF_PHASE: dict[str | None, OwnerState] = {
    **dict.fromkeys(TERMINAL_PHASES, OwnerState.TERMINAL),
    "Running": OwnerState.LIVE,
    **dict.fromkeys((None, "", "Pending"), OwnerState.PENDING),
}
"""A pod's state by its phase (any other phase: unknown); asked thousands of times a scan."""


@dataclass(frozen=True, slots=True)
class Pod:
    uid: str
    namespace: str
    name: str
    node_name: str | None
    phase: str | None
    pod_ips: tuple[str, ...] = ()
    host_network: bool = False
    created_at: datetime | None = None
    static_uid: str | None = None
    """For a static pod's mirror: the kubelet's config hash, which is the UID its directory and CNI
    args carry on the node (kubernetes.io/config.mirror)."""

    @property
    def state(self) -> OwnerState:
        """Terminal only on a known terminal phase; a missing phase counts as pending, which protects."""
        return _STATE_OF_PHASE.get(self.phase, OwnerState.UNKNOWN)


@dataclass(frozen=True)
class DesiredState:
    """Pods bound to one node as one source saw them at one time."""

    node: str
    pods: tuple[Pod, ...]
    source: str
    fetched_at: datetime
    warnings: tuple[str, ...] = ()
    """What the source could not vouch for (how a snapshot's time was established, say), for the report."""
