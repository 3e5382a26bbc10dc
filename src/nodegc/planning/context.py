"""What every correlation domain shares: the indexes, the clock and the time rule, the findings so far.

Pure: no I/O. A domain module (kubelet objects, CNI attachments, ...) reads the inventory through this
context and appends findings; `correlate` runs the domains in order and then the cross-domain rules.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from nodegc import defaults
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import DesiredState, OwnerState
from nodegc.model.resources import Inventory, IPReservation
from nodegc.planning.owners import CacheIndex, PodIndex

HOLDING = frozenset({OwnerState.LIVE, OwnerState.PENDING, OwnerState.UNKNOWN})
"""Owner states in which the resource may be in use."""
GONE = frozenset({OwnerState.TERMINAL, OwnerState.ABSENT})


@dataclass(frozen=True)
class CorrelationPolicy:
    min_age_seconds: float = defaults.MIN_AGE_SECONDS


@dataclass
class Context:
    inv: Inventory
    desired: DesiredState
    pods: PodIndex
    cache: CacheIndex
    now: float
    policy: CorrelationPolicy
    findings: list[Finding] = field(default_factory=list)
    reservations_by_cid: dict[str, list[tuple[IPReservation, Finding]]] = field(
        default_factory=lambda: defaultdict(list))
    netns_class: dict[str, Finding] = field(default_factory=dict)
    network_ips: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Reserved IPs of each CNI network."""
    chain_ips: dict[str, set[str]] = field(default_factory=dict)
    """Pod IPs the CNI rules of each container id name."""

    @classmethod
    def build(cls, inv: Inventory, desired: DesiredState, now: datetime, policy: CorrelationPolicy) -> Context:
        return cls(inv=inv, desired=desired, pods=PodIndex.build(desired), cache=CacheIndex.build(inv.cni_cache),
                   now=now.timestamp(), policy=policy)

    def add(self, finding: Finding) -> Finding:
        self.findings.append(finding)
        return finding

    def young(self, mtime: float | None) -> bool:
        """Missing age protects: a resource whose age is unknown might be brand new."""
        return mtime is None or self.now - mtime < self.policy.min_age_seconds

    def age_note(self, mtime: float | None) -> str:
        if mtime is None:
            return "age unknown"
        return f"{self.now - mtime:.0f}s old, minimum age {self.policy.min_age_seconds:.0f}s"

    def pending_note(self) -> str | None:
        if not self.pods.unsettled:
            return None
        names = ", ".join(f"{p.namespace}/{p.name}" for p in self.pods.unsettled[:3])
        return f"pods still starting on this node (not Running with an IP) may own it: {names}"


def reclass(finding: Finding, cls: FindingClass, note: str) -> Finding:
    return Finding(cls, finding.kind, finding.id, finding.owner, finding.owner_state,
                   (*finding.evidence, note), netns=finding.netns, ip=finding.ip, sandbox=finding.sandbox)


def short(container_id: str | None) -> str:
    return container_id[:12] if container_id else "?"
